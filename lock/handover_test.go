package lock_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/lock"
	"github.com/redis/go-redis/v9"
)

// fleetHost is one simulated host's pair of lease sets, run handed over to
// standby.
type fleetHost struct{ run, sb *lock.LeaseSet }

func newFleetHost(tb testing.TB, rdb redis.UniversalClient, host string, nrun, nsb int, opt lock.LeaseOptions) fleetHost {
	tb.Helper()
	h := fleetHost{leaseSet(tb, rdb, host, lock.RoleRun, nrun, opt), leaseSet(tb, rdb, host, lock.RoleStandby, nsb, opt)}
	h.run.HandOverTo(h.sb, h.run.Size())
	return h
}

// inLine takes a standby lease on h and joins the line with it.
func (h fleetHost) inLine(tb testing.TB) (lock.Slot, lock.Waiting) {
	tb.Helper()
	sb, ok, err := h.sb.TryAcquire()
	if err != nil || !ok {
		tb.Fatalf("standby lease: %v %v", ok, err)
	}
	w, err := h.run.Await(sb)
	if err != nil {
		tb.Fatal(err)
	}
	if s, ok, err := w.Take(); err != nil || ok {
		tb.Fatalf("joining the line with every run lease held: %v %v %v", s, ok, err)
	}
	return sb, w
}

// woken waits for w's wake-up and takes the run lease handed to it.
func woken(tb testing.TB, w lock.Waiting) lock.Slot {
	tb.Helper()
	select {
	case <-w.Woken():
	case <-time.After(5 * time.Second):
		tb.Fatal("no wake-up")
	}
	s, ok, err := w.Take()
	if err != nil || !ok {
		tb.Fatalf("woken but nothing handed over: %v %v", ok, err)
	}
	return s
}

func notWoken(tb testing.TB, w lock.Waiting) {
	tb.Helper()
	select {
	case <-w.Woken():
		tb.Fatal("woken, but it was not its turn")
	case <-time.After(100 * time.Millisecond):
	}
}

// A retiring holder hands its run lease to the standby on another host that
// joined the line first, with a new token, and wakes it; the next release
// goes to the next in line. A standby whose standby lease has expired (it
// died in line) is skipped. The run lease is granted before the standby
// lets go of its standby lease, and Records shows the new holder's host.
// Line lists the live standbys in line, oldest first, the dead one apart.
func TestLeaseHandOver(t *testing.T) {
	rdb := redistest.Start(t).Client()
	opt := lock.LeaseOptions{TTL: 2 * time.Second, Renew: 200 * time.Millisecond}
	a := newFleetHost(t, rdb, "a", 1, 3, opt)
	b := newFleetHost(t, rdb, "b", 1, 3, opt)
	c := newFleetHost(t, rdb, "c", 1, 3, opt)
	held, ok, err := a.run.TryAcquire()
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	_, t0 := held.(lock.Fencer).Fence()
	sbB, wB := b.inLine(t)
	sbDead, _ := c.inLine(t)
	sbC, wC := c.inLine(t)
	// The second standby dies in line: its standby lease expires.
	deadKey := lock.LeaseKey("q", lock.RoleStandby, sbDead.Index())
	expire(t, rdb, "q", deadKey)

	// The line as status reads it: b then c, the dead standby counted apart.
	line, stale, err := a.sb.Line()
	if err != nil || stale != 1 || len(line) != 2 || line[0].Host != "b" || line[0].Slot != sbB.Index() || line[0].Position != 1 ||
		line[1].Host != "c" || line[1].Slot != sbC.Index() || line[1].Position != 2 || line[0].Waited <= line[1].Waited || line[0].PID == 0 {
		t.Errorf("Line() = %+v, %d stale, %v; want b then c (positions 1, 2; b waiting longer), 1 stale", line, stale, err)
	}
	if _, _, err := a.run.Line(); err == nil {
		t.Error("Line on the run set: want an error")
	}

	if err := held.Release(); err != nil {
		t.Fatal(err)
	}
	// Granted by the release itself, before b has done anything.
	if rs, _ := a.run.Records(); !rs[0].Held || rs[0].Host != "b" || rs[0].Fence <= t0 {
		t.Errorf("run lease right after the release: %+v, want b's with a new token", rs[0])
	}
	runB := woken(t, wB)
	notWoken(t, wC)
	if _, tok := runB.(lock.Fencer).Fence(); tok <= t0 {
		t.Errorf("handed-over token %d not above %d", tok, t0)
	}
	if rs, _ := b.sb.Records(); !rs[sbB.Index()].Held {
		t.Error("b's standby lease was let go before b took the run lease")
	}
	_ = sbB.Release()

	// b retires in turn: the dead standby is skipped, c is next.
	if err := runB.Release(); err != nil {
		t.Fatal(err)
	}
	runC := woken(t, wC)
	if rs, _ := a.run.Records(); !rs[0].Held || rs[0].Host != "c" {
		t.Errorf("run lease after the second hand-over: %+v, want c's", rs[0])
	}
	_ = sbC.Release()
	if n, _ := rdb.ZCard(context.Background(), lock.LineKey("q")).Result(); n != 0 {
		t.Errorf("%d left in line, want 0 (the dead standby dropped): %v", n, rdb.ZRangeWithScores(context.Background(), lock.LineKey("q"), 0, -1).Val())
	}
	// Nobody in line: a release frees the lease.
	if err := runC.Release(); err != nil {
		t.Fatal(err)
	}
	if rs, _ := a.run.Records(); rs[0].Held {
		t.Errorf("released with nobody in line: %+v, want free", rs[0])
	}
	_ = sbDead.Release()
}

