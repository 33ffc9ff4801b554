package work

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/redis/go-redis/v9"
)

func fastRetry(c Config) Config {
	c.RetryBackoff, c.RetryBackoffMax = 10*time.Millisecond, 20*time.Millisecond
	return c
}

func deadLetters(tb testing.TB, rdb *redis.Client, q string) []redis.XMessage {
	tb.Helper()
	msgs, err := rdb.XRange(context.Background(), KeysFor(q).Dead, "-", "+").Result()
	if err != nil {
		tb.Fatal(err)
	}
	return msgs
}

func TestFailedJobIsRetried(t *testing.T) {
	rdb := redistest.Start(t).Client()
	enqueue(t, rdb, "q", 3)
	var mu sync.Mutex
	attempts := map[string][]int{}
	h := HandlerFunc(func(ctx context.Context, j *Job) error {
		mu.Lock()
		attempts[string(j.Payload)] = append(attempts[string(j.Payload)], j.Attempt)
		mu.Unlock()
		if string(j.Payload) == "job-1" && j.Attempt < 3 {
			return errors.New("boom")
		}
		return nil
	})
	st := new(Stats)
	runUntil(t, fastRetry(testConfig(rdb, h)), st, func() bool { return st.Done.Load() == 3 })
	if got := attempts["job-1"]; len(got) != 3 || got[0] != 1 || got[1] != 2 || got[2] != 3 {
		t.Fatalf("job-1 attempts %v, want [1 2 3]", got)
	}
	settled(t, rdb, "q")
	if n := rdb.ZCard(context.Background(), KeysFor("q").Retry).Val(); n != 0 {
		t.Fatalf("%d retries left scheduled", n)
	}
}

func TestAlwaysFailingJobIsDeadLettered(t *testing.T) {
	rdb := redistest.Start(t).Client()
	enqueue(t, rdb, "q", 2)
	var runs atomic.Int64
	h := HandlerFunc(func(ctx context.Context, j *Job) error {
		if string(j.Payload) == "job-0" {
			runs.Add(1)
			return errors.New("no such image")
		}
		return nil
	})
	c := fastRetry(testConfig(rdb, h))
	c.MaxAttempts = 3
	st := new(Stats)
	runUntil(t, c, st, func() bool { return st.Dead.Load() == 1 && st.Done.Load() == 1 })
	if runs.Load() != 3 {
		t.Fatalf("ran %d times, want max_attempts = 3", runs.Load())
	}
	dead := deadLetters(t, rdb, "q")
	if len(dead) != 1 {
		t.Fatalf("%d dead letters", len(dead))
	}
	v := dead[0].Values
	if v["reason"] != ReasonFailed || v["attempts"] != "3" || v["payload"] != "job-0" || v["error"] != "no such image" || v["failed_at"] == "" {
		t.Fatalf("dead letter %v", v)
	}
	settled(t, rdb, "q")
}

func TestCrashLoopIsDeadLetteredAndQueueFlows(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	ids := enqueue(t, rdb, "q", 3)
	_ = EnsureGroup(ctx, rdb, KeysFor("q"))
	// Three holders of this slot each took job-0 and died with it.
	for i := 0; i < 3; i++ {
		args := &redis.XClaimArgs{Stream: KeysFor("q").Stream, Group: Group, Consumer: "h/run-0", Messages: []string{ids[0]}}
		if i == 0 {
			rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: Group, Consumer: "h/run-0", Streams: []string{KeysFor("q").Stream, ">"}, Count: 1})
			continue
		}
		rdb.XClaim(ctx, args)
	}
	var ran []string
	h := HandlerFunc(func(ctx context.Context, j *Job) error { ran = append(ran, string(j.Payload)); return nil })
	c := testConfig(rdb, h)
	c.MaxAttempts = 3
	st := new(Stats)
	runUntil(t, c, st, func() bool { return st.Done.Load() == 2 && st.Dead.Load() == 1 })
	if strings.Join(ran, ",") != "job-1,job-2" {
		t.Fatalf("ran %v: the crashing job must not run again", ran)
	}
	v := deadLetters(t, rdb, "q")[0].Values
	if v["reason"] != ReasonCrashed || v["attempts"] != "3" {
		t.Fatalf("dead letter %v", v)
	}
	settled(t, rdb, "q")
}

func TestBadEntriesAreDeadLetteredUnrun(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	s := KeysFor("q").Stream
	rdb.XAdd(ctx, &redis.XAddArgs{Stream: s, Values: []any{"body", "x"}})
	rdb.XAdd(ctx, &redis.XAddArgs{Stream: s, Values: []any{PayloadField, "x", attemptsField, "many"}})
	rdb.XAdd(ctx, &redis.XAddArgs{Stream: s, Values: []any{PayloadField, strings.Repeat("x", 101)}})
	rdb.XAdd(ctx, &redis.XAddArgs{Stream: s, Values: []any{PayloadField, "fine"}})
	var ran []string
	h := HandlerFunc(func(ctx context.Context, j *Job) error { ran = append(ran, string(j.Payload)); return nil })
	c := testConfig(rdb, h)
	c.MaxPayload = 100
	st := new(Stats)
	runUntil(t, c, st, func() bool { return st.Done.Load() == 1 && st.Dead.Load() == 3 })
	if strings.Join(ran, ",") != "fine" {
		t.Fatalf("ran %v", ran)
	}
	var reasons []string
	for _, m := range deadLetters(t, rdb, "q") {
		reasons = append(reasons, m.Values["reason"].(string))
	}
	if strings.Join(reasons, ",") != "malformed,malformed,too_large" {
		t.Fatalf("reasons %v", reasons)
	}
	settled(t, rdb, "q")
}

