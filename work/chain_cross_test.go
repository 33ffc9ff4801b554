package work

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/redis/go-redis/v9"
)

func enqueueIn(tb testing.TB, rdb redis.Cmdable, q, payload string, opts ...Option) string {
	tb.Helper()
	id, err := Enqueue(context.Background(), rdb, q, []byte(payload), opts...)
	if err != nil {
		tb.Fatalf("enqueue %s on %s: %v", payload, q, err)
	}
	return id
}

func stateIn(tb testing.TB, rdb redis.Cmdable, q, id string) *Location {
	tb.Helper()
	l, err := Locate(context.Background(), rdb, q, id)
	if err != nil {
		tb.Fatal(err)
	}
	return l
}

// holder runs one holder of queue q until stop holds.
func holder(t *testing.T, rdb redis.UniversalClient, q string, h Handler, stop func() bool) {
	t.Helper()
	c := testConfig2(rdb, h)
	c.Queue = q
	if err := runUntil(t, c, new(Stats), stop); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}

// A job of queue qb after a job of queue qa (and one of its own queue):
// blocked, waiting for both, until qa's holder acknowledges its
// dependency and forwards the release; then it runs once.
func TestChainAcrossQueues(t *testing.T) {
	rdb := redistest.Start(t).Client()
	a := enqueueIn(t, rdb, "qa", "a")
	x := enqueueIn(t, rdb, "qb", "x")
	b := enqueueIn(t, rdb, "qb", "b", AfterIn("qa", a), After(x))
	if l := stateIn(t, rdb, "qb", b); l.State != StateBlocked || !slices.Equal(l.WaitingFor, []string{"qa:" + a, x}) {
		t.Fatalf("b: %+v, want blocked, waiting for qa:%s and %s", l, a, x)
	}
	var o order
	holder(t, rdb, "qb", o.handler(), func() bool { return slices.Contains(o.list(), "x") })
	if l := stateIn(t, rdb, "qb", b); l.State != StateBlocked || !slices.Equal(l.WaitingFor, []string{"qa:" + a}) {
		t.Fatalf("b after x: %+v, want blocked on qa:%s", l, a)
	}
	holder(t, rdb, "qa", o.handler(), func() bool {
		return stateIn(t, rdb, "qb", b).State == StateWaiting
	})
	holder(t, rdb, "qb", o.handler(), func() bool { return slices.Contains(o.list(), "b") })
	if ran := o.list(); !slices.Equal(ran, []string{"x", "a", "b"}) {
		t.Fatalf("ran %v, want x a b", ran)
	}
	// The same form names the job's own queue: "qb:x" is x.
	z := enqueueIn(t, rdb, "qb", "z")
	y := enqueueIn(t, rdb, "qb", "y", After("qb:"+z))
	if l := stateIn(t, rdb, "qb", y); l.State != StateBlocked || !slices.Equal(l.WaitingFor, []string{z}) {
		t.Fatalf("y: %+v, want blocked on %s", l, z)
	}
}

