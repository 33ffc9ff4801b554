package work

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/faultproxy"
	"github.com/baton-run/baton/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// order records the payloads a handler ran, in order.
type order struct {
	mu  sync.Mutex
	ran []string
}

func (o *order) handler(fail ...string) Handler {
	return HandlerFunc(func(_ context.Context, j *Job) error {
		o.mu.Lock()
		defer o.mu.Unlock()
		o.ran = append(o.ran, string(j.Payload))
		if slices.Contains(fail, string(j.Payload)) {
			return ErrSkipRetry
		}
		return nil
	})
}

func (o *order) list() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.ran)
}

func mustEnqueue(tb testing.TB, rdb redis.Cmdable, payload string, opts ...Option) string {
	tb.Helper()
	id, err := Enqueue(context.Background(), rdb, "q", []byte(payload), opts...)
	if err != nil {
		tb.Fatalf("enqueue %s: %v", payload, err)
	}
	return id
}

func state(tb testing.TB, rdb redis.Cmdable, id string) *Location {
	tb.Helper()
	l, err := Locate(context.Background(), rdb, "q", id)
	if err != nil {
		tb.Fatal(err)
	}
	return l
}

// A chain A→B→C runs in order; C after A and B (fan-in) runs once both
// are done; blocked jobs are counted and located with what they wait for.
func TestChainRunsInOrder(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	a := mustEnqueue(t, rdb, "a")
	b := mustEnqueue(t, rdb, "b", After(a))
	c := mustEnqueue(t, rdb, "c", After(b), WithPriority(PriorityHigh))
	x := mustEnqueue(t, rdb, "x")
	fan := mustEnqueue(t, rdb, "fan", After(a, x, a))
	if l := state(t, rdb, b); l.State != StateBlocked || !slices.Equal(l.WaitingFor, []string{a}) {
		t.Fatalf("b: %+v, want blocked, waiting for %s", l, a)
	}
	if l := state(t, rdb, fan); l.State != StateBlocked || !slices.Equal(l.WaitingFor, []string{a, x}) {
		t.Fatalf("fan: %+v, want blocked, waiting for %s and %s", l, a, x)
	}
	if n, err := ReadCounts(ctx, rdb, "q"); err != nil || n.Blocked != 3 || n.Waiting != 2 {
		t.Fatalf("counts %+v (%v), want 3 blocked, 2 waiting", n, err)
	}
	var o order
	st := new(Stats)
	if err := runUntil(t, testConfig(rdb, o.handler()), st, func() bool { return st.Done.Load() == 5 }); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	ran := o.list()
	pos := func(s string) int { return slices.Index(ran, s) }
	if len(ran) != 5 || pos("a") > pos("b") || pos("b") > pos("c") || pos("fan") < pos("a") || pos("fan") < pos("x") {
		t.Fatalf("ran %v, want a before b before c, fan after a and x, each once", ran)
	}
	settled(t, rdb, "q")
	for _, key := range []string{KeysFor("q").Blocked(), KeysFor("q").BlockedLeft(), KeysFor("q").Awaited(), KeysFor("q").AwaitedBy(a), KeysFor("q").AwaitedBy(x)} {
		if n := rdb.Exists(ctx, key).Val(); n != 0 {
			t.Errorf("%s left behind", key)
		}
	}
	_ = c
}