func TestDeadMaxDropsOldest(t *testing.T) {
	rdb := redistest.Start(t).Client()
	enqueue(t, rdb, "q", 4)
	h := HandlerFunc(func(ctx context.Context, j *Job) error { return errors.New("no") })
	c := testConfig(rdb, h)
	c.MaxAttempts, c.DeadMax = 1, 2
	st := new(Stats)
	runUntil(t, c, st, func() bool { return st.Dead.Load() == 4 })
	dead := deadLetters(t, rdb, "q")
	if len(dead) != 2 || dead[0].Values["payload"] != "job-2" || dead[1].Values["payload"] != "job-3" {
		t.Fatalf("dead letters %v, want the newest two", dead)
	}
}

func TestAbandonedEntryIsClaimed(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	enqueue(t, rdb, "q", 1)
	_ = EnsureGroup(ctx, rdb, KeysFor("q"))
	// A consumer whose slot never comes back took the job.
	rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: Group, Consumer: "gone/run-9", Streams: []string{KeysFor("q").Stream, ">"}, Count: 1})
	var attempt atomic.Int64
	h := HandlerFunc(func(ctx context.Context, j *Job) error { attempt.Store(int64(j.Attempt)); return nil })
	c := testConfig(rdb, h)
	c.VisibilityTimeout = 300 * time.Millisecond
	st := new(Stats)
	runUntil(t, c, st, func() bool { return st.Done.Load() == 1 })
	if attempt.Load() != 2 {
		t.Fatalf("claimed job ran as attempt %d, want 2", attempt.Load())
	}
	settled(t, rdb, "q")
}

func TestRunningJobIsNeverClaimed(t *testing.T) {
	rdb := redistest.Start(t).Client()
	enqueue(t, rdb, "q", 1)
	var runs atomic.Int64
	h := HandlerFunc(func(ctx context.Context, j *Job) error {
		runs.Add(1)
		time.Sleep(2500 * time.Millisecond)
		return nil
	})
	a, b := testConfig(rdb, h), testConfig(rdb, h)
	b.Consumer = "h/run-1"
	// The job outlives the visibility timeout more than twice over; the
	// holder's keeper (every 250ms) has room to be late on a loaded machine.
	a.VisibilityTimeout, b.VisibilityTimeout = time.Second, time.Second
	ctx, cancel := context.WithCancel(context.Background())
	sa, sb := new(Stats), new(Stats)
	done := make(chan struct{}, 2)
	go func() { Run(ctx, a, sa); done <- struct{}{} }()
	time.Sleep(100 * time.Millisecond)
	go func() { Run(ctx, b, sb); done <- struct{}{} }()
	for sa.Done.Load()+sb.Done.Load() < 1 {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	cancel()
	<-done
	<-done
	if runs.Load() != 1 {
		t.Fatalf("a running job was taken by another holder: ran %d times", runs.Load())
	}
	settled(t, rdb, "q")
}

func TestBackoff(t *testing.T) {
	r := &runner{c: Config{RetryBackoff: time.Second, RetryBackoffMax: 10 * time.Second}}
	for _, tc := range []struct {
		attempt  int
		min, max time.Duration
	}{{1, 500 * time.Millisecond, time.Second}, {2, time.Second, 2 * time.Second}, {4, 4 * time.Second, 8 * time.Second}, {5, 5 * time.Second, 10 * time.Second}, {60, 5 * time.Second, 10 * time.Second}} {
		for i := 0; i < 100; i++ {
			if d := r.backoff(tc.attempt); d < tc.min || d > tc.max {
				t.Fatalf("backoff(%d) = %v, want in [%v, %v]", tc.attempt, d, tc.min, tc.max)
			}
		}
	}
}

// A due member that cannot be moved (here a record that is not MessagePack)
// is put back a minute later and never blocks the members behind it.
func TestBadDueMemberDoesNotBlockTheRest(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	k := KeysFor("q")
	rdb.HSet(ctx, k.RetryJobs, "1-1", "\xc1 not msgpack")
	rdb.ZAdd(ctx, k.Retry, redis.Z{Score: 1, Member: "1-1"})
	id, err := Enqueue(ctx, rdb, "q", []byte("later"), In(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if n := rdb.ZCard(ctx, k.Scheduled).Val(); n != 1 {
		t.Fatalf("%d scheduled, want 1", n)
	}
	time.Sleep(110 * time.Millisecond)
	v, err := runScript(ctx, rdb, dueScript, k.due(), 100).Int64Slice()
	if err != nil || v[0] != 1 || v[1] != 1 {
		t.Fatalf("due script: %v, %v; want 1 moved, 1 stuck", v, err)
	}
	if s := rdb.ZScore(ctx, k.Retry, "1-1").Val(); time.Until(time.UnixMilli(int64(s))) < 50*time.Second {
		t.Fatalf("stuck member due at %v, want about a minute from now", time.UnixMilli(int64(s)))
	}
	if l, err := Locate(ctx, rdb, "q", id); err != nil || l.State != StateWaiting {
		t.Fatalf("scheduled job behind the stuck one: %+v, %v", l, err)
	}
}
