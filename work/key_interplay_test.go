package work

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// A failed keyed job is retried with its key, through its key's stream (no
// attempt counted for the wait), under its key's cap.
func TestKeyRetryKeepsKey(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ids := enqueueKeyed(t, rdb, "k", 10)
	var cc capCounter
	var mu sync.Mutex
	runs := map[string][]int{}
	st := new(Stats)
	c := testConfig(rdb, HandlerFunc(func(_ context.Context, j *Job) error {
		cc.enter(j.Key)
		defer cc.leave(j.Key)
		mu.Lock()
		runs[j.ID] = append(runs[j.ID], j.Attempt)
		mu.Unlock()
		if j.Key != "k" {
			t.Errorf("job %s ran with key %q", j.ID, j.Key)
		}
		time.Sleep(2 * time.Millisecond)
		if j.Attempt == 1 {
			return errors.New("first run fails")
		}
		return nil
	}))
	c.Concurrency, c.RetryBackoff, c.RetryBackoffMax = 4, 10*time.Millisecond, 20*time.Millisecond
	c.KeyCaps = KeyCaps{Default: 2}
	runUntil(t, c, st, func() bool { return st.Done.Load() == 10 })
	for _, id := range ids {
		if r := runs[id]; len(r) != 2 || r[0] != 1 || r[1] != 2 {
			t.Errorf("job %s ran as attempts %v, want [1 2]", id, r)
		}
	}
	if cc.most["k"] > 2 {
		t.Errorf("%d of key k at once, cap 2", cc.most["k"])
	}
	levelsSettled(t, rdb)
	keysClean(t, rdb)
}

// A keyed job's dead letter shows its key; requeued, it runs with it.
func TestKeyDeadLetterAndRequeue(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	id := enqueueKeyed(t, rdb, "tenant-7", 1)[0]
	st := new(Stats)
	c := testConfig(rdb, HandlerFunc(func(context.Context, *Job) error { return fmt.Errorf("no: %w", ErrSkipRetry) }))
	runUntil(t, c, st, func() bool { return st.Dead.Load() == 1 })
	d, err := GetDead(ctx, rdb, "q", id)
	if err != nil || d.Fields[keyField] != "tenant-7" {
		t.Fatalf("dead letter %+v (%v): want key tenant-7 in its fields", d, err)
	}
	if _, err := RequeueDead(ctx, rdb, "q", d.ID); err != nil {
		t.Fatal(err)
	}
	var got *Job
	st = new(Stats)
	c = testConfig(rdb, HandlerFunc(func(_ context.Context, j *Job) error { got = j; return nil }))
	c.KeyCaps = KeyCaps{Default: 1}
	runUntil(t, c, st, func() bool { return st.Done.Load() == 1 })
	if got.ID != id || got.Key != "tenant-7" {
		t.Fatalf("requeued job ran as %s with key %q, want %s with tenant-7", got.ID, got.Key, id)
	}
	levelsSettled(t, rdb)
	keysClean(t, rdb)
}

// Priorities first: keyed high jobs all run before keyed normal ones, and
// keys take turns within a level.
func TestKeyPriorities(t *testing.T) {
	rdb := redistest.Start(t).Client()
	enqueueKeyed(t, rdb, "a", 20)
	enqueueKeyed(t, rdb, "b", 20, WithPriority(PriorityHigh))
	enqueueKeyed(t, rdb, "c", 5, WithPriority(PriorityHigh))
	var mu sync.Mutex
	var order []string
	st := new(Stats)
	c := testConfig(rdb, HandlerFunc(func(_ context.Context, j *Job) error {
		mu.Lock()
		order = append(order, j.Key)
		mu.Unlock()
		return nil
	}))
	runUntil(t, c, st, func() bool { return st.Done.Load() == 45 })
	for i, k := range order[:25] {
		if k == "a" {
			t.Fatalf("a normal job ran as number %d, before the high ones: %v", i+1, order)
		}
	}
	lastC := 0
	for i, k := range order {
		if k == "c" {
			lastC = i
		}
	}
	if lastC > 12 {
		t.Errorf("key c's last high job ran as number %d: keys did not take turns within the level: %v", lastC+1, order)
	}
	keysClean(t, rdb)
}

