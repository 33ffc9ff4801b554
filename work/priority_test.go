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

// enqueueAt enqueues n jobs at priority p, named "<p>-<i>".
func enqueueAt(tb testing.TB, rdb *redis.Client, p Priority, n int, opts ...Option) []string {
	tb.Helper()
	msgs := make([]Message, n)
	for i := range msgs {
		msgs[i] = Message{Payload: fmt.Appendf(nil, "%s-%d", p, i), Options: append([]Option{WithPriority(p)}, opts...)}
	}
	ids, err := EnqueueMany(context.Background(), rdb, "q", msgs)
	if err != nil {
		tb.Fatal(err)
	}
	return ids
}

// levelsSettled asserts that every level's stream is empty with nothing pending.
func levelsSettled(tb testing.TB, rdb *redis.Client) {
	tb.Helper()
	ctx := context.Background()
	k := KeysFor("q")
	for _, p := range readOrder {
		if n := rdb.XLen(ctx, k.StreamOf(p)).Val(); n != 0 {
			tb.Errorf("%s stream holds %d entries", p, n)
		}
		if pend := rdb.XPending(ctx, k.StreamOf(p), Group).Val(); pend != nil && pend.Count != 0 {
			tb.Errorf("%s stream has %d pending", p, pend.Count)
		}
	}
}

// High jobs run before normal ones and normal before low, whatever order
// they were enqueued in; each keeps the id Enqueue returned.
func TestPriorityOrder(t *testing.T) {
	rdb := redistest.Start(t).Client()
	want := map[string]Priority{}
	for _, p := range []Priority{PriorityLow, PriorityNormal, PriorityHigh} {
		for _, id := range enqueueAt(t, rdb, p, 30) {
			want[id] = p
		}
	}
	var mu sync.Mutex
	var order []Priority
	st := new(Stats)
	c := testConfig(rdb, HandlerFunc(func(_ context.Context, j *Job) error {
		mu.Lock()
		defer mu.Unlock()
		if want[j.ID] != j.Priority {
			t.Errorf("job %s ran as %s, enqueued as %s", j.ID, j.Priority, want[j.ID])
		}
		order = append(order, j.Priority)
		return nil
	}))
	runUntil(t, c, st, func() bool { return st.Done.Load() == 90 })
	for i := 1; i < len(order); i++ {
		if rank(order[i]) < rank(order[i-1]) {
			t.Fatalf("job %d was %s after a %s one: %v", i, order[i], order[i-1], order)
		}
	}
	levelsSettled(t, rdb)
}

func rank(p Priority) int {
	for i, q := range readOrder {
		if p == q {
			return i
		}
	}
	return -1
}

// A queue that starts using priorities while a holder runs is read by
// level from then on: the holder learns it from its keeper's due script.
func TestPriorityLearnedWhileRunning(t *testing.T) {
	rdb := redistest.Start(t).Client()
	enqueue(t, rdb, "q", 1)
	st := new(Stats)
	ran := make(chan Priority, 10)
	c := testConfig(rdb, HandlerFunc(func(_ context.Context, j *Job) error {
		ran <- j.Priority
		return nil
	}))
	go func() {
		<-ran // the normal job: the holder runs, reading one stream
		enqueueAt(t, rdb, PriorityHigh, 1)
	}()
	start := time.Now()
	runUntil(t, c, st, func() bool { return st.Done.Load() == 2 })
	if p := <-ran; p != PriorityHigh {
		t.Fatalf("second job ran as %s", p)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("high job ran after %v; want about a keeper tick and a blocking read", d)
	}
	levelsSettled(t, rdb)
}

