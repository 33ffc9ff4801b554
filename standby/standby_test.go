package standby

import (
	"context"
	"errors"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/proc"
	"github.com/baton-run/baton/lock"
)

func sets(tb testing.TB, n, ns int) (trackedSet, trackedSet) {
	tb.Helper()
	dir := tb.TempDir()
	run, err := lock.NewFileSet(dir, "q", lock.RoleRun, n)
	if err != nil {
		tb.Fatal(err)
	}
	sb, err := lock.NewFileSet(dir, "q", lock.RoleStandby, ns)
	if err != nil {
		tb.Fatal(err)
	}
	return trackedSet{run, tb}, trackedSet{sb, tb}
}

// trackedSet is a real FileSet whose slots are released when the test ends,
// before its TempDir is removed: a holder restores a removed lock file.
type trackedSet struct {
	*lock.FileSet
	tb testing.TB
}

func (s trackedSet) TryAcquire() (lock.Slot, bool, error) {
	sl, ok, err := s.FileSet.TryAcquire()
	if ok {
		s.tb.Cleanup(func() { _ = sl.Release() })
	}
	return sl, ok, err
}

// Capabilities reports trackedSet's own Guarded.
func (s trackedSet) Capabilities() lock.Capabilities {
	c := s.FileSet.Capabilities()
	c.Guarded = s
	return c
}

// Guarded keeps the guarded view tracked: Promote takes through it.
func (s trackedSet) Guarded() (lock.Set, func(), error) {
	v, stop, err := s.FileSet.Guarded()
	if err != nil {
		return nil, nil, err
	}
	return trackedSet{v.(*lock.FileSet), s.tb}, stop, nil
}

func TestEnterRoles(t *testing.T) {
	run, sb := sets(t, 2, 1)
	p := &Protocol{Run: run, Standby: sb}
	want := []Role{Run, Run, Standby, None, None}
	for i, w := range want {
		r, s, err := p.Enter()
		if err != nil || r != w || (r == None) != (s == nil) {
			t.Fatalf("candidate %d: role %v slot %v err %v, want %v", i, r, s, err, w)
		}
	}
	p.Standby = nil
	if r, _, _ := p.Enter(); r != None {
		t.Fatalf("without standby slots: %v", r)
	}
}

func TestPromoteTakesRunBeforeReleasingStandby(t *testing.T) {
	run, sb := sets(t, 1, 1)
	p := &Protocol{Run: run, Standby: sb, Poll: 5 * time.Millisecond, Wait: 10 * time.Second}
	_, holder, _ := p.Enter()
	_, standby, _ := p.Enter()
	done := make(chan lock.Slot)
	go func() {
		s, ok, err := p.Promote(context.Background(), standby)
		if !ok || err != nil {
			t.Errorf("promote: ok=%v err=%v", ok, err)
		}
		done <- s
	}()
	time.Sleep(30 * time.Millisecond)
	// Still standing by: a new candidate finds nothing.
	if r, _, _ := p.Enter(); r != None {
		t.Fatalf("while standing by a candidate got %v", r)
	}
	_ = holder.Release()
	s := <-done
	if s.Index() != 0 {
		t.Fatalf("promoted to %v", s.Name())
	}
	// The standby slot is free again, the run slot is not.
	if r, _, _ := p.Enter(); r != Standby {
		t.Fatalf("after promotion a candidate got %v, want standby", r)
	}
}

func TestPromoteTimesOut(t *testing.T) {
	run, sb := sets(t, 1, 1)
	p := &Protocol{Run: run, Standby: sb, Poll: 5 * time.Millisecond, Wait: 50 * time.Millisecond}
	p.Enter()
	_, s, _ := p.Enter()
	start := time.Now()
	if _, ok, err := p.Promote(context.Background(), s); ok || err != nil {
		t.Fatalf("ok=%v err=%v", ok, err)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatal("standby_wait not honoured")
	}
	if r, _, _ := p.Enter(); r != Standby {
		t.Fatalf("standby slot not released on timeout: %v", r)
	}
}