// A run lease whose holder died (it expired) is handed by a standby's next
// look to the standby that has waited longest, which inherits the dead
// holder's record. A standby that leaves the line just after a hand-over
// gets the run lease from Leave.
func TestLeaseHandOverExpiredAndLeave(t *testing.T) {
	rdb := redistest.Start(t).Client()
	opt := lock.LeaseOptions{TTL: 2 * time.Second, Renew: 200 * time.Millisecond}
	a := newFleetHost(t, rdb, "a", 1, 2, opt)
	b := newFleetHost(t, rdb, "b", 1, 2, opt)
	dead, ok, err := a.run.TryAcquire()
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	_ = dead.Publish(lock.Record{PID: 7, Token: "dead"})
	sbOld, wOld := a.inLine(t)
	sbNew, wNew := b.inLine(t)
	expire(t, rdb, "q", lock.LeaseKey("q", lock.RoleRun, 0))
	// The newer standby looks first, and hands the lease to the older one.
	if s, ok, err := wNew.Take(); err != nil || ok {
		t.Fatalf("the newer standby took the lease (%v %v %v), want it handed to the older one", s, ok, err)
	}
	got := woken(t, wOld)
	if p := got.Inherited(); p == nil || p.Token != "dead" {
		t.Errorf("inherited %+v, want the dead holder's record", p)
	}
	_ = sbOld.Release()
	if err := got.Release(); err != nil { // handed to the standby on b
		t.Fatal(err)
	}
	s, ok, err := wNew.Leave()
	if err != nil || !ok {
		t.Fatalf("leave after a hand-over: %v %v, want the run lease", ok, err)
	}
	if rs, _ := a.run.Records(); !rs[0].Held || rs[0].Host != "b" {
		t.Errorf("run lease: %+v, want b's", rs[0])
	}
	_ = sbNew.Release()
	_ = s.Release()
	_ = dead.Release()
}