// A dead dependency dead-letters its dependents, and theirs, as
// dependency_failed; requeuing the dependency, then the dependents, runs
// them all in order.
func TestChainDependencyDead(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	a := mustEnqueue(t, rdb, "a")
	b := mustEnqueue(t, rdb, "b", After(a), UniqueKey("ub"))
	c := mustEnqueue(t, rdb, "c", After(b))
	var o order
	fail := true
	var mu sync.Mutex
	h := HandlerFunc(func(ctx context.Context, j *Job) error {
		mu.Lock()
		f := fail && string(j.Payload) == "a"
		mu.Unlock()
		o.mu.Lock()
		o.ran = append(o.ran, string(j.Payload))
		o.mu.Unlock()
		if f {
			return ErrSkipRetry
		}
		return nil
	})
	st := new(Stats)
	runUntil(t, testConfig(rdb, h), st, func() bool { return st.Dead.Load() == 1 && state(t, rdb, c).State == StateDead })
	for _, id := range []string{b, c} {
		l := state(t, rdb, id)
		if l.State != StateDead || l.Dead.Reason != ReasonDependencyFailed {
			t.Fatalf("job %s: %+v, want dead, dependency_failed", id, l)
		}
	}
	if n := rdb.Exists(ctx, KeysFor("q").Unique("ub")).Val(); n != 0 {
		t.Error("b's unique key still held after it was dead-lettered")
	}
	// A dependent requeued first waits again: its dependency is dead.
	if _, err := RequeueDead(ctx, rdb, "q", b); !errors.Is(err, ErrDependencyDead) {
		t.Fatalf("requeue b before a: %v, want ErrDependencyDead", err)
	}
	mu.Lock()
	fail = false
	mu.Unlock()
	for _, id := range []string{a, b, c} {
		if got, err := RequeueDead(ctx, rdb, "q", id); err != nil || got != id {
			t.Fatalf("requeue %s: %s, %v", id, got, err)
		}
	}
	if l := state(t, rdb, c); l.State != StateBlocked {
		t.Fatalf("c requeued: %+v, want blocked", l)
	}
	o.ran = nil
	st = new(Stats)
	runUntil(t, testConfig(rdb, h), st, func() bool { return st.Done.Load() == 3 })
	if ran := o.list(); !slices.Equal(ran, []string{"a", "b", "c"}) {
		t.Fatalf("after requeue ran %v, want a b c", ran)
	}
}

// A dependency already done (kept by the retention) unblocks at once; one
// dead dead-letters the new job at once; one that does not exist, a bad
// id, adds nothing.
func TestChainEnqueueChecks(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	a := mustEnqueue(t, rdb, "a")
	d := mustEnqueue(t, rdb, "d")
	var o order
	st := new(Stats)
	c := testConfig(rdb, o.handler("d"))
	c.Retention = time.Hour
	runUntil(t, c, st, func() bool { return st.Done.Load() == 1 && st.Dead.Load() == 1 })
	b := mustEnqueue(t, rdb, "b", After(a), In(time.Hour))
	if l := state(t, rdb, b); l.State != StateScheduled {
		t.Fatalf("b after a done job, delayed: %+v, want scheduled at once", l)
	}
	b2 := mustEnqueue(t, rdb, "b2", After(a))
	if l := state(t, rdb, b2); l.State != StateWaiting {
		t.Fatalf("b2 after a done job: %+v, want waiting at once", l)
	}
	id, err := Enqueue(ctx, rdb, "q", []byte("e"), After(a, d))
	var de *DependencyError
	if !errors.As(err, &de) || de.Deps[0] != d || id == "" {
		t.Fatalf("after a dead job: %s, %v, want a DependencyError naming %s", id, err, d)
	}
	if l := state(t, rdb, id); l.State != StateDead || l.Dead.Reason != ReasonDependencyFailed {
		t.Fatalf("e: %+v, want dead, dependency_failed", l)
	}
	before := rdb.XLen(ctx, KeysFor("q").Stream).Val()
	for _, bad := range [][]string{{"99999999999999-0"}, {a, "1-1"}, {"nope"}, {a, "12-x"}, {}} {
		ids, err := EnqueueMany(ctx, rdb, "q", []Message{{Payload: []byte("p")}, {Payload: []byte("f"), Options: []Option{After(bad...)}}})
		if err == nil || ids != nil {
			t.Errorf("after %q: %v, %v, want an error and nothing added", bad, ids, err)
		}
		if len(bad) > 0 && strings.Contains(bad[len(bad)-1], "-") && !strings.Contains(bad[len(bad)-1], "x") && !errors.Is(err, ErrNoDependency) {
			t.Errorf("after %q: %v, want ErrNoDependency", bad, err)
		}
	}
	if n := rdb.XLen(ctx, KeysFor("q").Stream).Val(); n != before {
		t.Errorf("the stream went from %d to %d entries after refused enqueues", before, n)
	}
}

