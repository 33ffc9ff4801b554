package work

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/lock"
	"github.com/redis/go-redis/v9"
)

// lapsing is a real lease's Holding whose clock can be made to say, at
// once, that the renew deadline passed: what a holder stopped (SIGSTOP) past
// its lease sees when it resumes. Added to a client as a go-redis hook, it
// lapses the moment a reply satisfies on (a single command, or one of a
// pipeline when piped): a holder stopped right after that reply.
type lapsing struct {
	lock.Holding
	lapsed atomic.Bool
	on     func(redis.Cmder) bool
	piped  bool
}

func (l *lapsing) DialHook(next redis.DialHook) redis.DialHook { return next }

func (l *lapsing) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if !l.piped && l.on != nil && l.on(cmd) {
			l.lapsed.Store(true)
		}
		return err
	}
}

func (l *lapsing) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			if l.piped && l.on != nil && l.on(c) {
				l.lapsed.Store(true)
			}
		}
		return err
	}
}

func (l *lapsing) HeldFor() time.Duration {
	if l.lapsed.Load() {
		return 0
	}
	return l.Holding.HeldFor()
}

func (l *lapsing) HeldAt(now time.Time) bool { return !l.lapsed.Load() && l.Holding.HeldAt(now) }

// A holder whose lease is no longer surely its own by its own clock reads
// nothing and starts nothing, though Redis would still take its writes:
// neither before its first read, nor a job it read ahead while another ran.
// Run returns ErrLeaseLapsed; every entry it did not finish stays in the
// stream, pending or waiting, for the slot's next holder.
func TestLapsedLeaseReadsAndStartsNothing(t *testing.T) {
	for _, tc := range []struct {
		name        string
		lapsedFirst bool
	}{
		{"lapsed before the first read", true},
		{"lapsed while a job runs, one read ahead", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb := redistest.Start(t).Client()
			sl := runLease(t, rdb)
			held := &lapsing{Holding: sl.(lock.Holding)}
			if held.HeldFor() <= 0 || !held.HeldAt(time.Now()) {
				t.Fatalf("a lease just granted: held for %s, held now %v", held.HeldFor(), held.HeldAt(time.Now()))
			}
			held.lapsed.Store(tc.lapsedFirst)
			ids := enqueue(t, rdb, "q", 3)
			var ran atomic.Int64
			h := HandlerFunc(func(ctx context.Context, j *Job) error {
				ran.Add(1)
				// The job read ahead is in the workers' channel by now.
				for end := time.Now().Add(5 * time.Second); pending(t, rdb, "q") < 2 && time.Now().Before(end); {
					time.Sleep(5 * time.Millisecond)
				}
				held.lapsed.Store(true)
				return nil
			})
			key, token := sl.Fence()
			c := testConfig(rdb, h)
			c.Consumer = "fleet/run-0"
			c.Fence = &Fence{Key: key, Token: token, Held: held}
			runUntilLapsed(t, c, 10*time.Second)
			want, left := int64(1), int64(2)
			if tc.lapsedFirst {
				want, left = 0, 3
				if n := pending(t, rdb, "q"); n != 0 {
					t.Errorf("%d entries read with the lease lapsed, want none", n)
				}
			}
			if n := ran.Load(); n != want {
				t.Errorf("%d jobs started, want %d", n, want)
			}
			if n := rdb.XLen(context.Background(), KeysFor("q").Stream).Val(); n != left {
				t.Errorf("stream holds %d of the %d entries, want %d left for the next holder", n, len(ids), left)
			}
		})
	}
}

// runLease is queue q's one run slot, taken on rdb (a fresh server, marked
// so) with a 10 s lease; released at the test's end.
func runLease(t *testing.T, rdb *redis.Client) lock.Slot {
	t.Helper()
	if _, err := lock.MarkFresh(context.Background(), rdb, "q"); err != nil {
		t.Fatal(err)
	}
	set, err := lock.NewLeaseSet(rdb, "q", lock.RoleRun, 1, lock.LeaseOptions{Host: "a", TTL: 10 * time.Second, Renew: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	sl, ok, err := set.TryAcquire()
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	t.Cleanup(func() { _ = sl.Release() })
	return sl
}

// runUntilLapsed runs c until Run returns, which must be within d and with
// ErrLeaseLapsed.
func runUntilLapsed(t *testing.T, c Config, d time.Duration) {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- Run(context.Background(), c, nil) }()
	select {
	case err := <-errc:
		if !errors.Is(err, ErrLeaseLapsed) {
			t.Fatalf("Run: %v, want ErrLeaseLapsed", err)
		}
	case <-time.After(d):
		t.Fatalf("Run did not stop within %s of its lease lapsing", d)
	}
}