// A run set paired with its standbys tries both in one script call: the
// first candidate gets the run lease, the second the standby lease, and
// the third, a loser, gets nothing for one call to Redis.
func TestLeaseTryAcquireOr(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	opt := lock.LeaseOptions{Agree: []lock.Setting{{Name: "slots", Value: "1"}}}
	h := newFleetHost(t, rdb, "a", 1, 1, opt)
	for _, want := range []string{lock.RoleRun, lock.RoleStandby} {
		s, role, err := h.run.TryAcquireOr(h.sb)
		if err != nil || role != want || s == nil {
			t.Fatalf("got %v %q %v, want a %s lease", s, role, err, want)
		}
		defer s.Release()
		if rs, _ := map[string]*lock.LeaseSet{lock.RoleRun: h.run, lock.RoleStandby: h.sb}[want].Records(); !rs[s.Index()].Held {
			t.Errorf("%s lease %d not held", want, s.Index())
		}
	}
	calls := func() int64 { // scripts run so far
		v, err := rdb.Do(ctx, "INFO", "commandstats").Text()
		if err != nil {
			t.Fatal(err)
		}
		return statCalls(v, "evalsha") + statCalls(v, "eval")
	}
	// The holders renew meanwhile, now and then: the fewest of three tries.
	fewest := int64(-1)
	for range 3 {
		before := calls()
		s, role, err := h.run.TryAcquireOr(h.sb)
		if s != nil || role != "" || err != nil {
			t.Fatalf("loser got %v %q %v, want nothing", s, role, err)
		}
		if n := calls() - before; fewest < 0 || n < fewest {
			fewest = n
		}
	}
	if fewest != 1 {
		t.Errorf("a loser ran %d scripts, want 1", fewest)
	}
	other := newFleetHost(t, rdb, "b", 1, 1, lock.LeaseOptions{Agree: []lock.Setting{{Name: "slots", Value: "2"}}})
	var mis *lock.ConfigMismatchError
	if _, _, err := other.run.TryAcquireOr(other.sb); !errors.As(err, &mis) {
		t.Errorf("other settings: %v, want a mismatch", err)
	}
}

// statCalls reads cmdstat_<cmd>'s calls from INFO commandstats.
func statCalls(info, cmd string) int64 {
	for _, l := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(l), "cmdstat_"+cmd+":calls="); ok {
			n, _ := strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
			return n
		}
	}
	return 0
}

// BenchmarkLeaseHandOver times hand-overs between two simulated hosts, each
// with its own Redis client: from a holder's Release on one host to the
// standby on the other having its run lease (woken, Take returned, renewals
// started). It reports the median and 99th percentile in ms; run at least
// 200 hand-overs:
//
//	go test ./lock -run '^$' -bench LeaseHandOver -benchtime 300x
func BenchmarkLeaseHandOver(b *testing.B) {
	srv := redistest.Start(b)
	opt := lock.LeaseOptions{TTL: 15 * time.Second, Renew: 2 * time.Second}
	var hosts [2]fleetHost
	for i, name := range []string{"h1", "h2"} {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, Protocol: 2, DisableIdentity: true})
		b.Cleanup(func() { _ = c.Close() })
		hosts[i] = newFleetHost(b, c, name, 1, 1, opt)
	}
	held, ok, err := hosts[0].run.TryAcquire()
	if err != nil || !ok {
		b.Fatal(ok, err)
	}
	took := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		b.StopTimer()
		sb, w := hosts[(n+1)%2].inLine(b)
		b.StartTimer()
		start := time.Now()
		if err := held.Release(); err != nil {
			b.Fatal(err)
		}
		held = woken(b, w)
		took = append(took, time.Since(start))
		b.StopTimer()
		_ = sb.Release()
		b.StartTimer()
	}
	b.StopTimer()
	_ = held.Release()
	slices.Sort(took)
	ms := func(p int) float64 { return float64(took[(len(took)-1)*p/100]) / float64(time.Millisecond) }
	b.ReportMetric(ms(50), "p50-ms")
	b.ReportMetric(ms(99), "p99-ms")
}