// Settling the same job twice (it ran twice, or a script call is replayed
// after a lost reply) releases its dependents once; a fenced settle
// releases nothing.
func TestChainReleasedOnce(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	k := KeysFor("q")
	a := mustEnqueue(t, rdb, "a")
	b := mustEnqueue(t, rdb, "b")
	c := mustEnqueue(t, rdb, "c", After(a, b))
	if err := rdb.XGroupCreate(ctx, k.Stream, Group, "0").Err(); err != nil {
		t.Fatal(err)
	}
	rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: Group, Consumer: "h/run-0", Streams: []string{k.Stream, ">"}, Count: 2})
	ack := func(id string) {
		t.Helper()
		if err := runScript(ctx, rdb, ackScript, []string{k.Stream, k.Stats, k.Done, k.Waiters, k.Results}, Group, 1, 0, 0, 0, id).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// A fenced holder's ack (its lease lost) writes nothing, release
	// included.
	err := runScript(ctx, rdb, fenced[ackScript], []string{k.Stream, k.Stats, k.Done, k.Waiters, k.Results, k.Stream + ":lease:run:0"}, Group, 1, 0, 0, 0, a, 7).Err()
	if !IsFenced(err) {
		t.Fatalf("fenced ack: %v, want FENCED", err)
	}
	if l := state(t, rdb, c); l.State != StateBlocked || len(l.WaitingFor) != 2 {
		t.Fatalf("c after a fenced ack of a: %+v, want blocked on a and b", l)
	}
	ack(a)
	ack(a) // a replay: the entry is gone, nothing more
	if l := state(t, rdb, c); l.State != StateBlocked || !slices.Equal(l.WaitingFor, []string{b}) {
		t.Fatalf("c after a settled twice: %+v, want blocked on %s", l, b)
	}
	ack(b)
	ack(b)
	if n := rdb.XLen(ctx, k.Stream).Val(); n != 1 {
		t.Fatalf("the stream holds %d entries, want c once", n)
	}
	if l := state(t, rdb, c); l.State != StateWaiting {
		t.Fatalf("c: %+v, want waiting", l)
	}
}

// Cancelling a blocked job dead-letters it as cancelled, and its
// dependents as dependency_failed.
func TestChainCancelBlocked(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	a := mustEnqueue(t, rdb, "a", In(time.Hour))
	b := mustEnqueue(t, rdb, "b", After(a))
	c := mustEnqueue(t, rdb, "c", After(b))
	res, err := Cancel(ctx, rdb, "q", b)
	if err != nil || res[0].Outcome != CancelDone || res[0].State != StateBlocked {
		t.Fatalf("cancel b: %+v, %v", res, err)
	}
	if l := state(t, rdb, b); l.State != StateDead || l.Dead.Reason != ReasonCancelled {
		t.Fatalf("b: %+v, want dead, cancelled", l)
	}
	if l := state(t, rdb, c); l.State != StateDead || l.Dead.Reason != ReasonDependencyFailed {
		t.Fatalf("c: %+v, want dead, dependency_failed", l)
	}
	// Cancelling the scheduled dependency: nothing blocked on it any more.
	if res, err := Cancel(ctx, rdb, "q", a); err != nil || res[0].Outcome != CancelDone {
		t.Fatalf("cancel a: %+v, %v", res, err)
	}
	if n, _ := ReadCounts(ctx, rdb, "q"); n.Blocked != 0 || n.Dead != 3 {
		t.Fatalf("counts %+v, want 0 blocked, 3 dead", n)
	}
}

