package work

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// A job chained after a keyed job that waits in its key's stream: enqueue
// must accept it (the dependency is waiting), and it runs after it.
func TestInterplayAfterKeyedWaiting(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	a := enqueueKeyed(t, rdb, "k", 1)[0]
	b, err := Enqueue(ctx, rdb, "q", []byte("b"), After(a))
	if err != nil {
		t.Fatalf("enqueue after a keyed job waiting in its key's stream: %v", err)
	}
	var o order
	st := new(Stats)
	runUntil(t, testConfig(rdb, o.handler()), st, func() bool { return st.Done.Load() == 2 })
	if got := o.list(); len(got) != 2 || got[1] != "b" {
		t.Fatalf("ran %v, want k-0 then b", got)
	}
	_ = b
}

// A keyed job cancelled while it waits in its key's stream: the job chained
// after it is dead-lettered as dependency_failed (not blocked forever).
func TestInterplayCancelKeyedReleasesChain(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	enqueueKeyed(t, rdb, "k", 1) // holds key k's only permit while it runs
	// a: keyed, due shortly (scheduled, so that b can be chained after it)
	a := mustEnqueue(t, rdb, "a", Key("k"), In(300*time.Millisecond))
	b := mustEnqueue(t, rdb, "b", After(a))
	release := make(chan struct{})
	c := testConfig(rdb, HandlerFunc(func(_ context.Context, j *Job) error {
		if string(j.Payload) == "k-0" {
			<-release
		}
		return nil
	}))
	c.KeyCaps = KeyCaps{Default: 1}
	runFor(t, c)
	// a comes due, is read from the stream and parked: k is at its cap
	waitWithin(t, 10*time.Second, func() bool { return state(t, rdb, a).Key == "k" })
	res, err := Cancel(ctx, rdb, "q", a)
	if err != nil || res[0].Outcome != CancelDone {
		t.Fatalf("cancel: %+v %v", res, err)
	}
	close(release)
	time.Sleep(500 * time.Millisecond)
	if l := state(t, rdb, b); l.State != StateDead {
		t.Fatalf("job chained after a cancelled keyed job: %+v, want dead (dependency_failed)", l)
	}
}