// A forward repeated (a forwarder killed after delivering, before it
// cleared the outbox) changes nothing; a release that arrives before the
// dependent's blocking is written (its dependency settled in between) is
// read by that write.
func TestChainAcrossQueuesForwardOnce(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	a := enqueueIn(t, rdb, "qa", "a")
	a2 := enqueueIn(t, rdb, "qa", "a2", In(time.Hour))
	b := enqueueIn(t, rdb, "qb", "b", AfterIn("qa", a, a2))
	m := rdb.SMembers(ctx, KeysFor("qa").AwaitedBy(a)).Val()
	if len(m) != 1 || !strings.HasPrefix(m[0], ">qb "+b+" ") {
		t.Fatalf("a's dependents %q, want b of qb", m)
	}
	var o order
	holder(t, rdb, "qa", o.handler(), func() bool {
		l := stateIn(t, rdb, "qb", b)
		return l.State == StateBlocked && slices.Equal(l.WaitingFor, []string{"qa:" + a2})
	})
	left := rdb.HGet(ctx, KeysFor("qb").BlockedLeft(), b).Val()
	rdb.RPush(ctx, KeysFor("qa").chainOutbox(), "done "+a+" "+m[0][1:])
	if n, err := ForwardChains(ctx, rdb, "qa"); err != nil || n != 1 {
		t.Fatal(n, err)
	}
	if got := rdb.HGet(ctx, KeysFor("qb").BlockedLeft(), b).Val(); got != left || !strings.HasPrefix(got, "1 ") {
		t.Fatalf("b's count %q after a replayed release, want %q (one left)", got, left)
	}

	// The race: c registers with a2, a2 dies and its release is forwarded
	// before c's blocking is written; the write reads the early marker.
	o2 := &jobOptions{after: []string{"qa:" + a2}}
	deps := map[string]*Location{"qa:" + a2: stateIn(t, rdb, "qa", a2)}
	job := ""
	hints, err := blockCross(ctx, rdb, "qb", &job, o2, deps, false)
	if err != nil || !strings.HasPrefix(hints["qa:"+a2], "X l ") {
		t.Fatal(hints, err)
	}
	if res, err := Cancel(ctx, rdb, "qa", a2); err != nil || res[0].Outcome != CancelDone {
		t.Fatal(res, err)
	}
	if _, err := ForwardChains(ctx, rdb, "qa"); err != nil {
		t.Fatal(err)
	}
	k := KeysFor("qb")
	keys := []string{k.Stream, k.High, k.Low, k.Scheduled, k.ScheduledJobs, k.Retry, k.Blocked(), k.BlockedLeft(),
		k.Awaited(), k.Done, k.Dead, k.DeadIndex, k.Stats, k.Stream}
	v, err := runScript(ctx, rdb, blockScript, keys, job, chainRecord([]byte("c"), o2), 0, "", "0", 10000, 0, "qa:"+a2, hints["qa:"+a2]).StringSlice()
	if err != nil || v[0] != "dead" {
		t.Fatalf("c's blocking after its dependency's early release: %v %v, want dead", v, err)
	}
	for _, id := range []string{b, job} {
		if l := stateIn(t, rdb, "qb", id); l.State != StateDead || l.Dead.Reason != ReasonDependencyFailed {
			t.Fatalf("job %s: %+v, want dead, dependency_failed", id, l)
		}
	}
}

// A holder of the dependency's queue killed between the settle and the
// forward (here: a cancel, which leaves forwarding to the holders) leaves
// the release in the outbox; the next holder delivers it. A dead
// dependency fails the dependent, and the jobs after it in its own and a
// third queue; requeuing them in order runs them.
func TestChainAcrossQueuesDependencyDead(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	a := enqueueIn(t, rdb, "qa", "a")
	b := enqueueIn(t, rdb, "qb", "b", AfterIn("qa", a))
	c := enqueueIn(t, rdb, "qb", "c", After(b))
	d := enqueueIn(t, rdb, "qc", "d", AfterIn("qb", b))
	if res, err := Cancel(ctx, rdb, "qa", a); err != nil || res[0].Outcome != CancelDone {
		t.Fatal(res, err)
	}
	if n := rdb.LLen(ctx, KeysFor("qa").chainOutbox()).Val(); n != 1 {
		t.Fatalf("qa's outbox holds %d, want the one release", n)
	}
	if l := stateIn(t, rdb, "qb", b); l.State != StateBlocked {
		t.Fatalf("b before any forward: %+v, want still blocked", l)
	}
	var o order
	holder(t, rdb, "qa", o.handler(), func() bool { return stateIn(t, rdb, "qc", d).State == StateDead })
	for _, j := range []struct{ q, id string }{{"qb", b}, {"qb", c}, {"qc", d}} {
		if l := stateIn(t, rdb, j.q, j.id); l.State != StateDead || l.Dead.Reason != ReasonDependencyFailed {
			t.Fatalf("job %s of %s: %+v, want dead, dependency_failed", j.id, j.q, l)
		}
	}
	// A dependent requeued before its dependency is refused.
	if _, err := RequeueDead(ctx, rdb, "qb", b); !errors.Is(err, ErrDependencyDead) {
		t.Fatalf("requeue b before a: %v, want ErrDependencyDead", err)
	}
	for _, j := range []struct{ q, id string }{{"qa", a}, {"qb", b}, {"qb", c}, {"qc", d}} {
		if got, err := RequeueDead(ctx, rdb, j.q, j.id); err != nil || got != j.id {
			t.Fatalf("requeue %s of %s: %s, %v", j.id, j.q, got, err)
		}
	}
	if l := stateIn(t, rdb, "qb", b); l.State != StateBlocked || !slices.Equal(l.WaitingFor, []string{"qa:" + a}) {
		t.Fatalf("b requeued: %+v, want blocked on qa:%s", l, a)
	}
	holder(t, rdb, "qa", o.handler(), func() bool { return stateIn(t, rdb, "qb", b).State == StateWaiting })
	holder(t, rdb, "qb", o.handler(), func() bool {
		return slices.Contains(o.list(), "c") && stateIn(t, rdb, "qc", d).State == StateWaiting
	})
	holder(t, rdb, "qc", o.handler(), func() bool { return slices.Contains(o.list(), "d") })
	if ran := o.list(); !slices.Equal(ran, []string{"a", "b", "c", "d"}) {
		t.Fatalf("ran %v, want a b c d", ran)
	}
}