// TestChainLostAckReply: the reply of the script that acknowledges A is
// lost, again and again for a while (each call runs in Redis, its reply
// never arrives, the holder sends it again): B, released by the first
// call, enters the stream once and runs once.
func TestChainLostAckReply(t *testing.T) {
	srv := redistest.Start(t)
	direct := srv.Client()
	ctx := context.Background()
	px, err := faultproxy.Start(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	rdb := redis.NewClient(&redis.Options{Addr: px.Addr, ReadTimeout: 200 * time.Millisecond, MaxRetries: -1})
	defer rdb.Close()
	a := mustEnqueue(t, direct, "a")
	mustEnqueue(t, direct, "b", After(a))
	evals := func() int64 {
		for _, l := range strings.Split(direct.Info(ctx, "commandstats").Val(), "\n") {
			if strings.HasPrefix(l, "cmdstat_evalsha:calls=") {
				n, _ := strconv.ParseInt(strings.TrimPrefix(strings.Split(l, ",")[0], "cmdstat_evalsha:calls="), 10, 64)
				return n
			}
		}
		return 0
	}
	var o order
	var before atomic.Int64
	h := HandlerFunc(func(ctx context.Context, j *Job) error {
		o.mu.Lock()
		o.ran = append(o.ran, string(j.Payload))
		o.mu.Unlock()
		if string(j.Payload) == "a" {
			before.Store(evals())
			px.Delay(400 * time.Millisecond) // every reply now comes after the client gave up
			time.AfterFunc(1500*time.Millisecond, func() { px.Delay(0) })
		}
		return nil
	})
	st := new(Stats)
	runUntil(t, testConfig(rdb, h), st, func() bool { return len(o.list()) == 2 })
	time.Sleep(300 * time.Millisecond) // a second b would be read by now
	if got := o.list(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("ran %v, want a then b once", got)
	}
	if n := evals() - before.Load(); n < 3 {
		t.Errorf("%d script calls reached Redis while replies were lost, want the ack sent again (≥ 3)", n)
	}
	settled(t, direct, "q")
	if n := direct.HLen(ctx, KeysFor("q").Blocked()).Val(); n != 0 {
		t.Errorf("%d jobs still blocked", n)
	}
}

// TestChainOnCluster: on a three-master Redis Cluster, a chain, a
// dependency that dies and a cancel of a blocked job behave as on one
// server: every key a chain touches is under its queue's hash tag, so each
// step is one script on the node that holds the queue.
func TestChainOnCluster(t *testing.T) {
	rdb := clusterClient(t, 3)
	ctx := context.Background()
	a := mustEnqueue(t, rdb, "a")
	b := mustEnqueue(t, rdb, "b", After(a))
	f := mustEnqueue(t, rdb, "fail")
	g := mustEnqueue(t, rdb, "g", After(f, b))
	x := mustEnqueue(t, rdb, "x", In(time.Hour))
	y := mustEnqueue(t, rdb, "y", After(x))
	if res, err := Cancel(ctx, rdb, "q", y); err != nil || res[0].Outcome != CancelDone {
		t.Fatalf("cancel of a blocked job on a cluster: %+v, %v", res, err)
	}
	var o order
	st := new(Stats)
	runUntil(t, testConfig2(rdb, o.handler("fail")), st, func() bool { return st.Done.Load() == 2 && state(t, rdb, g).State == StateDead })
	if got := o.list(); len(got) != 3 || slices.Index(got, "a") > slices.Index(got, "b") {
		t.Fatalf("ran %v, want a before b, and fail", got)
	}
	if l := state(t, rdb, g); l.Dead.Reason != ReasonDependencyFailed {
		t.Fatalf("g: %+v, want dependency_failed", l.Dead)
	}
}

// testConfig2 is testConfig for any client.
func testConfig2(rdb redis.UniversalClient, h Handler) Config {
	return Config{Client: rdb, Queue: "q", Consumer: "h/run-0", Handler: h, Grace: 5 * time.Second, Logger: testLogger()}
}

// TestChainRequeueCycle: a dead letter whose after field names its own job
// id (a producer's forged letter: enqueue cannot make one) is refused at
// requeue, and stays.
func TestChainRequeueCycle(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	k := KeysFor("q")
	job := "1700000000000-0"
	letter := rdb.XAdd(ctx, &redis.XAddArgs{Stream: k.Dead, Values: []any{PayloadField, "p", afterField, job, jobField, job, deadReason, ReasonDependencyFailed}}).Val()
	rdb.HSet(ctx, k.DeadIndex, job, letter)
	if _, err := RequeueDead(ctx, rdb, "q", job); !errors.Is(err, ErrBadOption) || !strings.Contains(err.Error(), "cannot wait for itself") {
		t.Fatalf("requeue of a letter after itself: %v, want a cycle refused", err)
	}
	if l := state(t, rdb, job); l.State != StateDead {
		t.Fatalf("the letter after a refused requeue: %+v, want it still dead", l)
	}
}

// TestChainDependencyMovedMeanwhile: a job waited for that settles or
// moves between enqueue's look-up and its script is seen by the script:
// done (with a retention) counts as done, moved to the retry schedule is
// located again and waited for, done and forgotten (retention 0) is
// refused, nothing written.
func TestChainDependencyMovedMeanwhile(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	k := KeysFor("q")
	if err := EnsureGroup(ctx, rdb, k); err != nil {
		t.Fatal(err)
	}
	take := func() string {
		t.Helper()
		s := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: Group, Consumer: "h/run-0", Streams: []string{k.Stream, ">"}, Count: 1}).Val()
		return s[0].Messages[0].ID
	}
	stale := func(id string) map[string]*Location { return map[string]*Location{id: state(t, rdb, id)} }
	enqueueAfter := func(dep string, deps map[string]*Location) (string, error) {
		id, _, err := blockJob(ctx, rdb, "q", []byte("b"), &jobOptions{after: []string{dep}}, deps, nil, nil, nil)
		return id, err
	}

	// Done meanwhile, with a retention: counts as done.
	a := mustEnqueue(t, rdb, "a")
	seen := stale(a)
	e := take()
	runScript(ctx, rdb, ackScript, []string{k.Stream, k.Stats, k.Done, k.Waiters, k.Results}, Group, 1, 0, 3600000, 1000, e, a)
	if id, err := enqueueAfter(a, seen); err != nil || state(t, rdb, id).State != StateWaiting {
		t.Fatalf("after a job done meanwhile (retention): %s, %v; want waiting", id, err)
	}
	take() // b

	// Moved to the retry schedule meanwhile: waited for there.
	r := mustEnqueue(t, rdb, "r")
	seen = stale(r)
	e = take()
	if n, err := runScript(ctx, rdb, retryScript, []string{k.Stream, k.Retry, k.RetryJobs, k.Stats}, Group, e, "h/run-0", 3600000, r, 1, "failed:error").Int(); err != nil || n != 1 {
		t.Fatalf("retry: %d, %v", n, err)
	}
	id, err := enqueueAfter(r, seen)
	if l := state(t, rdb, id); err != nil || l.State != StateBlocked || !slices.Equal(l.WaitingFor, []string{r}) {
		t.Fatalf("after a job moved to retry meanwhile: %+v, %v; want blocked on it", l, err)
	}

	// Done meanwhile with retention 0: refused, nothing written.
	x := mustEnqueue(t, rdb, "x")
	seen = stale(x)
	e = take()
	runScript(ctx, rdb, ackScript, []string{k.Stream, k.Stats, k.Done, k.Waiters, k.Results}, Group, 1, 0, 0, 0, e)
	rdb.Del(ctx, k.Done)
	blocked := rdb.HLen(ctx, k.Blocked()).Val()
	if _, err := enqueueAfter(x, seen); !errors.Is(err, ErrNoDependency) {
		t.Fatalf("after a job done and forgotten meanwhile: %v, want ErrNoDependency", err)
	}
	if n := rdb.HLen(ctx, k.Blocked()).Val(); n != blocked {
		t.Fatalf("a refused enqueue wrote a blocked record")
	}
}