// A high job keeps its level through a retry, a delay and a dead letter's
// requeue, and its id through all of them.
func TestPriorityKeptThroughRetryDelayAndRequeue(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	retried := enqueueAt(t, rdb, PriorityHigh, 1)[0]
	delayed := enqueueAt(t, rdb, PriorityLow, 1, In(100*time.Millisecond))[0]
	rejected := enqueueAt(t, rdb, PriorityHigh, 1, UniqueKey("once"))[0]
	var mu sync.Mutex
	runs := map[string][]Priority{}
	st := new(Stats)
	c := fastRetry(testConfig(rdb, HandlerFunc(func(_ context.Context, j *Job) error {
		mu.Lock()
		defer mu.Unlock()
		runs[j.ID] = append(runs[j.ID], j.Priority)
		switch {
		case j.ID == retried && j.Attempt == 1:
			return errors.New("once more")
		case j.ID == rejected && len(runs[j.ID]) == 1:
			return fmt.Errorf("bad input: %w", ErrSkipRetry)
		}
		return nil
	})))
	runUntil(t, c, st, func() bool { return st.Done.Load() == 2 && st.Dead.Load() == 1 })
	if _, err := RequeueDead(ctx, rdb, "q", rejected); err != nil {
		t.Fatal(err)
	}
	if n := rdb.XLen(ctx, KeysFor("q").High).Val(); n != 1 {
		t.Fatalf("requeued high job: high stream holds %d entries, want 1", n)
	}
	runUntil(t, c, st, func() bool { return st.Done.Load() == 3 })
	mu.Lock()
	defer mu.Unlock()
	for id, want := range map[string][]Priority{
		retried:  {PriorityHigh, PriorityHigh},
		delayed:  {PriorityLow},
		rejected: {PriorityHigh, PriorityHigh},
	} {
		if fmt.Sprint(runs[id]) != fmt.Sprint(want) {
			t.Errorf("job %s ran as %v, want %v", id, runs[id], want)
		}
	}
	levelsSettled(t, rdb)
}

// A high job left pending by a holder that died is replayed first by the
// slot's next holder, before any waiting job.
func TestPriorityReplayedFirst(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	id := enqueueAt(t, rdb, PriorityHigh, 1)[0]
	if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: Group, Consumer: "h/run-0", Streams: []string{KeysFor("q").High, ">"}}).Err(); err != nil {
		t.Fatal(err) // the dead holder's read
	}
	enqueueAt(t, rdb, PriorityHigh, 3)
	var first *Job
	st := new(Stats)
	c := testConfig(rdb, HandlerFunc(func(_ context.Context, j *Job) error {
		if first == nil {
			first = j
		}
		return nil
	}))
	runUntil(t, c, st, func() bool { return st.Done.Load() == 4 })
	if first.ID != id || first.Attempt != 2 {
		t.Fatalf("first job %s attempt %d; want the pending %s, attempt 2", first.ID, first.Attempt, id)
	}
	levelsSettled(t, rdb)
}

// Counts split the waiting jobs by level once a queue uses priorities, and
// Locate finds a job in its level's stream.
func TestPriorityCountsAndLocate(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	c, err := ReadCounts(ctx, rdb, "q")
	if err != nil || c.ByPriority != nil {
		t.Fatalf("empty queue: %+v, %v", c, err)
	}
	enqueue(t, rdb, "q", 2)
	high := enqueueAt(t, rdb, PriorityHigh, 3)
	enqueueAt(t, rdb, PriorityLow, 1)
	if c, err = ReadCounts(ctx, rdb, "q"); err != nil {
		t.Fatal(err)
	}
	if c.Waiting != 6 || c.ByPriority["high"] != 3 || c.ByPriority["normal"] != 2 || c.ByPriority["low"] != 1 {
		t.Fatalf("counts %+v", c)
	}
	l, err := Locate(ctx, rdb, "q", high[2])
	if err != nil || l.State != StateWaiting || l.Priority != "high" || l.Ahead != 2 {
		t.Fatalf("locate: %+v, %v; want waiting at high with 2 ahead", l, err)
	}
	qs, err := Queues(ctx, rdb)
	if err != nil || fmt.Sprint(qs) != "[q]" {
		t.Fatalf("queues %v, %v", qs, err)
	}
}

func TestParsePriority(t *testing.T) {
	for in, want := range map[string]Priority{"high": PriorityHigh, "normal": PriorityNormal, "low": PriorityLow} {
		if p, err := ParsePriority(in); err != nil || p != want || p.String() != in {
			t.Errorf("%q: %v, %v", in, p, err)
		}
	}
	for _, in := range []string{"urgent", "HIGH", "1"} {
		if _, err := ParsePriority(in); !errors.Is(err, ErrBadOption) {
			t.Errorf("%q: %v, want ErrBadOption", in, err)
		}
	}
	rdb := redistest.Start(t).Client()
	if _, err := Enqueue(context.Background(), rdb, "q", []byte("x"), WithPriority(7)); !errors.Is(err, ErrBadOption) {
		t.Fatalf("priority 7: %v", err)
	}
}