// Bad names add nothing: not a job id, not a queue name, a job not on the
// queue named, a queue that holds nothing.
func TestChainAcrossQueuesBadNames(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	a := enqueueIn(t, rdb, "qa", "a")
	for _, bad := range []string{"qa:nope", "{x}:" + a, ":" + a, "q a:" + a, "qa:" + a + "x"} {
		if _, err := Enqueue(ctx, rdb, "qb", []byte("b"), After(bad)); !errors.Is(err, ErrBadOption) {
			t.Errorf("after %q: %v, want ErrBadOption", bad, err)
		}
	}
	if _, err := Enqueue(ctx, rdb, "qb", []byte("b"), AfterIn("qa")); !errors.Is(err, ErrBadOption) {
		t.Errorf("AfterIn with no id: %v, want ErrBadOption", err)
	}
	for _, missing := range []string{"qb:" + a, "nowhere:" + a, "qa:1-0"} {
		_, err := Enqueue(ctx, rdb, "qb", []byte("b"), After(missing))
		if !errors.Is(err, ErrNoDependency) {
			t.Errorf("after %q: %v, want ErrNoDependency", missing, err)
		}
	}
	if n, _ := ReadCounts(ctx, rdb, "qb"); n.Blocked != 0 || n.Waiting != 0 {
		t.Fatalf("qb after bad names: %+v, want empty", n)
	}
	if n := rdb.Exists(ctx, KeysFor("qa").Awaited()).Val(); n != 0 {
		t.Fatal("a bad name registered a dependent")
	}
}

// A dependency already done (kept by the retention) or dead when the
// dependent is enqueued: waiting at once, or dead-lettered at once.
func TestChainAcrossQueuesSettledBefore(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	a := enqueueIn(t, rdb, "qa", "a")
	f := enqueueIn(t, rdb, "qa", "f")
	var o order
	c := testConfig2(rdb, o.handler("f"))
	c.Queue, c.Retention = "qa", time.Hour
	runUntil(t, c, new(Stats), func() bool { return len(o.list()) == 2 && stateIn(t, rdb, "qa", f).State == StateDead })
	b := enqueueIn(t, rdb, "qb", "b", AfterIn("qa", a))
	if l := stateIn(t, rdb, "qb", b); l.State != StateWaiting {
		t.Fatalf("after a done job: %+v, want waiting", l)
	}
	id, err := Enqueue(ctx, rdb, "qb", []byte("d"), AfterIn("qa", f))
	if !errors.Is(err, ErrDependencyDead) {
		t.Fatalf("after a dead job: %v, want ErrDependencyDead", err)
	}
	if l := stateIn(t, rdb, "qb", id); l.State != StateDead || l.Dead.Reason != ReasonDependencyFailed {
		t.Fatalf("after a dead job: %+v, want dead, dependency_failed", l)
	}
}

// On a Cluster with the two queues on different nodes: the release crosses
// through the outbox, once, a replayed forward included.
func TestChainAcrossQueuesOnCluster(t *testing.T) {
	cc := clusterClient(t, 3)
	ctx := context.Background()
	src := "qa"
	dst := queueOnOtherNode(ctx, cc, src, "qb")
	a := enqueueIn(t, cc, src, "a")
	a2 := enqueueIn(t, cc, src, "a2", In(time.Hour))
	b := enqueueIn(t, cc, dst, "b", AfterIn(src, a))
	b2 := enqueueIn(t, cc, dst, "b2", AfterIn(src, a, a2))
	m := cc.SMembers(ctx, KeysFor(src).AwaitedBy(a)).Val()
	var o order
	holder(t, cc, src, o.handler(), func() bool { return stateIn(t, cc, dst, b).State == StateWaiting })
	// A forwarder killed before it cleared the outbox: delivered again.
	for _, it := range m {
		cc.RPush(ctx, KeysFor(src).chainOutbox(), "done "+a+" "+it[1:])
	}
	if _, err := ForwardChains(ctx, cc, src); err != nil {
		t.Fatal(err)
	}
	if l := stateIn(t, cc, dst, b2); l.State != StateBlocked || !slices.Equal(l.WaitingFor, []string{src + ":" + a2}) {
		t.Fatalf("b2: %+v, want blocked on %s:%s only", l, src, a2)
	}
	holder(t, cc, dst, o.handler(), func() bool { return slices.Contains(o.list(), "b") })
	if ran := o.list(); !slices.Equal(ran, []string{"a", "b"}) {
		t.Fatalf("ran %v, want a b", ran)
	}
}