func TestPromoteCancelled(t *testing.T) {
	run, sb := sets(t, 1, 1)
	p := &Protocol{Run: run, Standby: sb, Poll: 5 * time.Millisecond, Wait: time.Hour}
	p.Enter()
	_, s, _ := p.Enter()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, ok, err := p.Promote(ctx, s); ok || !errors.Is(err, context.Canceled) {
		t.Fatalf("ok=%v err=%v", ok, err)
	}
	if r, _, _ := p.Enter(); r != Standby {
		t.Fatalf("standby slot not released on cancel: %v", r)
	}
}

// publish writes a live record for sl, as baton run does, since since.
func publish(tb testing.TB, sl lock.Slot, since time.Time) {
	tb.Helper()
	start, err := proc.StartTime(os.Getpid())
	if err != nil {
		tb.Fatal(err)
	}
	if err := sl.Publish(lock.Record{PID: os.Getpid(), Start: start, Since: since}); err != nil {
		tb.Fatal(err)
	}
}

// TestPromoteOldestFirst: three standbys wait for one run slot; each time it
// frees, the one that has waited longest takes it, whatever its slot number.
// Poll is an hour, so only the watcher's wake-ups can promote anyone.
func TestPromoteOldestFirst(t *testing.T) {
	run, sb := sets(t, 1, 3)
	p := &Protocol{Run: run, Standby: sb, Poll: time.Hour, Wait: time.Minute}
	_, holder, _ := p.Enter()
	base := time.Now()
	publish(t, holder, base)
	age := []time.Duration{2 * time.Second, 0, time.Second} // by standby slot: slot 1 is oldest
	type promoted struct {
		age  time.Duration
		slot lock.Slot
	}
	done := make(chan promoted, 3)
	for range 3 {
		_, s, _ := p.Enter()
		a := age[s.Index()]
		publish(t, s, base.Add(a))
		go func() {
			r, ok, err := p.Promote(context.Background(), s)
			if !ok || err != nil {
				t.Errorf("promote: ok=%v err=%v", ok, err)
			}
			done <- promoted{a, r}
		}()
	}
	time.Sleep(50 * time.Millisecond) // all three are waiting
	for want := range 3 {
		_ = holder.Release()
		got := <-done
		if got.slot == nil || got.age != time.Duration(want)*time.Second {
			t.Fatalf("promotion %d went to the standby of age %v", want, got.age)
		}
		holder = got.slot
		publish(t, holder, time.Now())
	}
	_ = holder.Release()
}

// TestPromoteOldestFirstBesideHolderWithoutRecord: a run slot held by a
// holder without a record never counts as free for long: after several
// polls, the other slot, freed, still goes to the standby that has waited
// longest (a slot free for two polls would let the younger try at once).
func TestPromoteOldestFirstBesideHolderWithoutRecord(t *testing.T) {
	for trial := range 3 {
		run, sb := sets(t, 2, 2)
		p := &Protocol{Run: run, Standby: sb, Poll: 300 * time.Millisecond, Wait: time.Minute}
		_, quiet, _ := p.Enter() // no record
		_, holder, _ := p.Enter()
		base := time.Now()
		publish(t, holder, base)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan time.Duration, 2)
		// Both promoters are gone before the trial ends: one still polling
		// would make lock files in the test's directory as it is removed.
		var wg sync.WaitGroup
		for age := range 2 {
			_, s, _ := p.Enter()
			publish(t, s, base.Add(-time.Duration(age)*time.Second))
			wg.Go(func() {
				r, ok, _ := p.Promote(ctx, s)
				if ok {
					defer r.Release()
					done <- time.Duration(age) * time.Second
				}
			})
		}
		time.Sleep(1300 * time.Millisecond) // four polls
		_ = holder.Release()
		got := <-done
		cancel()
		wg.Wait()
		_ = quiet.Release()
		if got != time.Second {
			t.Fatalf("trial %d: the freed slot went to the standby of age %v, not the oldest", trial, got)
		}
	}
}

