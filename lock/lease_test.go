package lock_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/faultproxy"
	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/lock"
	"github.com/redis/go-redis/v9"
)

func leaseSet(tb testing.TB, rdb redis.UniversalClient, host, role string, n int, opt lock.LeaseOptions) *lock.LeaseSet {
	tb.Helper()
	opt.Host = host
	s, err := lock.NewLeaseSet(rdb, "q", role, n, opt)
	if err != nil {
		tb.Fatal(err)
	}
	fresh(tb, rdb, "q")
	return s
}

// fresh marks the test's new Redis as never having served queue, so its
// first grants are not paused (lock.MarkFresh); nothing once it has.
func fresh(tb testing.TB, rdb redis.UniversalClient, queue string) {
	tb.Helper()
	if _, err := lock.MarkFresh(context.Background(), rdb, queue); err != nil {
		tb.Fatal(err)
	}
}

// expire makes the lease key of queue expired on Redis' clock, as if its
// holder had stopped renewing long ago: the lease and its mirror in the
// epoch key (lock/lease_scripts.go mirrorLua).
func expire(tb testing.TB, rdb redis.UniversalClient, queue, key string) {
	tb.Helper()
	ctx := context.Background()
	if err := rdb.HSet(ctx, key, "expires", 1).Err(); err != nil {
		tb.Fatal(err)
	}
	if err := rdb.HSet(ctx, lock.EpochKey(queue), key, 1).Err(); err != nil {
		tb.Fatal(err)
	}
}

// Many candidates on three hosts race for 3 leases: exactly 3 win, with
// distinct tokens, and Records shows each with its host and pid.
func TestLeaseAtMostN(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	var mu sync.Mutex
	var won []lock.Slot
	var wg sync.WaitGroup
	for c := 0; c < 30; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := leaseSet(t, rdb, "host"+strconv.Itoa(c%3), lock.RoleRun, 3, lock.LeaseOptions{})
			sl, ok, err := s.TryAcquire()
			if err != nil {
				t.Error(err)
				return
			}
			if ok {
				mu.Lock()
				won = append(won, sl)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(won) != 3 {
		t.Fatalf("%d winners of 3 leases", len(won))
	}
	seen := map[int64]bool{}
	for _, sl := range won {
		_, tok := sl.(lock.Fencer).Fence()
		if seen[tok] || tok < 1 {
			t.Errorf("token %d repeated or not positive", tok)
		}
		seen[tok] = true
	}
	rs, err := leaseSet(t, rdb, "x", lock.RoleRun, 3, lock.LeaseOptions{}).Records()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if !r.Held || r.Host == "" || r.PID == 0 || r.Fence < 1 || r.ExpiresIn <= 0 || r.ExpiresIn > 15*time.Second || r.Since.IsZero() {
			t.Errorf("record %+v: want held with host, pid, fence, expiry, since", r)
		}
	}
	for _, sl := range won {
		if err := sl.Release(); err != nil {
			t.Fatal(err)
		}
	}
	rs, _ = leaseSet(t, rdb, "x", lock.RoleRun, 3, lock.LeaseOptions{}).Records()
	for _, r := range rs {
		if r.Held {
			t.Errorf("slot %d still held after release", r.Slot)
		}
	}
}

// Renewals keep a lease past its TTL; a release frees it at once; every
// grant of a slot has a larger token than the one before.
func TestLeaseRenewReleaseTokens(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	// A renew deadline (2/3 TTL) of 600ms: a round trip under -race on a
	// loaded machine must not fence a healthy holder.
	opt := lock.LeaseOptions{TTL: 900 * time.Millisecond, Renew: 100 * time.Millisecond}
	a := leaseSet(t, rdb, "a", lock.RoleRun, 1, opt)
	b := leaseSet(t, rdb, "b", lock.RoleRun, 1, opt)
	var last int64
	for round := 0; round < 3; round++ {
		sl, ok, err := a.TryAcquire()
		if err != nil || !ok {
			t.Fatalf("round %d: acquire: %v %v", round, ok, err)
		}
		if _, tok := sl.(lock.Fencer).Fence(); tok <= last {
			t.Fatalf("round %d: token %d after %d", round, tok, last)
		} else {
			last = tok
		}
		if err := sl.Publish(lock.Record{PID: 42, Host: "a", Token: "t" + strconv.Itoa(round)}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * opt.TTL) // renewed meanwhile
		if _, ok, err := b.TryAcquire(); ok || err != nil {
			t.Fatalf("round %d: b took a renewed lease (%v, %v)", round, ok, err)
		}
		select {
		case <-sl.Lost():
			t.Fatalf("round %d: a healthy lease was lost", round)
		default:
		}
		if err := sl.Release(); err != nil {
			t.Fatal(err)
		}
		if rs, _ := b.Records(); rs[0].Held {
			t.Fatalf("round %d: held after release: %+v", round, rs[0])
		}
		if sl.Inherited() != nil {
			t.Errorf("round %d: inherited a cleanly released lease", round)
		}
	}
}

