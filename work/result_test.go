package work

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// runFor runs c in the background until the test ends, returning its stats.
func runFor(tb testing.TB, c Config) *Stats {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st := new(Stats)
	done := make(chan struct{})
	go func() { defer close(done); _ = Run(ctx, c, st) }()
	tb.Cleanup(func() { cancel(); <-done })
	return st
}

// waitFor waits up to 30s for cond.
func waitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	for end := time.Now().Add(30 * time.Second); !cond(); {
		if time.Now().After(end) {
			tb.Fatalf("not reached in 30s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type waited struct {
	b   []byte
	err error
}

// waitAsync starts Wait for id in a goroutine and waits until it registered.
func waitAsync(tb testing.TB, rdb *redis.Client, q, id string, ctx context.Context) <-chan waited {
	tb.Helper()
	before := rdb.HGet(context.Background(), KeysFor(q).Waiters, id).Val()
	out := make(chan waited, 1)
	go func() {
		b, err := Wait(ctx, rdb, q, id)
		out <- waited{b, err}
	}()
	waitFor(tb, "the waiter registered", func() bool { return rdb.HGet(context.Background(), KeysFor(q).Waiters, id).Val() != before })
	return out
}

func within(tb testing.TB, c <-chan waited, d time.Duration) waited {
	tb.Helper()
	select {
	case w := <-c:
		return w
	case <-time.After(d):
		tb.Fatalf("Wait did not return within %s", d)
		return waited{}
	}
}

// A Go handler's result: two waiters registered before it ran get it,
// a Wait after it is done gets it at once, Result reads it, and a waiter
// registered with retention 0 still gets it.
func TestGoResultAndWait(t *testing.T) {
	for _, keep := range []time.Duration{time.Minute, 0} {
		t.Run("retention "+keep.String(), func(t *testing.T) {
			rdb := redistest.Start(t).Client()
			ctx := context.Background()
			ids := put(t, rdb, "a", "b")
			w1 := waitAsync(t, rdb, "q", ids[0], ctx)
			w2 := waitAsync(t, rdb, "q", ids[0], ctx)
			c := testConfig(rdb, HandlerFunc(func(ctx context.Context, j *Job) error {
				if string(j.Payload) == "b" {
					return nil // no result
				}
				return SetResult(ctx, []byte("result of "+string(j.Payload)+"\x00\xff"))
			}))
			c.Retention = keep
			st := runFor(t, c)
			for _, w := range []<-chan waited{w1, w2} {
				got := within(t, w, 10*time.Second)
				if got.err != nil || string(got.b) != "result of a\x00\xff" {
					t.Errorf("Wait = %q, %v", got.b, got.err)
				}
			}
			waitFor(t, "both done", func() bool { return st.Done.Load() == 2 })
			if keep == 0 {
				if _, err := Result(ctx, rdb, "q", ids[0]); !errors.Is(err, ErrUnknownJob) {
					t.Errorf("Result with retention 0: %v, want ErrUnknownJob", err)
				}
				if _, err := Wait(ctx, rdb, "q", ids[0]); !errors.Is(err, ErrUnknownJob) {
					t.Errorf("Wait with retention 0 after the job: %v, want ErrUnknownJob", err)
				}
				return
			}
			b, err := Result(ctx, rdb, "q", ids[0])
			if err != nil || string(b) != "result of a\x00\xff" {
				t.Errorf("Result = %q, %v", b, err)
			}
			if b, err := Result(ctx, rdb, "q", ids[1]); err != nil || b != nil {
				t.Errorf("Result of a job without one = %q, %v; want nil, nil", b, err)
			}
			start := time.Now()
			if b, err := Wait(ctx, rdb, "q", ids[0]); err != nil || string(b) != "result of a\x00\xff" || time.Since(start) > 2*time.Second {
				t.Errorf("Wait of a done job = %q, %v after %s", b, err, time.Since(start))
			}
			if n := rdb.HLen(ctx, KeysFor("q").Waiters).Val(); n != 0 {
				t.Errorf("%d waiters left registered", n)
			}
		})
	}
}

// A result over result_max fails the job with a clear error; nothing of
// it is kept, and its waiter learns the job died.
func TestResultOverMax(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	ids := put(t, rdb, "big")
	w := waitAsync(t, rdb, "q", ids[0], ctx)
	var setErr error
	c := testConfig(rdb, HandlerFunc(func(ctx context.Context, j *Job) error {
		setErr = SetResult(ctx, bytes.Repeat([]byte("x"), 101))
		return nil
	}))
	c.ResultMax, c.MaxAttempts, c.Retention = 100, 1, time.Minute
	st := runFor(t, c)
	got := within(t, w, 10*time.Second)
	var de *DeadError
	if !errors.As(got.err, &de) || de.Reason != ReasonFailed || !strings.Contains(de.Err, "101 bytes, result_max is 100") {
		t.Errorf("Wait = %q, %v; want a dead error naming result_max", got.b, got.err)
	}
	if !errors.Is(setErr, ErrResultTooLarge) {
		t.Errorf("SetResult = %v, want ErrResultTooLarge", setErr)
	}
	waitFor(t, "dead", func() bool { return st.Dead.Load() == 1 })
	if n := rdb.Exists(ctx, KeysFor("q").Results).Val(); n != 0 {
		t.Errorf("a result was kept")
	}
}

// Wait of a dead job: a rejected one, a cancelled waiting one (both a
// waiter registered before and a Wait after), an unknown id, and a ctx
// that ends first.
func TestWaitDeadUnknownAndCancelled(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	ids := put(t, rdb, "reject", "cancel me")
	wc := waitAsync(t, rdb, "q", ids[1], ctx)
	if res, err := Cancel(ctx, rdb, "q", ids[1]); err != nil || res[0].Outcome != CancelDone {
		t.Fatalf("cancel: %+v, %v", res, err)
	}
	if got := within(t, wc, 10*time.Second); !errors.Is(got.err, ErrCancelled) {
		t.Errorf("Wait of a job cancelled while waiting = %v, want ErrCancelled", got.err)
	}
	if _, err := Wait(ctx, rdb, "q", ids[1]); !errors.Is(err, ErrCancelled) {
		t.Errorf("Wait after the cancel = %v, want ErrCancelled", err)
	}

	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := Wait(short, rdb, "q", ids[0]); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 3*time.Second {
		t.Errorf("Wait with a ctx ending first = %v after %s", err, time.Since(start))
	}
	waitFor(t, "the ended waiter unregistered", func() bool { return rdb.HLen(ctx, KeysFor("q").Waiters).Val() == 0 })

	w := waitAsync(t, rdb, "q", ids[0], ctx)
	c := testConfig(rdb, HandlerFunc(func(ctx context.Context, j *Job) error {
		return errors.Join(errors.New("no thanks"), ErrSkipRetry)
	}))
	runFor(t, c)
	got := within(t, w, 10*time.Second)
	var de *DeadError
	if !errors.As(got.err, &de) || de.Reason != ReasonRejected || !strings.Contains(de.Err, "no thanks") || errors.Is(got.err, ErrCancelled) {
		t.Errorf("Wait of a rejected job = %v", got.err)
	}
	if _, err := Wait(ctx, rdb, "q", "1-0"); !errors.Is(err, ErrUnknownJob) {
		t.Errorf("Wait of an unknown id = %v", err)
	}
	if _, err := Result(ctx, rdb, "q", ids[0]); !errors.Is(err, ErrNotDone) {
		t.Errorf("Result of a dead job = %v, want ErrNotDone", err)
	}
}

// Progress from a Go handler reaches Redis (ProgressOf) while it runs and
// the holder's Stats; a flood is written at most twice a second, the
// handler never blocks on it, and an out-of-range pct records nothing.
func TestGoProgressFlood(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	ids := put(t, rdb, "p")
	release := make(chan struct{})
	var once sync.Once
	var bad error
	c := testConfig(rdb, HandlerFunc(func(ctx context.Context, j *Job) error {
		bad = Progress(ctx, 101, "too far")
		start := time.Now()
		for i := 0; time.Since(start) < 2*time.Second; i++ {
			_ = Progress(ctx, i%100, "flood")
		}
		_ = Progress(ctx, 42, "resizing")
		once.Do(func() {})
		<-release
		return nil
	}))
	before := hsetCalls(t, rdb)
	st := runFor(t, c)
	waitFor(t, "progress 42 in Redis", func() bool {
		n, ok, _ := ProgressOf(ctx, rdb, "q", ids[0])
		return ok && n.Pct == 42 && n.Msg == "resizing"
	})
	if j := st.Recent.Load(); j == nil {
		t.Error("no running job in Stats")
	} else if n, ok := j.ProgressNow(); !ok || n.Pct != 42 {
		t.Errorf("the job's progress %+v", n)
	}
	if !errors.Is(bad, ErrBadProgress) {
		t.Errorf("Progress(101) = %v, want ErrBadProgress", bad)
	}
	// 2s of flood and the wait above: at most twice a second, plus one.
	if n := hsetCalls(t, rdb) - before; n < 1 || n > 8 {
		t.Errorf("%d progress writes for about 3s of flood, want at most twice a second", n)
	}
	close(release)
	waitFor(t, "done and its progress gone", func() bool {
		_, ok, _ := ProgressOf(ctx, rdb, "q", ids[0])
		return st.Done.Load() == 1 && !ok
	})
}

// hsetCalls is how many HSET calls the server ran.
func hsetCalls(tb testing.TB, rdb *redis.Client) int {
	tb.Helper()
	info := rdb.Info(context.Background(), "commandstats").Val()
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_hset:calls="); ok {
			n := 0
			for _, c := range rest {
				if c < '0' || c > '9' {
					break
				}
				n = n*10 + int(c-'0')
			}
			return n
		}
	}
	return 0
}

