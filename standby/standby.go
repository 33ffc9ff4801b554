// Package standby is the run/standby protocol on two slot sets, after
// IPC::ConcurrencyLimit::WithStandby: a candidate takes a run slot, or else a
// standby slot from which it waits for a run slot until promoted or timed
// out. A freed run slot wakes the standbys (inotify, with polling as the
// fallback), and the one that has waited longest takes it; with fleet
// leases (lock.Handover) the retiring holder hands the slot to it directly.
//
// Most callers need Protocol.Enter and, for a standby, Protocol.Promote:
//
//	p := &standby.Protocol{Run: run, Standby: sb, Poll: 500 * time.Millisecond, Wait: 15 * time.Minute}
//	role, slot, err := p.Enter()
//	if role == standby.Standby {
//		slot, ok, err = p.Promote(ctx, slot)
//	}
//
// Guarantees: promotion takes the run slot before it lets go of the standby
// slot, so the pair of sets never shows a gap; a candidate that wins nothing
// has done nothing but a few non-blocking flock calls and read the N run
// slot records.
//
// Healing: a run-slot holder past the hard deadline in its record plus
// HealMargin (frozen by SIGSTOP or a paused VM, stuck in D state: its own
// deadline timer cannot fire) is killed, with its descendants, by the next
// candidate that finds every run slot taken, or by a standby at its next
// poll, when the run set is a lock.Evicter and can prove the kill. The slot
// is back in service within Deadline + HealMargin + one poll (or the next
// cron start without standbys), and its next holder replays its pending
// entries.
package standby

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/baton-run/baton/internal/clock"
	"github.com/baton-run/baton/lock"
)

// Role is what a candidate won.
type Role int

// Roles a candidate can end up in.
const (
	None    Role = iota // nothing free: exit at once
	Run                 // holds a run slot: consume
	Standby             // holds a standby slot: call Promote
)

func (r Role) String() string {
	switch r {
	case Run:
		return lock.RoleRun
	case Standby:
		return lock.RoleStandby
	}
	return "none"
}

// StandbyGrace is how long past its wait a standby's record says it may
// take to leave: its Deadline is the end of its wait plus StandbyGrace.
const StandbyGrace = 2 * time.Second

// HealMargin is how far past the Deadline in its record a slot holder
// must be before it is killed: slack for a holder that is leaving at its own
// deadline, and for clocks read by two processes.
const HealMargin = time.Second

// Protocol couples a run set and a standby set.
type Protocol struct {
	Run     lock.Set
	Standby lock.Set      // nil when there are no standby slots
	Poll    time.Duration // time between tries of the run set, jittered ±10%
	Wait    time.Duration // S: how long a standby waits before giving up
	// Healed, when set, is called after an overdue run-slot holder was
	// killed, with its record and how many processes died.
	Healed func(r lock.Record, killed int)
	// Took, when set, is called by Promote with the run slot it took and
	// since when it stood free as this standby saw it: the first look that
	// found it free (a look follows the wake-up when the slot's holder
	// closes its lock, or a poll), or, when it freed after the last look,
	// that look's time; zero when no look read the records.
	Took func(slot int, freeSince time.Time)
	// Clock is the time of Wait, Poll and the heal checks (nil:
	// clock.Real), so that tests run a standby_wait without sleeping.
	Clock clock.Clock
}

// clock is p.Clock, or the wall clock.
func (p *Protocol) clock() clock.Clock {
	if p.Clock == nil {
		return clock.Real
	}
	return p.Clock
}

// Enter tries a run slot, then a standby slot. When every slot of a set is
// taken and one's holder is overdue, it kills that holder and tries again.
// A run set that is a lock.Pair (fleet leases) tries both in one call.
func (p *Protocol) Enter() (Role, lock.Slot, error) {
	if pr := p.Run.Capabilities().Pair; pr != nil && p.Standby != nil {
		s, role, err := pr.TryAcquireOr(p.Standby)
		switch {
		case role == lock.RoleRun:
			return Run, s, err
		case role == lock.RoleStandby:
			return Standby, s, err
		}
		return None, nil, err
	}
	if s, ok, err := p.Run.TryAcquire(); err != nil || ok {
		return Run, s, err
	}
	if p.healSet(p.Run) {
		if s, ok, err := p.Run.TryAcquire(); err != nil || ok {
			return Run, s, err
		}
	}
	if p.Standby == nil {
		return None, nil, nil
	}
	if s, ok, err := p.Standby.TryAcquire(); err != nil || ok {
		return Standby, s, err
	}
	if p.healSet(p.Standby) {
		if s, ok, err := p.Standby.TryAcquire(); err != nil || ok {
			return Standby, s, err
		}
	}
	return None, nil, nil
}

