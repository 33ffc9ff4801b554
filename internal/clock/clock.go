// Package clock is the time source of code whose subject is time
// (a holder's lifetime, its hard deadline, its periodic publishing, a
// standby's wait), so that its tests run hours of lifetime without
// sleeping: Real is the wall clock, Fake moves only when told (Advance).
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
	// NewTimer sends the time on C once d has passed, as time.NewTimer.
	NewTimer(d time.Duration) Timer
	// NewTicker sends the time on C every d (dropping ticks a slow
	// reader misses, as time.Ticker does).
	NewTicker(d time.Duration) Ticker
}

// Timer is an armed AfterFunc or NewTimer, as a *time.Timer.
type Timer interface {
	// C is where a NewTimer sends; nil for an AfterFunc.
	C() <-chan time.Time
	// Stop disarms it: false when it already fired (f ran or was started).
	// A value not yet received is dropped, as with Go 1.23's timers.
	Stop() bool
	// Reset re-arms it for d from now (dropping a value not yet
	// received): false when it had fired or was stopped.
	Reset(d time.Duration) bool
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
func (realClock) AfterFunc(d time.Duration, f func()) Timer { return realTimer{time.AfterFunc(d, f)} }
func (realClock) NewTimer(d time.Duration) Timer            { return realTimer{time.NewTimer(d)} }
func (realClock) NewTicker(d time.Duration) Ticker          { return realTicker{time.NewTicker(d)} }

type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time        { return t.t.C }
func (t realTimer) Stop() bool                 { return t.t.Stop() }
func (t realTimer) Reset(d time.Duration) bool { return t.t.Reset(d) }

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

// fakeWaiter is an armed AfterFunc (fn set), NewTimer (c set) or ticker
// (c set, period > 0).
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

// NewTimer sends on C once d of fake time has passed; at once when d <= 0,
// as time.NewTimer(0) fires without the time moving.
func (f *Fake) NewTimer(d time.Duration) Timer {
	w := &fakeWaiter{f: f, c: make(chan time.Time, 1), stopped: true}
	w.Reset(d)
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
			next.fire()
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

// fire sends on c or starts fn; f.mu is held.
func (w *fakeWaiter) fire() {
	if w.fn != nil {
		go w.fn()
		return
	}
	select {
	case w.c <- w.f.now:
	default:
	}
}

// C is where a NewTimer sends; nil for an AfterFunc.
func (w *fakeWaiter) C() <-chan time.Time { return w.c }

func (w *fakeWaiter) Stop() bool {
	w.f.mu.Lock()
	defer w.f.mu.Unlock()
	was := !w.stopped
	w.stopped = true
	w.drain()
	return was
}

// Reset re-arms w for d from the fake now; d <= 0 fires it at once.
func (w *fakeWaiter) Reset(d time.Duration) bool {
	f := w.f
	f.mu.Lock()
	defer f.mu.Unlock()
	was := !w.stopped
	w.drain()
	w.at = f.now.Add(d)
	if d <= 0 {
		w.stopped = true
		w.fire()
		return was
	}
	w.stopped = false
	for _, o := range f.waiters {
		if o == w {
			return was // still listed: Stop does not unlist until Advance
		}
	}
	f.waiters = append(f.waiters, w)
	return was
}

// drain drops a value sent and not received, as Go 1.23's timers do; f.mu is held.
func (w *fakeWaiter) drain() {
	if w.c == nil || w.period > 0 {
		return
	}
	select {
	case <-w.c:
	default:
	}
}

// fakeTicker is a ticking fakeWaiter.
type fakeTicker struct{ w *fakeWaiter }

func (t fakeTicker) C() <-chan time.Time { return t.w.c }
func (t fakeTicker) Stop()               { t.w.Stop() }

var (
	_ Timer = (*fakeWaiter)(nil)
	_ Clock = (*Fake)(nil)
)