// A job with a unique key and a result, acknowledged in one batch with
// jobs without either: every result lands under its own job, and the
// unique key is freed.
func TestResultsWithUniqueKeysInOneBatch(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	var ids []string
	for i, p := range []string{"u1", "plain", "u2", "none"} {
		var opts []Option
		if p[0] == 'u' {
			opts = append(opts, UniqueKey("key-"+p))
		}
		id, err := Enqueue(ctx, rdb, "q", []byte(p), opts...)
		if err != nil {
			t.Fatal(i, err)
		}
		ids = append(ids, id)
	}
	c := testConfig(rdb, HandlerFunc(func(ctx context.Context, j *Job) error {
		if string(j.Payload) == "none" {
			return nil
		}
		return SetResult(ctx, []byte("r-"+string(j.Payload)))
	}))
	c.Retention = time.Minute
	st := runFor(t, c)
	waitFor(t, "all done", func() bool { return st.Done.Load() == 4 })
	for i, want := range []string{"r-u1", "r-plain", "r-u2", ""} {
		if b, err := Result(ctx, rdb, "q", ids[i]); err != nil || string(b) != want {
			t.Errorf("job %d: %q, %v; want %q", i, b, err, want)
		}
	}
	if n := rdb.Exists(ctx, KeysFor("q").Unique("key-u1"), KeysFor("q").Unique("key-u2")).Val(); n != 0 {
		t.Errorf("%d unique keys left", n)
	}
}