// Promote waits for a free run slot and returns it, having taken it before
// releasing sb. It gives up after Wait, or when sb is lost, with
// (nil, false, nil), and on ctx cancel with ctx.Err(); sb is released either
// way.
//
// When the run set is a lock.Watcher, a freed run slot wakes the standby at
// once; it polls every Poll (±10%) as well, in case a wake-up is missed or
// the lock directory cannot be watched.
//
// Promotion is fair when holders and standbys publish their slot records
// (baton run does): the standby that has waited longest takes a freed slot,
// and the others defer to it. A run slot that looks free for two polls while
// an older standby does not take it (hung, stopped, still starting) is tried
// anyway. Records also keep a standby from trying on every wake-up: a try
// closes lock files, and closes are what the watcher reports.
//
// When the run set is a lock.Handover (fleet leases), the standby waits in
// the fleet's line instead: a retiring holder hands its run slot to the
// standby that joined first, on any host, and wakes it (awaitHandOver).
func (p *Protocol) Promote(ctx context.Context, sb lock.Slot) (lock.Slot, bool, error) {
	if h := p.Run.Capabilities().Handover; h != nil {
		return p.awaitHandOver(ctx, sb, h)
	}
	defer sb.Release()
	// Why fair: standbys that arrive together and lose handovers at random
	// can all time out together and leave the run slots short. Served
	// oldest first, a standby is promoted by the k-th handover after it
	// came, within one tenure of the holders it found (docs/coverage.md).
	changed, stop := watch(p.Run)
	defer stop()
	// A guarded view of the run set makes the take itself cheap: it checks
	// the kernel's locks now, not as the slot frees (lock.Guarded).
	run := p.Run
	if g := run.Capabilities().Guarded; g != nil {
		if v, stopGuard, err := g.Guarded(); err == nil {
			run = v
			defer stopGuard()
		}
	}
	clk := p.clock()
	w := waiter{p: p, run: run, sb: sb, since: clk.Now()}
	deadline := clk.NewTimer(p.Wait)
	defer deadline.Stop()
	tick := clk.NewTimer(0) // try at once: a slot may have freed while we set up
	defer tick.Stop()
	pause := clk.NewTimer(time.Hour)
	pause.Stop()
	defer pause.Stop()
	var soon <-chan time.Time // another look, while a run slot looks free: pause.C()
	quiet := false            // after a miss: wake-ups wait for soon
	for {
		polled := false
		woken := changed
		if quiet {
			woken = nil
		}
		select {
		case <-ctx.Done():
			return nil, false, ctx.Err()
		case <-deadline.C():
			return nil, false, nil
		case <-sb.Lost():
			return nil, false, nil
		case <-woken:
		case <-soon:
			soon, quiet = nil, false
		case <-tick.C():
			tick.Reset(jitter(p.Poll))
			polled = true
		}
		try, free := w.turn(polled)
		if try {
			if s, ok, err := run.TryAcquire(); err != nil || ok {
				if ok && p.Took != nil {
					p.Took(s.Index(), w.freedAt(s.Index()))
				}
				return s, ok, err
			}
			// A slot looked free and was not: ask the kernel next time.
			// (A poll's try with none free learns nothing: the next look,
			// a wake-up as a slot frees, must stay cheap.)
			w.missed = free
		}
		if free && (try || soon == nil) {
			// A run slot looks free and we do not have it. Look again
			// soon, later each time (0.5ms, 1ms, … up to Poll):
			//  - we missed it: its old holder is still closing it, or its
			//    new holder has not published a record yet (the next look
			//    asks the kernel). Wake-ups wait for the pause, or every
			//    other slot's event would make us try again;
			//  - we defer to an older standby: it may leave without the
			//    slot (a second slot freed, it timed out, it is stuck).
			pause.Reset(w.pause())
			soon, quiet = pause.C(), try
		}
	}
}

// awaitHandOver is Promote in line for a run slot of h: a retiring holder
// hands its slot to the oldest standby in line, and each look (at once,
// when woken, and every Poll) hands free run slots (a dead holder's
// expired lease) to the oldest too. The run slot is granted before sb is
// released. Whatever ends the wait, a run slot handed over at that moment
// is taken (the wait is over) or, when told to stop or sb was lost, handed
// on by its release.
func (p *Protocol) awaitHandOver(ctx context.Context, sb lock.Slot, h lock.Handover) (lock.Slot, bool, error) {
	defer sb.Release()
	w, err := h.Await(sb)
	if err != nil {
		return nil, false, err
	}
	handOn := func() {
		if s, ok, _ := w.Leave(); ok {
			_ = s.Release()
		}
	}
	clk := p.clock()
	deadline := clk.NewTimer(p.Wait)
	defer deadline.Stop()
	tick := clk.NewTimer(0) // join the line at once
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			handOn()
			return nil, false, ctx.Err()
		case <-sb.Lost():
			handOn()
			return nil, false, nil
		case <-deadline.C():
			s, ok, err := w.Leave()
			return s, ok && err == nil, nil
		case <-w.Woken():
		case <-tick.C():
			tick.Reset(jitter(p.Poll))
		}
		// An error (Redis away for a moment) is tried again at the next
		// look; a standby cut off for long loses sb.
		if s, ok, err := w.Take(); err == nil && ok {
			return s, true, nil
		}
	}
}

