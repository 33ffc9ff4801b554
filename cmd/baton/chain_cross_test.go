package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/baton-run/baton/work"
)

// TestChainAcrossQueuesCLI: `enqueue --after QUEUE:ID` blocks a job on
// another queue's job; real holders of both queues run them in order,
// once. A dependency cancelled while no holder of its queue runs (as if
// the holder that settled it was killed before forwarding) leaves the
// release in its queue's outbox: the next holder delivers it and the
// dependent is dead-lettered as dependency_failed. Bad names: exit 2.
func TestChainAcrossQueuesCLI(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.fresh("up")
	log := r.dir + "/ran"
	a := r.enqueueOne("--queue", "up", "a")
	b := r.enqueueOne("--after", "up:"+a, "b")
	if out, errOut, code := r.baton("job", b); code != 0 || !strings.Contains(out, "blocked, waiting for up:"+a) {
		t.Fatalf("job %s: exit %d, %q %s; want blocked, waiting for up:%s", b, code, out, errOut, a)
	}
	for _, bad := range []struct{ after, says string }{
		{"up:nope", "not a job id"},
		{"{up}:" + a, "not a job id"},
		{"nowhere:" + a, "no such job to wait for on queue nowhere"},
	} {
		out, errOut, code := r.baton("enqueue", "--after", bad.after, "x")
		if code != 2 || out != "" || !strings.Contains(errOut, bad.says) {
			t.Errorf("enqueue --after %q: exit %d, out %q, err %q; want exit 2 saying %q", bad.after, code, out, errOut, bad.says)
		}
	}
	a3 := r.enqueueOne("--queue", "up", "a3")
	b3 := r.enqueueOne("--after", "up:"+a3, "b3")
	if _, errOut, code := r.baton("cancel", "--queue", "up", a3); code != 0 {
		t.Fatalf("cancel: exit %d: %s", code, errOut)
	}
	if l := r.locate(b3); l.State != work.StateBlocked {
		t.Fatalf("b3 before any holder of up: %+v, want blocked", l)
	}
	r.start("run", "--queue", "up", "--lifetime", "1m", "--poll-interval", "50ms", "--", r.chainJob(log))
	r.start("run", "--lifetime", "1m", "--poll-interval", "50ms", "--", r.chainJob(log))
	eventually(t, 20*time.Second, "a and b ran, b3 dead", func() bool {
		return len(ran(t, log)) >= 2 && r.locate(b3).State == work.StateDead
	})
	time.Sleep(200 * time.Millisecond) // a third run would show now
	if got := ran(t, log); len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Fatalf("ran %v, want a then b, each once", got)
	}
	if l := r.locate(b3); l.Dead == nil || l.Dead.Reason != work.ReasonDependencyFailed {
		t.Fatalf("b3: %+v, want dead, dependency_failed", l)
	}
	if n := r.client().LLen(context.Background(), "baton:{up}:chains:outbox").Val(); n != 0 {
		t.Fatalf("up's outbox still holds %d", n)
	}
}
