package lock_test

import (
	"context"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/lock"
)

// TestLeaseFailoverPause: a Redis restarted with its data (AOF) is a new
// server (a new run id) holding the old server's lease state, which is what
// a promoted replica looks like. Grants pause for a TTL there; a lease it
// kept is renewed as before; a grant it lost (the lease key deleted, the
// fence counter set back, as if the last writes never replicated) is not
// granted again until its holder has fenced itself, and the new token is
// above the lost one.
func TestLeaseFailoverPause(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t, redistest.Appendonly)
	rdb := srv.Client()
	opt := lock.LeaseOptions{TTL: 3 * time.Second, Renew: 200 * time.Millisecond}
	a := leaseSet(t, rdb, "a", lock.RoleRun, 1, opt)
	b := leaseSet(t, rdb, "b", lock.RoleRun, 1, opt)
	if p, err := b.PausedFor(); err != nil || p != 0 {
		t.Fatalf("fresh Redis: paused %s (%v), want no pause", p, err)
	}
	held, ok, err := a.TryAcquire()
	if err != nil || !ok {
		t.Fatal("fresh Redis: no grant at once:", ok, err)
	}
	defer held.Release()
	_, tokA := held.(lock.Fencer).Fence()
	if tokA < time.Now().Add(-time.Minute).UnixMicro() {
		t.Errorf("first token %d: want the counter raised to Redis' clock in µs", tokA)
	}

	// 1. Same data, new run id: the kept lease is renewed through the pause.
	srv.Restart()
	if _, ok, err := b.TryAcquire(); ok || err != nil {
		t.Fatalf("b took a held lease after the restart: %v %v", ok, err)
	}
	if p, err := b.PausedFor(); err != nil || p <= 0 || p > opt.TTL {
		t.Fatalf("after a restart: paused %s (%v), want (0, %s]", p, err, opt.TTL)
	}
	time.Sleep(opt.TTL + opt.TTL/2)
	select {
	case <-held.Lost():
		t.Fatalf("a kept lease was lost across the restart: %s", held.(interface{ LostReason() string }).LostReason())
	default:
	}

	// 2. A lost grant: the new server lacks a's lease and the counter lags.
	srv.Restart()
	if err := rdb.Del(ctx, lock.LeaseKey("q", lock.RoleRun, 0)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, lock.FenceKey("q"), 1, 0).Err(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var got lock.Slot
	for got == nil {
		sl, ok, err := b.TryAcquire()
		switch {
		case err != nil:
			t.Fatal(err)
		case ok:
			got = sl
		case time.Since(start) > 4*opt.TTL:
			t.Fatal("no grant after the pause")
		default:
			time.Sleep(20 * time.Millisecond)
		}
	}
	defer got.Release()
	waited := time.Since(start)
	select {
	case <-held.Lost():
	default:
		t.Fatal("b was granted the slot while a, whose grant was lost, still ran")
	}
	if waited < opt.TTL-100*time.Millisecond {
		t.Errorf("granted %s after the restart, before a TTL (%s) passed", waited, opt.TTL)
	}
	if _, tokB := got.(lock.Fencer).Fence(); tokB <= tokA {
		t.Errorf("token %d after the lost grant's %d: tokens must keep growing", tokB, tokA)
	}
	t.Logf("grant after a lost lease: %s after the restart (lease_ttl %s); a fenced itself: %s", waited.Round(time.Millisecond), opt.TTL, held.(interface{ LostReason() string }).LostReason())
}

// BenchmarkLeaseLoser: one acquire of a set whose only lease is held, the
// losing candidate's one round trip (the failover check included).
func BenchmarkLeaseLoser(b *testing.B) {
	srv := redistest.Start(b)
	rdb := srv.Client()
	held, ok, err := leaseSet(b, rdb, "a", lock.RoleRun, 1, lock.LeaseOptions{}).TryAcquire()
	if err != nil || !ok {
		b.Fatal(ok, err)
	}
	defer held.Release()
	s := leaseSet(b, rdb, "b", lock.RoleRun, 1, lock.LeaseOptions{})
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, ok, err := s.TryAcquire(); ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}