// waiter is one Promote call's view of the slot records; Promote's goroutine owns it.
type waiter struct {
	p         *Protocol
	run       lock.Set // p.Run, or its guarded view
	missed    bool     // the last try missed a run slot that looked free
	sb        lock.Slot
	since     time.Time     // when Promote began: our age if sb has no record
	freeSince []time.Time   // per run slot: first look that found it free, zero if held at the last look
	looked    time.Time     // the last look that read the records
	backoff   time.Duration // the next pause while a run slot looks free
}

// freedAt is since when run slot i stood free as the looks saw it.
func (w *waiter) freedAt(i int) time.Time {
	if i < len(w.freeSince) && !w.freeSince[i].IsZero() {
		return w.freeSince[i]
	}
	return w.looked
}

// turn reports whether to try the run set now, and whether the records show
// a free run slot. Reading records takes no lock and closes no lock file,
// so it wakes no one. A look on a wake-up reads the guarded view, which
// counts a slot without a record as free: one released a moment ago, most
// likely. A poll, and the look after a missed try, read the set itself,
// which asks the kernel about such slots: a holder that has not published
// its record yet is not free, and must not make a standby try at every
// look, nor count as free for long (stuck) and upset the order of standbys.
func (w *waiter) turn(polled bool) (try, free bool) {
	set := w.run
	if polled || w.missed {
		set = w.p.Run
	}
	w.missed = false
	rs, err := set.Records()
	if err != nil {
		return polled, false // records unreadable: fall back to polling
	}
	if len(w.freeSince) != len(rs) {
		w.freeSince = make([]time.Time, len(rs))
	}
	if polled && w.p.heal(rs) {
		if rs, err = set.Records(); err != nil {
			return true, false
		}
	}
	now := w.p.clock().Now()
	w.looked = now
	stuck := false // a slot looked free at every look for two polls
	for i, r := range rs {
		switch {
		case r.Held:
			w.freeSince[i] = time.Time{}
		case w.freeSince[i].IsZero():
			w.freeSince[i], free = now, true
		default:
			free, stuck = true, stuck || now.Sub(w.freeSince[i]) >= 2*w.p.Poll
		}
	}
	if !free {
		w.backoff = 0
		return polled, false // a poll still tries: records are a hint
	}
	return stuck || !w.olderStandby(), true
}

// Heal kills the slot holders that are overdue (past their Deadline +
// HealMargin, provably theirs: see lock.Evicter): frozen or stuck run-slot
// holders, and standbys frozen past their wait. It reports whether it
// killed any. Losing candidates and standbys call it as they look; a
// running holder calls it now and then, so a frozen sibling is healed even
// when no candidate finds every slot taken. Reading the records takes no
// lock.
func (p *Protocol) Heal() bool {
	run := p.healSet(p.Run)
	sb := p.healSet(p.Standby)
	return run || sb
}

// healSet heals one set; false when it cannot evict.
func (p *Protocol) healSet(s lock.Set) bool {
	if s == nil {
		return false
	}
	ev := s.Capabilities().Evicter
	return ev != nil && p.evict(ev, ev.Overdue(p.clock().Now(), HealMargin))
}

// heal evicts the overdue holders among rs, records of the run set.
func (p *Protocol) heal(rs []lock.Record) bool {
	ev := p.Run.Capabilities().Evicter
	return ev != nil && p.evict(ev, rs)
}

func (p *Protocol) evict(ev lock.Evicter, rs []lock.Record) bool {
	now, healed := p.clock().Now(), false
	for _, r := range rs {
		if !r.Overdue(now, HealMargin) {
			continue
		}
		if n, err := ev.Evict(r, now, HealMargin); err == nil && n > 0 {
			healed = true
			if p.Healed != nil {
				p.Healed(r, n)
			}
		}
	}
	return healed
}

// pause is the next wait for another look, doubling from 0.5ms up to Poll.
func (w *waiter) pause() time.Duration {
	w.backoff = min(max(2*w.backoff, 500*time.Microsecond), max(w.p.Poll, 500*time.Microsecond))
	return w.backoff
}

// olderStandby reports whether a live standby that came before us has a
// record. Ties go to the lower slot.
func (w *waiter) olderStandby() bool {
	if w.p.Standby == nil {
		return false
	}
	rs, err := w.p.Standby.Records()
	if err != nil {
		return false
	}
	me := w.sb.Index()
	mine := w.since
	if me < len(rs) && rs[me].Held && !rs[me].Since.IsZero() {
		mine = rs[me].Since
	}
	for i, r := range rs {
		if i != me && r.Held && !r.Since.IsZero() && (r.Since.Before(mine) || r.Since.Equal(mine) && i < me) {
			return true
		}
	}
	return false
}

// watch starts watching s when it can; a nil channel when it cannot.
func watch(s lock.Set) (<-chan struct{}, func()) {
	if w := s.Capabilities().Watcher; w != nil {
		if ch, stop, err := w.Watch(); err == nil {
			return ch, stop
		}
	}
	return nil, func() {}
}

// jitter spreads d uniformly over ±10% so standbys do not poll in step.
func jitter(d time.Duration) time.Duration {
	return d + time.Duration((rand.Float64()*0.2-0.1)*float64(d))
}