// A lease whose holder stopped renewing is free once Redis' clock passes its
// expiry: the next holder gets a larger token and the old record, and the
// old holder's next renewal finds the lease gone and closes Lost.
func TestLeaseExpiry(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	opt := lock.LeaseOptions{TTL: 300 * time.Millisecond, Renew: 100 * time.Millisecond}
	a := leaseSet(t, rdb, "a", lock.RoleRun, 1, opt)
	old, ok, err := a.TryAcquire()
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	_ = old.Publish(lock.Record{PID: 7, Token: "old"})
	// Make the lease expired on Redis' clock, as if its holder had stopped.
	expire(t, rdb, "q", lock.LeaseKey("q", lock.RoleRun, 0))
	sl, ok, err := leaseSet(t, rdb, "b", lock.RoleRun, 1, opt).TryAcquire()
	if err != nil || !ok {
		t.Fatal("expired lease not granted", ok, err)
	}
	defer sl.Release()
	_, t1 := old.(lock.Fencer).Fence()
	_, t2 := sl.(lock.Fencer).Fence()
	if t2 <= t1 {
		t.Errorf("token %d after %d", t2, t1)
	}
	if p := sl.Inherited(); p == nil || p.Token != "old" {
		t.Errorf("inherited %+v, want the old holder's record", p)
	}
	select {
	case <-old.Lost():
	case <-time.After(2 * time.Second):
		t.Fatal("old holder did not see its lease taken")
	}
	_ = old.Release() // not ours any more: deletes nothing
	if rs, _ := a.Records(); !rs[0].Held || rs[0].Host != "b" {
		t.Errorf("after the old holder's release: %+v, want b's lease", rs[0])
	}
}

