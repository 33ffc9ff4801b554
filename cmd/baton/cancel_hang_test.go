package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/baton-run/baton/work"
)

// TestCancelGoHandlerIgnoresContext: a cancelled Go handler that ignores
// its context cannot be stopped, so the holder's hard deadline still holds
// (it leaves by lifetime + shutdown_grace, exit 1, the job pending); the
// slot's next holder finds the cancel request and dead-letters the job as
// cancelled without running it.
func TestCancelGoHandlerIgnoresContext(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.extraEnv = append(r.extraEnv, testHandler+"=hang")
	ctx := context.Background()
	id, err := work.Enqueue(ctx, r.client(), "default", []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	h := r.start("run", "--lifetime", "2s", "--jitter", "1ms", "--shutdown-grace", "1s")
	eventually(t, 20*time.Second, "the job runs", func() bool {
		loc, err := work.Locate(ctx, r.client(), "default", id)
		return err == nil && loc.State == work.StateRunning
	})
	res, err := work.Cancel(ctx, r.client(), "default", id)
	if err != nil || len(res) != 1 || res[0].Outcome != work.CancelRequested {
		t.Fatalf("cancel: %+v, %v", res, err)
	}
	code := h.wait(t, 30*time.Second)
	el := time.Since(start)
	t.Logf("holder left after %v (lifetime 2s + grace 1s + margin)", el)
	if code != 1 || el > 12*time.Second || !strings.Contains(h.log(), "hard deadline") {
		t.Fatalf("exit %d after %v: %s", code, el, h.log())
	}
	if d := r.deadOf("default", id); d != nil {
		t.Fatalf("dead-lettered by the holder that could not stop it: %+v", d)
	}
	// The next holder of the slot replays the job, sees the request and
	// dead-letters it unrun (its handler would hang again).
	h2 := r.start("run", "--lifetime", "30s", "--shutdown-grace", "1s")
	for end := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if d := r.deadOf("default", id); d != nil && d.Reason == work.ReasonCancelled {
			break
		}
		if time.Now().After(end) {
			loc, err := work.Locate(ctx, r.client(), "default", id)
			t.Fatalf("not dead-lettered as cancelled within 20s: %+v %v\n%s", loc, err, h2.log())
		}
	}
	if s := r.status(); s.Jobs.Pending != 0 || s.Jobs.Waiting != 0 {
		t.Fatalf("after the replay: %+v\n%s", *s.Jobs, h2.log())
	}
}