// TestPromotePastStuckStandby: an older standby that does not take a free
// run slot (hung, stopped, still starting) holds the others back for two
// polls, not for good.
func TestPromotePastStuckStandby(t *testing.T) {
	run, sb := sets(t, 1, 2)
	const poll = 20 * time.Millisecond
	p := &Protocol{Run: run, Standby: sb, Poll: poll, Wait: time.Minute}
	stuck, _, _ := sb.TryAcquire()
	defer stuck.Release()
	publish(t, stuck, time.Now().Add(-time.Minute))
	young, _, _ := sb.TryAcquire()
	publish(t, young, time.Now())
	start := time.Now()
	s, ok, err := p.Promote(context.Background(), young)
	if !ok || err != nil {
		t.Fatalf("ok=%v err=%v", ok, err)
	}
	defer s.Release()
	if waited := time.Since(start); waited < 2*poll {
		t.Fatalf("took the slot after %v, before the older standby's two polls were up", waited)
	}
}

// countingSet is a real FileSet that counts TryAcquire calls.
type countingSet struct {
	trackedSet
	tries *atomic.Int64
}

func (c countingSet) TryAcquire() (lock.Slot, bool, error) {
	c.tries.Add(1)
	return c.trackedSet.TryAcquire()
}

// Capabilities reports countingSet's own Guarded.
func (c countingSet) Capabilities() lock.Capabilities {
	caps := c.FileSet.Capabilities()
	caps.Guarded = c
	return caps
}

// Guarded counts the tries through the guarded view too.
func (c countingSet) Guarded() (lock.Set, func(), error) {
	v, stop, err := c.trackedSet.Guarded()
	if err != nil {
		return nil, nil, err
	}
	return countingSet{v.(trackedSet), c.tries}, stop, nil
}

// TestPromoteDoesNotSpin: a failed try closes lock files, and closing a lock
// file is what the watcher reports, so a standby that tried on every
// wake-up would wake itself forever (tens of thousands of tries a second).
// It tries only when the records show a free run slot, and after a miss on
// one (a holder that has not published yet) it backs off.
func TestPromoteDoesNotSpin(t *testing.T) {
	for _, tc := range []struct {
		name      string
		published bool // the run slots' holders have records
		most      int64
	}{
		{"every run slot held and recorded", true, 4}, // the first try of each standby, and a few
		{"a holder without a record yet", false, 30},  // 1, 2, 4 … 256ms apart in 300ms
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := 1 // standbys
			if tc.published {
				n = 2
			}
			fs, sb := sets(t, 2, n)
			run := countingSet{fs, new(atomic.Int64)}
			p := &Protocol{Run: run, Standby: sb, Poll: time.Hour, Wait: time.Hour}
			for range 2 {
				_, h, _ := p.Enter()
				defer h.Release()
				if tc.published {
					publish(t, h, time.Now())
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			done := make(chan struct{})
			var standbys []lock.Slot
			for i := range n {
				_, s, _ := p.Enter()
				publish(t, s, time.Now().Add(time.Duration(i)*time.Second))
				standbys = append(standbys, s)
			}
			run.tries.Store(0)
			for _, s := range standbys {
				go func() {
					if _, ok, _ := p.Promote(ctx, s); ok {
						t.Error("promoted while every run slot was held")
					}
					done <- struct{}{}
				}()
			}
			const candidates = 5 // that find nothing: they wake the standbys too
			for range candidates {
				time.Sleep(20 * time.Millisecond)
				if r, _, _ := p.Enter(); r != None {
					t.Fatalf("a candidate got %v", r)
				}
			}
			for range n {
				<-done
			}
			if got := run.tries.Load() - candidates; got > tc.most {
				t.Fatalf("%d tries of the run set in 300ms; want at most %d", got, tc.most)
			}
			t.Logf("%d tries of the run set in 300ms", run.tries.Load()-candidates)
		})
	}
}

