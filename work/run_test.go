package work

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
)

func enqueue(tb testing.TB, rdb *redis.Client, q string, n int) []string {
	tb.Helper()
	ctx := context.Background()
	cmds, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := 0; i < n; i++ {
			p.XAdd(ctx, &redis.XAddArgs{Stream: KeysFor(q).Stream, Values: []any{PayloadField, "job-" + strconv.Itoa(i)}})
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	ids := make([]string, n)
	for i, c := range cmds {
		ids[i] = c.(*redis.StringCmd).Val()
	}
	return ids
}

// settled asserts the stream is empty and nothing is pending.
func settled(tb testing.TB, rdb *redis.Client, q string) {
	tb.Helper()
	ctx := context.Background()
	if n := rdb.XLen(ctx, KeysFor(q).Stream).Val(); n != 0 {
		tb.Errorf("stream holds %d entries, want 0", n)
	}
	if p := rdb.XPending(ctx, KeysFor(q).Stream, Group).Val(); p != nil && p.Count != 0 {
		tb.Errorf("%d entries pending, want 0", p.Count)
	}
}

func pending(tb testing.TB, rdb *redis.Client, q string) int64 {
	tb.Helper()
	p, err := rdb.XPending(context.Background(), KeysFor(q).Stream, Group).Result()
	if err != nil {
		tb.Fatal(err)
	}
	return p.Count
}

// runUntil runs the loop until stop returns true, then cancels it.
func runUntil(tb testing.TB, c Config, st *Stats, stop func() bool) error {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- Run(ctx, c, st) }()
	deadline := time.After(30 * time.Second)
	for !stop() {
		select {
		case err := <-errc:
			return err
		case <-deadline:
			cancel()
			tb.Fatal("condition not reached in 30s")
		case <-time.After(5 * time.Millisecond):
		}
	}
	cancel()
	return <-errc
}

func testConfig(rdb *redis.Client, h Handler) Config {
	return Config{Client: rdb, Queue: "q", Consumer: "h/run-0", Handler: h, Grace: 5 * time.Second, Logger: testLogger()}
}

func TestRunDrainsQueue(t *testing.T) {
	for _, conc := range []int{1, 8} {
		t.Run(fmt.Sprint("concurrency ", conc), func(t *testing.T) {
			rdb := redistest.Start(t).Client()
			const n = 2000
			enqueue(t, rdb, "q", n)
			var mu sync.Mutex
			seen := map[string]int{}
			h := HandlerFunc(func(ctx context.Context, j *Job) error {
				mu.Lock()
				seen[string(j.Payload)]++
				mu.Unlock()
				if j.Attempt != 1 || j.Queue != "q" || j.Slot != "h/run-0" {
					t.Errorf("job %+v", j)
				}
				return nil
			})
			c := testConfig(rdb, h)
			c.Concurrency = conc
			st := new(Stats)
			err := runUntil(t, c, st, func() bool { return st.Done.Load() == n })
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Run = %v", err)
			}
			if len(seen) != n {
				t.Fatalf("%d distinct jobs ran, want %d", len(seen), n)
			}
			settled(t, rdb, "q")
			if got := rdb.HGet(context.Background(), KeysFor("q").Stats, "done").Val(); got != strconv.Itoa(n) {
				t.Fatalf("stats done = %q", got)
			}
		})
	}
}

func TestReplayOwnPendingFirst(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	ids := enqueue(t, rdb, "q", 3)
	if err := EnsureGroup(ctx, rdb, KeysFor("q")); err != nil {
		t.Fatal(err)
	}
	// A holder of this slot read two entries and died.
	if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: Group, Consumer: "h/run-0", Streams: []string{KeysFor("q").Stream, ">"}, Count: 2}).Err(); err != nil {
		t.Fatal(err)
	}
	// Another slot's pending entry is not ours to replay.
	enqueue(t, rdb, "q", 1)
	var order []string
	var attempts []int
	h := HandlerFunc(func(ctx context.Context, j *Job) error {
		order = append(order, j.ID)
		attempts = append(attempts, j.Attempt)
		return nil
	})
	st := new(Stats)
	runUntil(t, testConfig(rdb, h), st, func() bool { return st.Done.Load() == 4 })
	if order[0] != ids[0] || order[1] != ids[1] || attempts[0] != 2 || attempts[1] != 2 || attempts[2] != 1 {
		t.Fatalf("order %v attempts %v, want %v first with attempt 2", order, attempts, ids[:2])
	}
	if n := rdb.HGet(ctx, KeysFor("q").Stats, StatFailedPrefix+FailedCrashed).Val(); n != "2" {
		t.Fatalf("failed:crashed = %q, want 2: the dead holder's two deliveries", n)
	}
	settled(t, rdb, "q")
}

