package lock_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/lock"
	"github.com/redis/go-redis/v9"
)

// TestLeaseDataLossPause: a Redis that loses the queue's lease state while
// it runs on (same run id, same uptime) is quarantined like one restarted
// without its data. Host a holds run slot 0; the server has been up for
// longer than a TTL; then its data goes. Host b's candidate (run or standby
// slot, in one call) is granted nothing until a TTL after the loss, on
// Redis' clock; by then a, whose lease was lost, has found it gone and
// closed Lost; b's token is above a's. Losing only the fence counter
// pauses grants too, and tokens never go back. Losing only a's lease key
// keeps its slot from b until a's lease would have expired.
func TestLeaseDataLossPause(t *testing.T) {
	ctx := context.Background()
	opt := lock.LeaseOptions{TTL: time.Second, Renew: 100 * time.Millisecond}
	for _, c := range []struct {
		name  string
		slots int
		lost  bool          // a's lease is lost with the data
		min   time.Duration // the least time from the loss to b's grant
		loss  func(tb testing.TB, rdb *redis.Client)
	}{
		{"FLUSHALL", 1, true, opt.TTL, func(tb testing.TB, rdb *redis.Client) { must(tb, rdb.FlushAll(ctx).Err()) }},
		{"FLUSHDB", 1, true, opt.TTL, func(tb testing.TB, rdb *redis.Client) { must(tb, rdb.FlushDB(ctx).Err()) }},
		{"DEL of every baton key", 1, true, opt.TTL, func(tb testing.TB, rdb *redis.Client) {
			keys, err := rdb.Keys(ctx, "baton:*").Result()
			must(tb, err)
			must(tb, rdb.Del(ctx, keys...).Err())
		}},
		{"DEL of the fence counter", 2, false, opt.TTL, func(tb testing.TB, rdb *redis.Client) {
			must(tb, rdb.Del(ctx, lock.FenceKey("q")).Err())
		}},
		// Only a's lease key: the slot stays taken until the expiry a's
		// last renewal gave it, sent less than a renew deadline before.
		{"DEL of the lease key", 1, true, time.Second - lock.DeadlineFor(time.Second), func(tb testing.TB, rdb *redis.Client) {
			must(tb, rdb.Del(ctx, lock.LeaseKey("q", lock.RoleRun, 0)).Err())
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			rdb := srv.Client()
			// Every set before the loss: leaseSet marks the server fresh
			// (lock.MarkFresh), which after the loss would be a lie.
			a := leaseSet(t, rdb, "a", lock.RoleRun, c.slots, opt)
			b := newFleetHost(t, rdb, "b", c.slots, 1, opt)
			held, ok, err := a.TryAcquire()
			if err != nil || !ok {
				t.Fatal("no grant on a Redis marked fresh:", ok, err)
			}
			defer held.Release()
			_, tokA := held.(lock.Fencer).Fence()
			// Up for longer than a TTL (in whole seconds, up to one over):
			// a restart would be long past.
			eventually(t, 10*time.Second, "redis up for 2s", func() bool {
				up, _ := strconv.Atoi(rdb.InfoMap(ctx, "server").Val()["Server"]["uptime_in_seconds"])
				return up >= 2
			})

			lossAt, err := rdb.Time(ctx).Result()
			must(t, err)
			c.loss(t, rdb)
			var got lock.Slot
			var lostFirst bool
			deadline := time.Now().Add(4 * opt.TTL)
			for got == nil {
				select {
				case <-held.Lost():
					lostFirst = true
				default:
				}
				var sl lock.Slot
				var role string
				var err error
				if c.min < opt.TTL { // no pause: the standby slot is free, try the run slot alone
					var ok bool
					if sl, ok, err = b.run.TryAcquire(); ok {
						role = lock.RoleRun
					}
				} else {
					sl, role, err = b.run.TryAcquireOr(b.sb)
				}
				switch {
				case err != nil:
					t.Fatal(err)
				case role == lock.RoleStandby:
					t.Fatalf("b was granted standby slot %d after the loss, want the run slot", sl.Index())
				case role == lock.RoleRun:
					got = sl
				case time.Now().After(deadline):
					t.Fatal("no grant after the pause")
				default:
					time.Sleep(20 * time.Millisecond)
				}
			}
			defer got.Release()
			recs, err := b.run.Records()
			must(t, err)
			waited := recs[got.Index()].Since.Sub(lossAt) // both on Redis' clock
			if waited < c.min-time.Millisecond {
				t.Errorf("b granted run slot %d %s after the loss, before %s (lease_ttl %s) passed", got.Index(), waited, c.min, opt.TTL)
			}
			if c.lost && !lostFirst {
				t.Errorf("b granted run slot %d while a, whose lease was lost, still held it", got.Index())
			}
			if !c.lost {
				select {
				case <-held.Lost():
					t.Errorf("a lost a lease the server kept: %s", held.(interface{ LostReason() string }).LostReason())
				default:
				}
			}
			if _, tokB := got.(lock.Fencer).Fence(); tokB <= tokA {
				t.Errorf("b's token %d after a's %d: tokens must keep growing", tokB, tokA)
			}
			t.Logf("%s: b granted %s after it (lease_ttl %s)", c.name, waited.Round(time.Millisecond), opt.TTL)
		})
	}
}

// After MarkFresh, a loss is a loss: the mark went with the data, and the
// first grant after it waits a TTL even on a server just started.
func TestLeaseMarkFreshThenFlush(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	rdb := srv.Client()
	opt := lock.LeaseOptions{TTL: 1500 * time.Millisecond, Renew: 150 * time.Millisecond}
	s := leaseSet(t, rdb, "a", lock.RoleRun, 1, opt) // marks it fresh
	must(t, rdb.FlushAll(ctx).Err())
	if _, ok, err := s.TryAcquire(); ok || err != nil {
		t.Fatalf("granted at once after a FLUSHALL that took the fresh mark: %v %v", ok, err)
	}
	if p, err := s.PausedFor(); err != nil || p < opt.TTL-100*time.Millisecond || p > opt.TTL {
		t.Fatalf("after the FLUSHALL: paused %s (%v), want about %s", p, err, opt.TTL)
	}
	if ok, err := lock.MarkFresh(ctx, rdb, "q"); ok || err != nil {
		t.Fatalf("MarkFresh on a server that holds the queue's lease state: %v %v, want false", ok, err)
	}
}

func must(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}

// eventually polls cond every 20ms until it holds, failing after d.
func eventually(tb testing.TB, d time.Duration, what string, cond func() bool) {
	tb.Helper()
	for end := time.Now().Add(d); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			tb.Fatalf("%s: not within %s", what, d)
		}
	}
}