// TestPromoteBesideHolderWithoutRecord: one run slot is held by a holder
// that has not published its record yet (a cron-started holder connecting
// to Redis); when the other one frees, the standby takes it at once, not
// at its next poll: the slot without a record must not keep it backing off.
func TestPromoteBesideHolderWithoutRecord(t *testing.T) {
	run, sb := sets(t, 2, 1)
	p := &Protocol{Run: run, Standby: sb, Poll: 5 * time.Second, Wait: time.Minute}
	_, quiet, _ := p.Enter() // no record
	defer quiet.Release()
	_, busy, _ := p.Enter()
	publish(t, busy, time.Now())
	role, s, err := p.Enter()
	if role != Standby || err != nil {
		t.Fatalf("third candidate: %v, %v", role, err)
	}
	type result struct {
		at time.Time
		ok bool
	}
	got := make(chan result, 1)
	go func() {
		sl, ok, _ := p.Promote(context.Background(), s)
		if ok {
			defer sl.Release()
		}
		got <- result{time.Now(), ok}
	}()
	// Looks and tries meanwhile find both held. Long enough that a standby
	// backing off (doubling from 0.5ms) would be mid-way through a pause of
	// about 2s when the slot frees: it would take the slot some 1.6s late.
	time.Sleep(2500 * time.Millisecond)
	freed := time.Now()
	_ = busy.Release()
	r := <-got
	if !r.ok {
		t.Fatal("not promoted")
	}
	if d := r.at.Sub(freed); d > 500*time.Millisecond {
		t.Fatalf("promoted %v after the slot freed; want it within 500ms (the poll is 5s)", d)
	}
}

func TestJitterBounds(t *testing.T) {
	for i := 0; i < 1000; i++ {
		if d := jitter(time.Second); d < 900*time.Millisecond || d > 1100*time.Millisecond {
			t.Fatalf("jitter %v outside ±10%%", d)
		}
	}
}

// BenchmarkHandover measures how long a waiting standby takes to hold a run
// slot after its holder releases it: the watcher's wake-up, the records,
// the flock calls. sim.DefaultWake models it. With several standbys the
// oldest must win, so every one of them reads the records.
func BenchmarkHandover(b *testing.B) {
	for _, standbys := range []int{1, 4} {
		b.Run(strconv.Itoa(standbys)+"-standbys", func(b *testing.B) {
			run, sb := sets(b, 1, standbys)
			p := &Protocol{Run: run, Standby: sb, Poll: time.Hour, Wait: time.Hour}
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			defer wg.Wait() // before the temp dir goes
			defer cancel()
			_, holder, _ := p.Enter()
			publish(b, holder, time.Now())
			got := make(chan lock.Slot, standbys)
			wait := func(s lock.Slot) {
				publish(b, s, time.Now())
				wg.Add(1)
				go func() {
					defer wg.Done()
					if r, ok, _ := p.Promote(ctx, s); ok {
						got <- r
					}
				}()
			}
			for range standbys {
				_, s, _ := p.Enter()
				wait(s)
			}
			var total, worst time.Duration
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				time.Sleep(2 * time.Millisecond) // the standbys are back in their wait
				b.StartTimer()
				t0 := time.Now()
				_ = holder.Release()
				holder = <-got
				d := time.Since(t0)
				total, worst = total+d, max(worst, d)
				b.StopTimer()
				publish(b, holder, time.Now())
				_, s, _ := p.Enter() // refill the standby slot it left
				wait(s)
				b.StartTimer()
			}
			b.ReportMetric(float64(total.Microseconds())/float64(b.N), "µs/handover")
			b.ReportMetric(float64(worst.Microseconds()), "µs-worst")
			b.StopTimer()
			_ = holder.Release()
		})
	}
}
