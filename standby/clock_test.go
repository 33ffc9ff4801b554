package standby

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/clock"
	"github.com/baton-run/baton/internal/proc"
	"github.com/baton-run/baton/lock"
)

type promoted struct {
	s   lock.Slot
	ok  bool
	err error
}

// standOnFake starts Promote for a standby beside a held run slot, on a
// fake clock, and returns once Promote armed its timers.
func standOnFake(t *testing.T, p *Protocol, fake *clock.Fake) (held lock.Slot, done chan promoted) {
	t.Helper()
	_, held, _ = p.Enter()
	r, sb, err := p.Enter()
	if r != Standby || err != nil {
		t.Fatalf("second candidate: %v %v", r, err)
	}
	done = make(chan promoted, 1)
	go func() {
		s, ok, err := p.Promote(context.Background(), sb)
		done <- promoted{s, ok, err}
	}()
	// The deadline and the poll tick (the first tick fires at once).
	waitFor(t, "Promote armed its deadline and poll timers on the clock", func() bool { return fake.Waiters() >= 2 })
	return held, done
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("not in 10s: %s", what)
		}
	}
}

// A standby leaves when standby_wait has passed on its clock, and not
// before, with no slot freed.
func TestPromoteWaitOnClock(t *testing.T) {
	run, sb := sets(t, 1, 1)
	fake := clock.NewFake(time.Unix(1e9, 0))
	p := &Protocol{Run: run, Standby: sb, Poll: 10 * time.Second, Wait: 15 * time.Minute, Clock: fake}
	_, done := standOnFake(t, p, fake)
	// Polls every 10s for 15 minutes of fake time, in steps of a poll.
	for range 89 {
		fake.Advance(10 * time.Second)
	}
	fake.Advance(10*time.Second - time.Millisecond)
	select {
	case r := <-done:
		t.Fatalf("left %v before standby_wait: %+v", time.Millisecond, r)
	case <-time.After(5 * time.Millisecond):
	}
	fake.Advance(time.Millisecond)
	select {
	case r := <-done:
		if r.ok || r.err != nil || r.s != nil {
			t.Fatalf("at standby_wait: %+v, want (nil, false, nil)", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("still standing by 10s after standby_wait passed on its clock")
	}
	if r, _, _ := p.Enter(); r != Standby {
		t.Fatalf("standby slot not released at standby_wait: %v", r)
	}
}

// A run slot freed before the wait ends promotes the standby at once, with
// no time passing on its clock, and the free time it reports is its clock's.
func TestPromoteOnClockWhenSlotFrees(t *testing.T) {
	run, sb := sets(t, 1, 1)
	start := time.Unix(1e9, 0)
	fake := clock.NewFake(start)
	p := &Protocol{Run: run, Standby: sb, Poll: time.Hour, Wait: 15 * time.Minute, Clock: fake}
	var freeSince time.Time
	p.Took = func(_ int, at time.Time) { freeSince = at }
	held, done := standOnFake(t, p, fake)
	fake.Advance(14 * time.Minute)
	_ = held.Release() // the inotify wake-up is real
	select {
	case r := <-done:
		if !r.ok || r.err != nil || r.s.Index() != 0 {
			t.Fatalf("promote: %+v", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("not promoted 10s after the run slot freed")
	}
	if want := start.Add(14 * time.Minute); !freeSince.Equal(want) {
		t.Fatalf("free since %v, want the fake clock's %v", freeSince, want)
	}
	if r, _, _ := p.Enter(); r != Standby {
		t.Fatalf("after promotion a candidate got %v, want standby", r)
	}
}

// judgeSet is a real FileSet whose Evicter judges overdue holders (Overdue
// is the FileSet's) but records the evictions asked for instead of killing:
// the holder here is the test process.
type judgeSet struct {
	trackedSet
	asked chan time.Time // the now of each Evict call
}

func (s judgeSet) Capabilities() lock.Capabilities {
	c := s.trackedSet.Capabilities()
	c.Evicter = s
	return c
}

func (s judgeSet) Evict(r lock.Record, now time.Time, margin time.Duration) (int, error) {
	s.asked <- now
	return 0, nil
}

// The heal checks judge a holder overdue by the Protocol's clock: past its
// Deadline + HealMargin there, whatever the wall clock says.
func TestHealOnClock(t *testing.T) {
	run, _ := sets(t, 1, 1)
	start := time.Unix(1e9, 0) // long past on the wall clock
	fake := clock.NewFake(start)
	js := judgeSet{run, make(chan time.Time, 10)}
	sl, ok, err := js.TryAcquire()
	if !ok || err != nil {
		t.Fatalf("take the run slot: %v %v", ok, err)
	}
	pstart, err := proc.StartTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	deadline := start.Add(10 * time.Minute)
	if err := sl.Publish(lock.Record{PID: os.Getpid(), Start: pstart, Since: start, Deadline: deadline}); err != nil {
		t.Fatal(err)
	}
	p := &Protocol{Run: js, Clock: fake}
	asked := func() (time.Time, bool) {
		select {
		case at := <-js.asked:
			return at, true
		default:
			return time.Time{}, false
		}
	}
	p.Heal()
	fake.Advance(10*time.Minute + HealMargin)
	p.Heal()
	if at, ok := asked(); ok {
		t.Fatalf("evicted at %v, not past deadline %v + HealMargin on the clock", at, deadline)
	}
	fake.Advance(time.Millisecond)
	p.Heal()
	if at, ok := asked(); !ok || !at.Equal(fake.Now()) {
		t.Fatalf("past deadline + HealMargin on the clock: asked %v at %v, want at %v", ok, at, fake.Now())
	}
}