func TestGhostEntryIsCleared(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	ids := enqueue(t, rdb, "q", 1)
	_ = EnsureGroup(ctx, rdb, KeysFor("q"))
	rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: Group, Consumer: "h/run-0", Streams: []string{KeysFor("q").Stream, ">"}, Count: 1})
	rdb.XDel(ctx, KeysFor("q").Stream, ids[0])
	var ran atomic.Int64
	h := HandlerFunc(func(context.Context, *Job) error { ran.Add(1); return nil })
	runUntil(t, testConfig(rdb, h), nil, func() bool { return pending(t, rdb, "q") == 0 })
	if ran.Load() != 0 {
		t.Fatal("a deleted entry was handed to the handler")
	}
}

func TestDrainFinishesInFlightJob(t *testing.T) {
	rdb := redistest.Start(t).Client()
	enqueue(t, rdb, "q", 5)
	started := make(chan struct{})
	var once sync.Once
	h := HandlerFunc(func(ctx context.Context, j *Job) error {
		once.Do(func() { close(started) })
		select {
		case <-time.After(300 * time.Millisecond):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	st := new(Stats)
	errc := make(chan error)
	go func() { errc <- Run(ctx, testConfig(rdb, h), st) }()
	<-started
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
	if st.Done.Load() != 1 {
		t.Fatalf("done = %d, want the one in flight", st.Done.Load())
	}
	if n := rdb.XLen(context.Background(), KeysFor("q").Stream).Val(); n != 4 {
		t.Fatalf("stream holds %d, want 4 left", n)
	}
	// The job read ahead was given back, not left pending, and counts no run.
	if p := pending(t, rdb, "q"); p != 0 {
		t.Fatalf("%d pending after a drain, want 0", p)
	}
	msgs := rdb.XRange(context.Background(), KeysFor("q").Stream, "-", "+").Val()
	last := msgs[len(msgs)-1].Values
	if last[attemptsField] != "0" || last[PayloadField] != "job-1" {
		t.Fatalf("given-back entry %v", last)
	}
}

func TestGraceCancelsHandlers(t *testing.T) {
	rdb := redistest.Start(t).Client()
	enqueue(t, rdb, "q", 1)
	started := make(chan struct{})
	h := HandlerFunc(func(ctx context.Context, j *Job) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	})
	c := testConfig(rdb, h)
	c.Grace = 50 * time.Millisecond
	c.Deadline = time.Now().Add(time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error)
	go func() { errc <- Run(ctx, c, nil) }()
	<-started
	cancel()
	select {
	case <-errc:
	case <-time.After(10 * time.Second):
		t.Fatal("handler not cancelled after the grace period")
	}
	if p := pending(t, rdb, "q"); p != 1 {
		t.Fatalf("pending = %d: an unfinished job must stay pending", p)
	}
}

func TestDeadlineAndMaxJobs(t *testing.T) {
	rdb := redistest.Start(t).Client()
	enqueue(t, rdb, "q", 500)
	c := testConfig(rdb, HandlerFunc(func(context.Context, *Job) error { return nil }))
	c.MaxJobs = 100
	st := new(Stats)
	if err := Run(context.Background(), c, st); err != nil {
		t.Fatal(err)
	}
	if d := st.Done.Load(); d < 90 || d > 110 {
		t.Fatalf("max_jobs 100 ran %d", d)
	}
	c.MaxJobs = 0
	c.Deadline = time.Now().Add(200 * time.Millisecond)
	start := time.Now()
	if err := Run(context.Background(), c, nil); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("deadline ignored: ran %v", el)
	}
}

func TestPanicIsAJobFailure(t *testing.T) {
	rdb := redistest.Start(t).Client()
	enqueue(t, rdb, "q", 2)
	h := HandlerFunc(func(ctx context.Context, j *Job) error {
		if string(j.Payload) == "job-0" {
			panic("bad job")
		}
		return nil
	})
	st := new(Stats)
	runUntil(t, testConfig(rdb, h), st, func() bool { return st.Done.Load() == 1 && st.Failed.Load() == 1 })
}

func testLogger() zerolog.Logger {
	if testing.Verbose() {
		return zerolog.New(zerolog.NewConsoleWriter()).Level(zerolog.DebugLevel)
	}
	return zerolog.Nop()
}
