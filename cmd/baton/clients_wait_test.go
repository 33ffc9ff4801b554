package main

import (
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-run/baton/work"
)

// TestClientsWaitAndResult: the Python and Node clients' wait(id) and
// result(id) answer as Go's work.Wait and work.Result, running the same
// scripts: waits registered before the job ran (one per client) are woken
// by its ack with its result, binary bytes intact; a job already done
// answers at once; a failed or cancelled job is JobDead with its reason; a
// job not done is NotDone with its state, and a wait for it ends at its
// timeout and leaves no waiter behind; an unknown job and a bad id are
// refused as Go refuses them.
func TestClientsWaitAndResult(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.extraEnv = quickExit()
	ctx := context.Background()
	enqueue := func(args ...string) string {
		out, errOut, code := r.baton(append([]string{"enqueue"}, args...)...)
		if code != 0 {
			t.Fatalf("enqueue %v: exit %d %s", args, code, errOut)
		}
		return strings.TrimSpace(out)
	}
	ok := enqueue("ok")
	fails := enqueue("--max-attempts", "1", "fail")
	later := enqueue("--in", "1h", "later")
	cancelled := enqueue("--in", "1h", "cancelled")
	if _, errOut, code := r.baton("cancel", cancelled); code != 0 {
		t.Fatalf("cancel: exit %d %s", code, errOut)
	}
	want := "res\x00\xff\n"
	wantB64 := base64.StdEncoding.EncodeToString([]byte(want))

	// Waits registered before the job runs, one per client.
	type waited struct {
		p   producer
		res []map[string]any
	}
	ch := make(chan waited, 2)
	for _, p := range producers[1:] {
		go func() {
			ch <- waited{p, r.drive(p, "default", nil, map[string]any{"op": "wait", "id": ok, "timeout_ms": 60000})}
		}()
	}
	eventually(t, 60*time.Second, "both clients wait", func() bool {
		n, _ := r.client().HGet(ctx, work.KeysFor("default").Waiters, ok).Int()
		return n == 2
	})
	job := r.script("job.sh", `case "$(cat)" in ok) printf 'res\000\377\n' > "$BATON_RESULT_FILE" ;; *) exit 3 ;; esac`)
	h := r.start("run", "--lifetime", "1m", "--retention", "1h", "--standby-slots", "0", "--shutdown-grace", "500ms", "--", job)
	defer func() {
		_ = h.cmd.Process.Signal(syscall.SIGTERM)
		h.wait(t, 15*time.Second)
	}()
	for range 2 {
		select {
		case w := <-ch:
			if w.res[0]["result"] != wantB64 {
				t.Errorf("%s: wait(ok) = %v, want result %q", w.p, w.res[0], want)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("a client's wait did not return\n%s", h.log())
		}
	}
	eventually(t, 20*time.Second, "the failed job dead", func() bool { return r.deadOf("default", fails) != nil })

	// Go says the same.
	if b, err := work.Result(ctx, r.client(), "default", ok); err != nil || string(b) != want {
		t.Fatalf("work.Result = %q, %v", b, err)
	}
	var dead *work.DeadError
	if _, err := work.Wait(ctx, r.client(), "default", fails); !errors.As(err, &dead) || dead.Reason != "failed" {
		t.Fatalf("work.Wait(fails) = %v", err)
	}
	_, unknownErr := work.Result(ctx, r.client(), "default", "1-0")
	_, badErr := work.Locate(ctx, r.client(), "default", "abc")
	for _, p := range producers[1:] {
		res := r.drive(p, "default", nil,
			map[string]any{"op": "result", "id": ok},
			map[string]any{"op": "wait", "id": ok},
			map[string]any{"op": "wait", "id": fails},
			map[string]any{"op": "wait", "id": cancelled},
			map[string]any{"op": "result", "id": fails},
			map[string]any{"op": "result", "id": later},
			map[string]any{"op": "wait", "id": later, "timeout_ms": 300},
			map[string]any{"op": "result", "id": "1-0"},
			map[string]any{"op": "wait", "id": "1-0"},
			map[string]any{"op": "wait", "id": "abc"},
		)
		check := func(i int, what string, ok bool) {
			if !ok {
				t.Errorf("%s: %s: %v", p, what, res[i])
			}
		}
		check(0, "result(ok)", res[0]["result"] == wantB64)
		check(1, "wait(ok), done", res[1]["result"] == wantB64)
		check(2, "wait(fails): JobDead failed", res[2]["class"] == "JobDead" && res[2]["reason"] == "failed" && res[2]["cancelled"] == false)
		check(3, "wait(cancelled): JobDead cancelled", res[3]["class"] == "JobDead" && res[3]["reason"] == "cancelled" && res[3]["cancelled"] == true)
		check(4, "result(fails): NotDone dead", res[4]["class"] == "NotDone" && res[4]["state"] == "dead")
		check(5, "result(later): NotDone scheduled", res[5]["class"] == "NotDone" && res[5]["state"] == "scheduled")
		check(6, "wait(later, 300ms): TimeoutError", res[6]["class"] == "TimeoutError")
		check(7, "result(1-0): UnknownJob as Go says", res[7]["class"] == "UnknownJob" && res[7]["error"] == unknownErr.Error())
		check(8, "wait(1-0): UnknownJob", res[8]["class"] == "UnknownJob" && strings.Contains(res[8]["error"].(string), "job unknown on queue default"))
		check(9, "wait(abc): not a job id", res[9]["error"] == badErr.Error())
	}
	if n, err := r.client().HLen(ctx, work.KeysFor("default").Waiters).Result(); err != nil || n != 0 {
		t.Errorf("waiters left behind: %d %v", n, err)
	}
}