// Wait for a keyed job cancelled while it waits in its key's stream returns
// the cancel, as for any other cancelled job.
func TestInterplayWaitCancelledKeyed(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	a := enqueueKeyed(t, rdb, "k", 1)[0]
	wc := waitAsync(t, rdb, "q", a, ctx)
	if _, err := Cancel(ctx, rdb, "q", a); err != nil {
		t.Fatal(err)
	}
	select {
	case w := <-wc:
		err := w.err
		if !errors.Is(err, ErrCancelled) {
			t.Fatalf("Wait: %v, want ErrCancelled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait still blocked 10 s after its keyed job was cancelled")
	}
}

// Wait for a chained job whose dependency dies returns its
// dependency_failed letter.
func TestInterplayWaitDependencyFailed(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	a := mustEnqueue(t, rdb, "a")
	b := mustEnqueue(t, rdb, "b", After(a))
	wc := waitAsync(t, rdb, "q", b, ctx)
	if _, err := Cancel(ctx, rdb, "q", a); err != nil {
		t.Fatal(err)
	}
	select {
	case w := <-wc:
		err := w.err
		var de *DeadError
		if !errors.As(err, &de) || de.Reason != ReasonDependencyFailed {
			t.Fatalf("Wait: %v, want a dependency_failed DeadError", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait still blocked 10 s after its chained job was dead-lettered as dependency_failed")
	}
}

// Wait for a blocked job that is cancelled returns the cancel.
func TestInterplayWaitCancelledBlocked(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	a := mustEnqueue(t, rdb, "a")
	b := mustEnqueue(t, rdb, "b", After(a))
	wc := waitAsync(t, rdb, "q", b, ctx)
	if _, err := Cancel(ctx, rdb, "q", b); err != nil {
		t.Fatal(err)
	}
	select {
	case w := <-wc:
		err := w.err
		if !errors.Is(err, ErrCancelled) {
			t.Fatalf("Wait: %v, want ErrCancelled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait still blocked 10 s after its blocked job was cancelled")
	}
}

// A keyed batch member cancelled while it waits in its key's stream is
// counted dead: the batch completes and its callback runs.
func TestInterplayBatchKeyedMemberCancelled(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	enqueueKeyed(t, rdb, "k", 1) // holds key k's only permit while it runs
	release := make(chan struct{})
	c := testConfig(rdb, HandlerFunc(func(_ context.Context, j *Job) error {
		if string(j.Payload) == "k-0" {
			<-release
		}
		return nil
	}))
	c.KeyCaps = KeyCaps{Default: 1}
	st := runFor(t, c)
	waitWithin(t, 10*time.Second, func() bool { return keyPending(t, rdb, "q") == 1 })
	b, err := NewBatch(ctx, rdb, "q", BatchCallback([]byte("cb"), ""))
	if err != nil {
		t.Fatal(err)
	}
	ids, err := b.AddAndClose(ctx, Message{Payload: []byte("m"), Options: []Option{Key("k")}})
	if err != nil {
		t.Fatal(err)
	}
	// the holder reads the member from the stream and parks it: k is at its cap
	waitWithin(t, 10*time.Second, func() bool { return state(t, rdb, ids[0]).Key == "k" })
	res, err := Cancel(ctx, rdb, "q", ids[0])
	if err != nil || res[0].Outcome != CancelDone {
		t.Fatalf("cancel: %+v %v", res, err)
	}
	close(release)
	waitWithin(t, 5*time.Second, func() bool { return st.Done.Load() >= 1 })
	time.Sleep(500 * time.Millisecond)
	if h := rdb.HGetAll(ctx, KeysFor("q").batch(b.ID())).Val(); h["completed"] == "" {
		t.Fatalf("batch after its only member was cancelled: %v, want it complete (callback enqueued)", h)
	}
}

// A batch member added with After: the option must not be dropped
// silently (refused, or honoured).
func TestInterplayBatchMemberAfter(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	a := mustEnqueue(t, rdb, "a")
	b, err := NewBatch(ctx, rdb, "q")
	if err != nil {
		t.Fatal(err)
	}
	ids, err := b.Add(ctx, Message{Payload: []byte("m"), Options: []Option{After(a)}})
	if err == nil {
		if l := state(t, rdb, ids[0]); l.State != StateBlocked {
			t.Fatalf("batch member added After(%s): accepted, located %+v: the After was dropped", a, l)
		}
	}
}

// Two exec jobs of different levels whose stream entries share an id (as
// when a key turn, a due retry or a requeue XADDs to the high and normal
// streams in the same millisecond) run at once: each keeps its own result.
func TestInterplayExecResultSameEntryTwoLevels(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	k := KeysFor("q")
	for _, s := range []string{k.Stream, k.High} {
		if err := ensureGroup(ctx, rdb, s); err != nil {
			t.Fatal(err)
		}
	}
	// the same entry id in both streams; job ids 1700000000000-0 (high,
	// its orig) and 1700000000000-1 (normal, its entry's own)
	const entry = "1700000000000-1"
	rdb.XAdd(ctx, &redis.XAddArgs{Stream: k.High, ID: entry, Values: []any{PayloadField, "h", jobField, "1700000000000-0", priorityField, "high"}})
	rdb.XAdd(ctx, &redis.XAddArgs{Stream: k.Stream, ID: entry, Values: []any{PayloadField, "n"}})
	st := new(Stats)
	x := &Exec{Argv: []string{"sh", "-c", `printf %s "$BATON_JOB_ID" > "$BATON_RESULT_FILE"; sleep 0.5`}, Grace: 2 * time.Second, Logger: testLogger()}
	defer x.Close()
	c := testConfig(rdb, x)
	c.Concurrency, c.Retention = 2, time.Hour
	runUntil(t, c, st, func() bool { return st.Done.Load() == 2 })
	for _, id := range []string{"1700000000000-0", entry} {
		got, err := Result(ctx, rdb, "q", id)
		if err != nil || string(got) != id {
			t.Errorf("result of %s: %q (%v), want its own id", id, got, err)
		}
	}
}

// A keyed job released by its chain, and a keyed batch member, enter the
// stream directly: the holder parks them, and the key's cap holds.
func TestInterplayChainAndBatchKeyedRespectCap(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	enqueueKeyed(t, rdb, "k", 1) // k-0: holds key k's only permit while it runs
	a := mustEnqueue(t, rdb, "a")
	mustEnqueue(t, rdb, "c", Key("k"), After(a))
	b, err := NewBatch(ctx, rdb, "q")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.AddAndClose(ctx, Message{Payload: []byte("m"), Options: []Option{Key("k")}}); err != nil {
		t.Fatal(err)
	}
	var cc capCounter
	release := make(chan struct{})
	c := testConfig(rdb, HandlerFunc(func(_ context.Context, j *Job) error {
		cc.enter(j.Key)
		defer cc.leave(j.Key)
		if string(j.Payload) == "k-0" {
			<-release
		}
		return nil
	}))
	c.Concurrency = 4
	c.KeyCaps = KeyCaps{Default: 1}
	st := runFor(t, c)
	waitWithin(t, 10*time.Second, func() bool { return st.Done.Load() == 1 }) // a
	time.Sleep(500 * time.Millisecond)
	if n := st.Done.Load(); n != 1 {
		t.Fatalf("%d jobs done while k-0 holds key k's only permit, want 1 (a)", n)
	}
	close(release)
	waitWithin(t, 10*time.Second, func() bool { return st.Done.Load() == 4 })
	if cc.most["k"] > 1 {
		t.Fatalf("%d jobs of key k at once, cap 1", cc.most["k"])
	}
}

// A keyed chained job dead as dependency_failed, requeued after its
// dependency, runs with its key once that one is done.
func TestInterplayRequeueKeyedChained(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	a := mustEnqueue(t, rdb, "a")
	cid := mustEnqueue(t, rdb, "c", Key("k"), After(a))
	fail := true
	var mu sync.Mutex
	var got []string
	st := new(Stats)
	c := testConfig(rdb, HandlerFunc(func(_ context.Context, j *Job) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, string(j.Payload)+"/"+j.Key)
		if fail && string(j.Payload) == "a" {
			return ErrSkipRetry
		}
		return nil
	}))
	c.KeyCaps = KeyCaps{Default: 1}
	runUntil(t, c, st, func() bool { return st.Dead.Load() == 1 && state(t, rdb, cid).State == StateDead })
	fail = false
	if _, err := RequeueDead(ctx, rdb, "q", a); err != nil {
		t.Fatal(err)
	}
	if _, err := RequeueDead(ctx, rdb, "q", cid); err != nil {
		t.Fatal(err)
	}
	st = new(Stats)
	runUntil(t, c, st, func() bool { return st.Done.Load() == 2 })
	mu.Lock()
	defer mu.Unlock()
	if got[len(got)-1] != "c/k" {
		t.Fatalf("ran %v, want c with key k last", got)
	}
	keysClean(t, rdb)
}