// TestChainNoCostWithoutChains: a queue without chains pays one EXISTS per
// ack script call and nothing else of chains (no XRANGE, no HGET); with a
// chain waiting in the queue the same acks read their entries' job ids.
func TestChainNoCostWithoutChains(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	stat := func(cmd string) int64 {
		for _, l := range strings.Split(rdb.Info(ctx, "commandstats").Val(), "\n") {
			if p := "cmdstat_" + cmd + ":calls="; strings.HasPrefix(l, p) {
				n, _ := strconv.ParseInt(strings.TrimPrefix(strings.Split(l, ",")[0], p), 10, 64)
				return n
			}
		}
		return 0
	}
	drain := func(n int64) {
		t.Helper()
		enqueue(t, rdb, "q", int(n))
		st := new(Stats)
		runUntil(t, testConfig(rdb, HandlerFunc(func(context.Context, *Job) error { return nil })), st, func() bool { return st.Done.Load() == n })
	}
	rdb.ConfigResetStat(ctx)
	start := time.Now()
	drain(500)
	// The keeper's round trip, every 250 ms, has two EXISTS of its own
	// (the keys' rings and the set of key streams: key_read.go,
	// replay_keyed.go), as the holder's start has, not per job.
	keeper := 2 * (int64(time.Since(start)/(250*time.Millisecond)) + 2)
	if x, h := stat("xrange"), stat("hget"); x != 0 || h != 0 {
		t.Fatalf("500 plain jobs: %d XRANGE, %d HGET; want none", x, h)
	}
	if e, s := stat("exists"), stat("evalsha"); e == 0 || e > s+keeper {
		t.Fatalf("500 plain jobs: %d EXISTS for %d script calls and %d keeper round trips; want at most one per call", e, s, keeper)
	}
	mustEnqueue(t, rdb, "b", After(mustEnqueue(t, rdb, "a", In(time.Hour))))
	rdb.ConfigResetStat(ctx)
	drain(100)
	if x := stat("xrange"); x < 100 {
		t.Fatalf("with a chain in the queue: %d XRANGE for 100 acked jobs, want one each", x)
	}
}