// A rate limit holds for keyed jobs too: they wait in their lists.
func TestKeyRateLimit(t *testing.T) {
	rdb := redistest.Start(t).Client()
	for i := range 5 {
		enqueueKeyed(t, rdb, fmt.Sprint("k", i), 10)
	}
	st := new(Stats)
	c := testConfig(rdb, HandlerFunc(func(context.Context, *Job) error { return nil }))
	c.Concurrency, c.RateLimit, c.KeyCaps = 4, Rate{N: 20, Per: time.Second}, KeyCaps{Default: 2}
	begin := time.Now()
	runUntil(t, c, st, func() bool { return st.Done.Load() == 50 })
	// 50 jobs at 20/s (a burst of 20 at most first): at least 1.5 s.
	if d := time.Since(begin); d < 1400*time.Millisecond {
		t.Fatalf("50 keyed jobs done in %s at 20/s", d)
	}
	keysClean(t, rdb)
}

// 1,000 keys wait behind one key's backlog: each has its first job run in
// the first turn, while the backlog's key runs one quantum (4 jobs) per
// turn, not its 3,000 jobs first.
func TestKeyFairThousandKeys(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	enqueueKeyed(t, rdb, "big", 3000)
	var msgs []Message
	for i := range 1000 {
		for range 2 {
			msgs = append(msgs, Message{Payload: []byte("x"), Options: []Option{Key(fmt.Sprint("key-", i))}})
		}
	}
	if _, err := EnqueueMany(ctx, rdb, "q", msgs); err != nil {
		t.Fatal(err)
	}
	first := map[string]int{}
	var order []string
	st := new(Stats)
	c := testConfig(rdb, HandlerFunc(func(_ context.Context, j *Job) error {
		if _, ok := first[j.Key]; !ok {
			first[j.Key] = len(order)
		}
		order = append(order, j.Key)
		return nil
	}))
	runUntil(t, c, st, func() bool { return st.Done.Load() == 5000 })
	if len(first) != 1001 {
		t.Fatalf("%d keys ran", len(first))
	}
	worst := 0
	for k, at := range first {
		if k != "big" {
			worst = max(worst, at)
		}
	}
	big := 0
	for _, k := range order[:worst] {
		if k == "big" {
			big++
		}
	}
	// One turn: a quantum of big's and every small key's first; a read
	// batch of slack may start a second turn.
	if big > 8 {
		t.Fatalf("%d of big's jobs ran before every small key had run one (the last as number %d)", big, worst+1)
	}
	levelsSettled(t, rdb)
	keysClean(t, rdb)
}

// Cancel takes a job out of its key's stream as a dead letter; the others run.
func TestKeyCancelWaiting(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	ids := enqueueKeyed(t, rdb, "k", 1, UniqueKey("u"))
	ids = append(ids, enqueueKeyed(t, rdb, "k", 2)...)
	loc, err := Locate(ctx, rdb, "q", ids[0])
	if err != nil || loc.State != StateWaiting || loc.Key != "k" || loc.KeyWaiting != 3 {
		t.Fatalf("located %+v (%v), want waiting in key k's list of 3", loc, err)
	}
	res, err := Cancel(ctx, rdb, "q", ids[0])
	if err != nil || res[0].Outcome != CancelDone {
		t.Fatalf("cancel: %+v %v", res, err)
	}
	if d, err := GetDead(ctx, rdb, "q", ids[0]); err != nil || d.Reason != ReasonCancelled || d.Fields[keyField] != "k" {
		t.Fatalf("letter %+v %v", d, err)
	}
	if n := rdb.Exists(ctx, KeysFor("q").Unique("u")).Val(); n != 0 {
		t.Errorf("unique key still held after cancel")
	}
	var mu sync.Mutex
	ran := map[string]bool{}
	st := new(Stats)
	c := testConfig(rdb, HandlerFunc(func(_ context.Context, j *Job) error {
		mu.Lock()
		ran[j.ID] = true
		mu.Unlock()
		return nil
	}))
	runUntil(t, c, st, func() bool { return st.Done.Load() == 2 })
	if ran[ids[0]] || !ran[ids[1]] || !ran[ids[2]] {
		t.Fatalf("ran %v of %v", ran, ids)
	}
	levelsSettled(t, rdb)
	keysClean(t, rdb)
}

