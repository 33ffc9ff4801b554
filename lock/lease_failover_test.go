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

// The hand-over paths keep the failover rule too. After a restart with the
// data (a new run id) and a fence counter that lost its last increments, a
// live lease's release still goes to the standby in line, with a token
// above every token before; a lease lost with the old server is not handed
// to a standby that looks during the pause, only after it, again with a
// larger token. Holding both sets to kept slots only (HandOverTo's k), a
// slot at or above k is freed, not handed over.
func TestLeaseHandOverKeepsFailoverRule(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t, redistest.Appendonly)
	rdb := srv.Client()
	opt := lock.LeaseOptions{TTL: 3 * time.Second, Renew: 200 * time.Millisecond}
	a := newFleetHost(t, rdb, "a", 1, 2, opt)
	b := newFleetHost(t, rdb, "b", 1, 2, opt)
	held, ok, err := a.run.TryAcquire()
	if err != nil || !ok {
		t.Fatal("run lease:", ok, err)
	}
	_, tok0 := held.(lock.Fencer).Fence()
	sb1, w1 := b.inLine(t)
	defer sb1.Release()
	sb2, w2 := b.inLine(t) // second in line
	defer sb2.Release()

	// 1. A live lease is handed over through the pause, above every token.
	srv.Restart()
	if err := rdb.Set(ctx, lock.FenceKey("q"), 1, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := held.Release(); err != nil {
		t.Fatal(err)
	}
	// Polled, as a standby does: the wake-up may be lost while its
	// subscription reconnects after the restart.
	got := polled(t, w1, time.Second)
	_, tok1 := got.(lock.Fencer).Fence()
	if tok1 <= tok0 {
		t.Fatalf("handed over with token %d after %d: tokens must keep growing across a failover", tok1, tok0)
	}

	// 2. A grant lost with the old server is handed out only after a TTL.
	srv.Restart()
	if err := rdb.Del(ctx, lock.LeaseKey("q", lock.RoleRun, 0)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, lock.FenceKey("q"), 1, 0).Err(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var again lock.Slot
	for again == nil {
		s, ok, err := w2.Take()
		switch {
		case err != nil:
			t.Fatal(err)
		case ok:
			again = s
		case time.Since(start) > 4*opt.TTL:
			t.Fatal("no hand-over after the pause")
		default:
			time.Sleep(20 * time.Millisecond)
		}
	}
	defer again.Release()
	if waited := time.Since(start); waited < opt.TTL-100*time.Millisecond {
		t.Errorf("a lost lease was handed to a standby %s after the restart, before a TTL (%s)", waited, opt.TTL)
	}
	if _, tok2 := again.(lock.Fencer).Fence(); tok2 <= tok1 {
		t.Errorf("token %d after %d: tokens must keep growing", tok2, tok1)
	}
	select {
	case <-got.Lost():
	default:
		t.Error("the holder whose lease was lost still holds it")
	}
}

// A release of a slot at or above HandOverTo's k (a holder started by
// scaling up) frees the lease instead of handing it to a standby: the
// standbys keep the k lowest slots covered.
func TestLeaseHandOverOnlyBelowK(t *testing.T) {
	rdb := redistest.Start(t).Client()
	opt := lock.LeaseOptions{TTL: 2 * time.Second, Renew: 200 * time.Millisecond}
	run := leaseSet(t, rdb, "a", lock.RoleRun, 2, opt)
	sb := leaseSet(t, rdb, "a", lock.RoleStandby, 1, opt)
	run.HandOverTo(sb, 1)
	first, ok, err := run.TryAcquire()
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	defer first.Release()
	second, ok, err := run.TryAcquire()
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	low, high := first, second
	if low.Index() != 0 {
		low, high = second, first
	}
	s, ok, err := sb.TryAcquire()
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	defer s.Release()
	w, err := run.Await(s)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Leave()
	if _, ok, err := w.Take(); ok || err != nil {
		t.Fatalf("joining the line: %v %v", ok, err)
	}
	if err := high.Release(); err != nil {
		t.Fatal(err)
	}
	notWoken(t, w)
	rs, err := run.Records()
	if err != nil {
		t.Fatal(err)
	}
	if rs[1].Held {
		t.Fatalf("slot 1 (at k) went to %+v: want it freed", rs[1])
	}
	if err := low.Release(); err != nil {
		t.Fatal(err)
	}
	if got := woken(t, w); got.Index() != 0 {
		t.Fatalf("handed slot %d, want 0", got.Index())
	} else {
		_ = got.Release()
	}
}

// polled takes the run lease handed to w, looking every 20ms for at most d.
func polled(tb testing.TB, w lock.Waiting, d time.Duration) lock.Slot {
	tb.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		s, ok, err := w.Take()
		if err != nil {
			tb.Fatal(err)
		}
		if ok {
			return s
		}
	}
	tb.Fatalf("nothing handed over in %s", d)
	return nil
}

// TestLeaseRestartWithoutData: a Redis restarted without persistence has
// lost every lease and the fence counter, and looks like a new server. It
// grants nothing until a TTL after its start, by when the holder of a lease
// it lost has fenced itself: that holder's next renewal finds the lease
// gone and it closes Lost at once. The next grant's token is above the lost
// one's.
func TestLeaseRestartWithoutData(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	opt := lock.LeaseOptions{TTL: 3 * time.Second, Renew: 200 * time.Millisecond}
	a := leaseSet(t, rdb, "a", lock.RoleRun, 1, opt)
	b := leaseSet(t, rdb, "b", lock.RoleRun, 1, opt)
	held, ok, err := a.TryAcquire()
	if err != nil || !ok {
		t.Fatal("no grant on a fresh Redis marked fresh:", ok, err)
	}
	defer held.Release()
	_, tokA := held.(lock.Fencer).Fence()

	// The server's process starts after before and before start: the grant
	// must wait a TTL from its start, so at least a TTL from before.
	before := time.Now()
	srv.Restart() // no AOF: every key is gone
	start := time.Now()
	var lost time.Duration
	var got lock.Slot
	for got == nil {
		select {
		case <-held.Lost():
			if lost == 0 {
				lost = time.Since(start)
			}
		default:
		}
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
	if lost == 0 {
		t.Fatalf("b was granted the slot %s after the restart while a, whose lease was lost, still held it", waited)
	}
	if lost > opt.TTL/2 {
		t.Errorf("a noticed its lost lease %s after the restart, want within a few renewals (%s)", lost, opt.Renew)
	}
	if since := time.Since(before); since < opt.TTL {
		t.Errorf("granted %s after the restart began, before a TTL (%s) passed", since, opt.TTL)
	}
	if _, tokB := got.(lock.Fencer).Fence(); tokB <= tokA {
		t.Errorf("token %d after the lost lease's %d: tokens must keep growing", tokB, tokA)
	}
	t.Logf("restart without data: a fenced itself %s after it (%s), b granted %s after it (lease_ttl %s)",
		lost.Round(time.Millisecond), held.(interface{ LostReason() string }).LostReason(), waited.Round(time.Millisecond), opt.TTL)
}