// TestChainReplicated: EnqueueManyReplicated waits for the replicas after
// a chained job's own write (WAIT on the script's connection), not only
// before it: a replica cut off (faultproxy) between the master and it
// confirms nothing, ErrNotReplicated, with the job's id; once it is back
// the same call is confirmed; a lost script (NOSCRIPT) is loaded and sent
// again.
func TestChainReplicated(t *testing.T) {
	master := redistest.Start(t)
	replica := redistest.Start(t)
	rdb := master.Client()
	ctx := context.Background()
	px, err := faultproxy.Start(master.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	host, port, _ := strings.Cut(px.Addr, ":")
	if err := replica.Client().ReplicaOf(ctx, host, port).Err(); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(10 * time.Second); !strings.Contains(replica.Client().Info(ctx, "replication").Val(), "master_link_status:up"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the replica never synced")
		}
	}
	a := mustEnqueue(t, rdb, "a")
	// The replica has acknowledged everything written so far: a WAIT
	// before the chained job's write is satisfied at once.
	acked := func() bool {
		info := rdb.Info(ctx, "replication").Val()
		var master, rep int64 = -1, -2
		for _, l := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(l, "master_repl_offset:"); ok {
				master, _ = strconv.ParseInt(v, 10, 64)
			}
			if v, ok := strings.CutPrefix(l, "slave0:"); ok {
				for _, f := range strings.Split(v, ",") {
					if o, ok := strings.CutPrefix(f, "offset="); ok {
						rep, _ = strconv.ParseInt(o, 10, 64)
					}
				}
			}
		}
		return rep >= master
	}
	for end := time.Now().Add(10 * time.Second); !acked(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the replica never acknowledged the master's offset")
		}
	}
	chained := func(p string) ([]string, error) {
		return EnqueueManyReplicated(ctx, rdb, "q", []Message{{Payload: []byte(p), Options: []Option{After(a)}}}, 1, 300*time.Millisecond)
	}
	px.Partition(true)
	ids, err := chained("b")
	px.Partition(false)
	if !errors.Is(err, ErrNotReplicated) || len(ids) != 1 || ids[0] == "" {
		t.Fatalf("chained job, its replica cut off: %v, %v; want its id and ErrNotReplicated", ids, err)
	}
	if l := state(t, rdb, ids[0]); l.State != StateBlocked {
		t.Fatalf("b: %+v, want blocked", l)
	}
	if ids, err = chained("c"); err != nil || state(t, rdb, ids[0]).State != StateBlocked {
		t.Fatalf("chained job, replica back: %v, %v; want confirmed and blocked", ids, err)
	}
	rdb.ScriptFlush(ctx) // the pipeline's EVALSHA meets NOSCRIPT: loaded, sent again
	if ids, err = chained("d"); err != nil || state(t, rdb, ids[0]).State != StateBlocked {
		t.Fatalf("after SCRIPT FLUSH: %v, %v; want a blocked job, confirmed", ids, err)
	}
}