// A producer's raw entry whose key field is no valid key is dead-lettered
// as malformed, unrun; a valid one is parked in its key's stream and runs.
func TestKeyRawField(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	k := KeysFor("q")
	if err := ensureGroup(ctx, rdb, k.Stream); err != nil {
		t.Fatal(err)
	}
	bad := rdb.XAdd(ctx, &redis.XAddArgs{Stream: k.Stream, Values: []any{PayloadField, "x", keyField, "a{b"}}).Val()
	good := rdb.XAdd(ctx, &redis.XAddArgs{Stream: k.Stream, Values: []any{PayloadField, "y", keyField, "raw"}}).Val()
	var got *Job
	st := new(Stats)
	c := testConfig(rdb, HandlerFunc(func(_ context.Context, j *Job) error { got = j; return nil }))
	c.KeyCaps = KeyCaps{Default: 1}
	runUntil(t, c, st, func() bool { return st.Done.Load() == 1 && st.Dead.Load() == 1 })
	if got.ID != good || got.Key != "raw" {
		t.Errorf("ran %s with key %q, want %s with raw", got.ID, got.Key, good)
	}
	if d, err := GetDead(ctx, rdb, "q", bad); err != nil || d.Reason != ReasonMalformed {
		t.Errorf("bad key's letter %+v (%v), want malformed", d, err)
	}
	levelsSettled(t, rdb)
	keysClean(t, rdb)
}

// Paused, a queue starts no keyed job either; resumed, they run.
func TestKeyPause(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	if err := PauseQueue(ctx, rdb, "q", Pause{User: "test"}, 0); err != nil {
		t.Fatal(err)
	}
	enqueueKeyed(t, rdb, "k", 5)
	st := new(Stats)
	c := testConfig(rdb, HandlerFunc(func(context.Context, *Job) error { return nil }))
	ctx2, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- Run(ctx2, c, st) }()
	time.Sleep(700 * time.Millisecond) // a few keeper ticks: nothing may start
	if n := st.Done.Load(); n != 0 {
		t.Fatalf("%d keyed jobs ran on a paused queue", n)
	}
	if _, err := Resume(ctx, rdb, "q"); err != nil {
		t.Fatal(err)
	}
	waitWithin(t, 10*time.Second, func() bool { return st.Done.Load() == 5 })
	cancel()
	<-errc
	keysClean(t, rdb)
}

// Keyed jobs that reach the stream together without permits (delayed jobs
// of one key due at the same instant) are parked in their key's stream in
// one call, and run in their enqueue order. (Each once went to the head of
// the key's list, so they ran last first.)
func TestKeyParkedKeepOrder(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ids := enqueueKeyed(t, rdb, "k", 6, At(time.Now().Add(300*time.Millisecond)))
	var mu sync.Mutex
	var order []string
	st := new(Stats)
	c := testConfig(rdb, HandlerFunc(func(_ context.Context, j *Job) error {
		mu.Lock()
		order = append(order, j.ID)
		mu.Unlock()
		return nil
	}))
	c.Concurrency = 8
	c.KeyCaps = KeyCaps{Default: 1} // one at a time: they run in their list's order
	runUntil(t, c, st, func() bool { return st.Done.Load() == 6 })
	if fmt.Sprint(order) != fmt.Sprint(ids) {
		t.Fatalf("ran in order %v, want the enqueue order %v", order, ids)
	}
	levelsSettled(t, rdb)
	keysClean(t, rdb)
}