// A holder cut off from Redis (a blackholed connection) closes Lost by its
// renew deadline, before its lease expires on Redis' clock.
func TestLeaseRenewDeadline(t *testing.T) {
	srv := redistest.Start(t)
	px, err := faultproxy.Start(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	cut := redis.NewClient(&redis.Options{Addr: px.Addr, ReadTimeout: 200 * time.Millisecond, MaxRetries: -1})
	defer cut.Close()
	// The holder fences itself at 1.6s without a renewal; the lease
	// expires at 2.4s: 800ms to read it still held, even on a loaded
	// machine.
	opt := lock.LeaseOptions{TTL: 2400 * time.Millisecond, Renew: 150 * time.Millisecond}
	sl, ok, err := leaseSet(t, cut, "a", lock.RoleRun, 1, opt).TryAcquire()
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	defer sl.Release()
	time.Sleep(opt.TTL * 5 / 4) // healthy meanwhile
	select {
	case <-sl.Lost():
		t.Fatal("lost while healthy")
	default:
	}
	direct := leaseSet(t, srv.Client(), "b", lock.RoleRun, 1, opt)
	px.Blackhole(true)
	cutAt := time.Now()
	select {
	case <-sl.Lost():
	case <-time.After(3 * opt.TTL):
		t.Fatal("no self-fence while cut off")
	}
	fenced := time.Since(cutAt)
	rs, err := direct.Records()
	if err != nil {
		t.Fatal(err)
	}
	if !rs[0].Held {
		t.Fatalf("lease already expired when the holder fenced itself (after %s)", fenced)
	}
	if fenced >= opt.TTL {
		t.Errorf("fenced after %s, not before the TTL %s", fenced, opt.TTL)
	}
	t.Logf("fenced %s after the cut; lease had %s left", fenced, rs[0].ExpiresIn)
}

func TestLeaseOrder(t *testing.T) {
	for _, c := range []struct {
		ttl, deadline, renew time.Duration
		ok                   bool
	}{
		{15 * time.Second, 10 * time.Second, 2 * time.Second, true},
		{15 * time.Second, 15 * time.Second, 2 * time.Second, false},
		{3 * time.Second, 2 * time.Second, 2 * time.Second, false},
		{3 * time.Second, 2 * time.Second, 0, false},
	} {
		err := lock.CheckLeaseOrder(c.ttl, c.deadline, c.renew)
		if (err == nil) != c.ok || err != nil && !errors.Is(err, lock.ErrLeaseOrder) {
			t.Errorf("%v/%v/%v: %v", c.ttl, c.deadline, c.renew, err)
		}
	}
	if _, err := lock.NewLeaseSet(nil, "q", lock.RoleRun, 1, lock.LeaseOptions{TTL: 3 * time.Second, Renew: 2 * time.Second}); err == nil {
		t.Error("renew 2s with a 2s deadline accepted")
	}
}

// Holders must agree on the fleet's settings: while a lease granted under
// slots = 2 may be valid, a candidate with slots = 3 is refused (a free
// lease or not), naming the setting and both values; the same settings are
// granted. Once every lease of the old settings has ended (released, and its
// last expiry passed on Redis' clock) the new settings are accepted, and
// the old ones are refused in turn.
func TestLeaseConfigAgreement(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	agree := func(slots string) []lock.Setting {
		return []lock.Setting{{Name: "slots", Value: slots}, {Name: "lease_ttl", Value: "600ms"}}
	}
	opt := func(slots string) lock.LeaseOptions {
		return lock.LeaseOptions{TTL: 600 * time.Millisecond, Renew: 100 * time.Millisecond, Agree: agree(slots)}
	}
	two := leaseSet(t, rdb, "a", lock.RoleRun, 2, opt("2"))
	three := leaseSet(t, rdb, "b", lock.RoleRun, 3, opt("3"))
	held, ok, err := two.TryAcquire()
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	refused := func(s *lock.LeaseSet, ours, fleet string) {
		t.Helper()
		_, ok, err := s.TryAcquire()
		var mis *lock.ConfigMismatchError
		if ok || !errors.As(err, &mis) || mis.Name != "slots" || mis.Ours != ours || mis.Fleet != fleet || mis.Queue != "q" {
			t.Fatalf("acquire with slots = %s against the fleet's %s: %v, %v; want a mismatch naming both", ours, fleet, ok, err)
		}
	}
	refused(three, "3", "2")
	if sl, ok, err := leaseSet(t, rdb, "c", lock.RoleRun, 2, opt("2")).TryAcquire(); err != nil || !ok {
		t.Fatalf("same settings: %v %v", ok, err)
	} else {
		defer sl.Release()
		time.Sleep(300 * time.Millisecond) // renewed meanwhile
		if err := sl.Release(); err != nil {
			t.Fatal(err)
		}
	}
	if err := held.Release(); err != nil {
		t.Fatal(err)
	}
	// Released, but leases of the old settings were valid moments ago.
	refused(three, "3", "2")
	time.Sleep(700 * time.Millisecond) // past the last expiry
	sl, ok, err := three.TryAcquire()
	if err != nil || !ok {
		t.Fatalf("new settings after every old lease ended: %v %v", ok, err)
	}
	defer sl.Release()
	refused(two, "2", "3")
}

// TestLeaseRenewRetriesOnANewConnection: the client's pooled connection
// dies silently (faultproxy Stall: nothing comes back, no reset), while new
// connections work. A renewal stuck on it gives up after half the time left
// before the renew deadline, and the next one, on a new connection, lands:
// the holder keeps its lease.
func TestLeaseRenewRetriesOnANewConnection(t *testing.T) {
	srv := redistest.Start(t)
	px, err := faultproxy.Start(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	opt := lock.LeaseOptions{TTL: 3 * time.Second, Renew: 200 * time.Millisecond} // renew deadline 2s
	// As the CLI's lease client: each call bounded by its context.
	c := redis.NewClient(&redis.Options{Addr: px.Addr, ContextTimeoutEnabled: true, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second, MaxRetries: 1})
	defer c.Close()
	sl, ok, err := leaseSet(t, c, "a", lock.RoleRun, 1, opt).TryAcquire()
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	defer sl.Release()
	time.Sleep(500 * time.Millisecond) // renewals on the pooled connection
	px.Stall()
	select {
	case <-sl.Lost():
		t.Fatalf("lease lost after its connection died silently: %s", sl.(interface{ LostReason() string }).LostReason())
	case <-time.After(2 * opt.TTL):
	}
	rs, err := leaseSet(t, srv.Client(), "b", lock.RoleRun, 1, opt).Records()
	if err != nil {
		t.Fatal(err)
	}
	if !rs[0].Held || rs[0].Host != "a" || rs[0].ExpiresIn < time.Second { // TTL - renew deadline
		t.Fatalf("lease after the stall: %+v, want a's, renewed", rs[0])
	}
}
