// Package clock is the time source of code whose subject is time
// (a holder's lifetime, its hard deadline, its periodic publishing), so that
// its tests run hours of lifetime without sleeping: Real is the wall clock,
// Fake moves only when told (Advance).
package clock

import (
	"sync"
	"time"
)

// Clock tells the time and arms timers.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has passed.
	AfterFunc(d time.Duration, f func()) Timer
	// NewTicker sends the time on C every d (dropping ticks a slow
	// reader misses, as time.Ticker does).
	NewTicker(d time.Duration) Ticker
}

// Timer is an armed AfterFunc.
type Timer interface {
	// Stop disarms it: false when f already ran or was started.
	Stop() bool
}

// Ticker is a running NewTicker.
type Ticker interface {
	C() <-chan time.Time
	Stop()
}

// Real is the wall clock (package time).
var Real Clock = realClock{}

type realClock struct{}

func (realClock) Now() time.Time                            { return time.Now() }
func (realClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }
func (realClock) NewTicker(d time.Duration) Ticker          { return realTicker{time.NewTicker(d)} }

type realTicker struct{ t *time.Ticker }

func (t realTicker) C() <-chan time.Time { return t.t.C }
func (t realTicker) Stop()               { t.t.Stop() }

// Fake is a clock that moves only on Advance; safe for concurrent use.
type Fake struct {
	mu      sync.Mutex // guards every field
	now     time.Time
	waiters []*fakeWaiter
}

// NewFake is a fake clock at now.
func NewFake(now time.Time) *Fake { return &Fake{now: now} }

// fakeWaiter is an armed timer (f set) or ticker (c set, period > 0).
type fakeWaiter struct {
	f       *Fake
	at      time.Time
	period  time.Duration
	fn      func()
	c       chan time.Time
	stopped bool
}

// Now is the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// AfterFunc arms f for d from now, in fake time.
func (f *Fake) AfterFunc(d time.Duration, fn func()) Timer {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := &fakeWaiter{f: f, at: f.now.Add(d), fn: fn}
	f.waiters = append(f.waiters, w)
	return w
}

// NewTicker ticks every d of fake time.
func (f *Fake) NewTicker(d time.Duration) Ticker {
	if d <= 0 {
		panic("clock: non-positive ticker period")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	w := &fakeWaiter{f: f, at: f.now.Add(d), period: d, c: make(chan time.Time, 1)}
	f.waiters = append(f.waiters, w)
	return fakeTicker{w}
}

// Advance moves the time by d, firing, in time order, every timer and tick
// due by then: timers' funcs start in their own goroutines, as
// time.AfterFunc's do.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	end := f.now.Add(d)
	for {
		var next *fakeWaiter
		for _, w := range f.waiters {
			if !w.stopped && !w.at.After(end) && (next == nil || w.at.Before(next.at)) {
				next = w
			}
		}
		if next == nil {
			break
		}
		f.now = next.at
		if next.period > 0 {
			select {
			case next.c <- f.now:
			default:
			}
			next.at = next.at.Add(next.period)
		} else {
			next.stopped = true
			go next.fn()
		}
	}
	f.now = end
	live := f.waiters[:0]
	for _, w := range f.waiters {
		if !w.stopped {
			live = append(live, w)
		}
	}
	f.waiters = live
	f.mu.Unlock()
}

// Waiters is how many timers and tickers are armed: a test waits for the
// code under test to arm its own before it advances the time.
func (f *Fake) Waiters() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, w := range f.waiters {
		if !w.stopped {
			n++
		}
	}
	return n
}

func (w *fakeWaiter) Stop() bool {
	w.f.mu.Lock()
	defer w.f.mu.Unlock()
	was := !w.stopped
	w.stopped = true
	return was
}

// fakeTicker is a ticking fakeWaiter.
type fakeTicker struct{ w *fakeWaiter }

func (t fakeTicker) C() <-chan time.Time { return t.w.c }
func (t fakeTicker) Stop()               { t.w.Stop() }

var (
	_ Timer = (*fakeWaiter)(nil)
	_ Clock = (*Fake)(nil)
)
