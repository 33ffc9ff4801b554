// Package scale decides, once a second for each run-slot holder, whether the
// queue's backlog calls for more holders (start candidates, bounded by the
// free run slots) or whether this holder, idle above the kept slots, should
// leave. It is pure: the caller reads the backlog and the slot table and
// acts on the Decision.
//
// Most callers need Decide:
//
//	d := scale.Decide(pol, scale.State{Waiting: 20000, Slots: table, Self: 0})
//	if d.Action == scale.Up { /* start d.N candidates that take run slots only */ }
//
// Guarantees, for any slot table and any interleaving of holders:
//
//   - Up never asks for more candidates than the run slots free in the
//     table, never from a draining holder, and only from one holder at a
//     time: the lowest-numbered run slot whose holder is not draining
//     (others defer to it), so rounds of several holders do not add up.
//   - Leave is only for a holder in a slot numbered k (Policy.Keep) or more,
//     idle for Policy.IdleExit, with no job waiting, that sees at least k
//     holders not draining in lower-numbered slots. Of the holders that
//     leave by idle, the lowest-numbered one saw k holders below it, and
//     none of those leaves by idle (they are lower still): scaling down
//     never leaves fewer than k (docs/scaling.md has the argument).
package scale

import (
	"fmt"
	"time"
)

// Policy is the scaling configuration of one queue.
type Policy struct {
	Keep     int           // k (min_slots): run slots kept covered; never left below
	Slots    int           // N (slots): the most holders
	Backlog  int64         // scale_up_backlog: waiting jobs per running holder that call for more
	Age      time.Duration // scale_up_age: an oldest waiting job this old calls for one more; 0 = off
	Every    time.Duration // scale_up_every: the least time between two rounds of one holder
	IdleExit time.Duration // idle_exit: how long a holder above k may go without a job
}

// Enabled reports whether there are slots to scale: k < N.
func (p Policy) Enabled() bool { return p.Keep < p.Slots }

// State is what one holder sees, once a second.
type State struct {
	// Known is false when the backlog could not be read (Redis down): no
	// scale-up then, and no leaving on a count that may be stale.
	Known            bool
	Waiting, Pending int64         // never delivered; delivered and not acknowledged
	Oldest           time.Duration // how long the oldest waiting job has waited
	Slots            []Slot        // the run slot table, index order
	Self             int           // this holder's run slot
	Draining         bool          // this holder takes no more jobs (lifetime over, told to stop)
	Paused           bool          // the queue is paused (baton pause): its backlog calls for no one, and no one leaves
	Idle             time.Duration // since this holder last ran a job (or since it started)
	SinceUp          time.Duration // since this holder's last scale-up round; large when none
}

// Slot is one run slot as a holder's record shows it (lock.Record, with
// Draining from the holder's activity).
type Slot struct {
	Slot                     int
	Held, NoRecord, Draining bool
}

// Action is what a Decision asks of the holder.
type Action int

// Actions.
const (
	Stay  Action = iota // do nothing
	Up                  // start N candidates that take run slots only
	Leave               // stop taking jobs and leave the run slot
)

func (a Action) String() string {
	switch a {
	case Up:
		return "up"
	case Leave:
		return "leave"
	}
	return "stay"
}

// Decision is Decide's answer.
type Decision struct {
	Action Action
	N      int    // Up: candidates to start, 1 ≤ N ≤ free run slots
	Reason string // why, for the log and status
}

func (d Decision) String() string {
	if d.Action == Up {
		return fmt.Sprintf("up %d: %s", d.N, d.Reason)
	}
	return d.Action.String() + ": " + d.Reason
}

// Decide is the one scaling decision. It is pure: same inputs, same answer.
func Decide(p Policy, s State) Decision {
	stay := func(format string, a ...any) Decision {
		return Decision{Action: Stay, Reason: fmt.Sprintf(format, a...)}
	}
	if !p.Enabled() {
		return stay("min_slots = slots: nothing to scale")
	}
	if s.Draining {
		return stay("draining: a leaving holder starts no one")
	}
	held, free, below := 0, 0, 0
	for _, r := range s.Slots {
		switch {
		case !r.Held:
			free++
			continue
		case r.Slot < s.Self && !r.Draining:
			below++
		}
		held++
	}
	scaler := scalerOf(s.Slots, s.Self)
	if s.Known && s.Paused {
		// Its backlog waits by design: scaling up would start holders that
		// start nothing, and leaving would churn the slots.
		return stay("queue paused: its backlog calls for no holder")
	}
	if d, ok := leave(p, s, below); ok {
		return d
	}
	if !s.Known {
		return stay("backlog unknown (Redis not read)")
	}
	want, why := 0, ""
	if limit := p.Backlog * int64(max(held, 1)); s.Waiting > limit {
		target := int((s.Waiting + p.Backlog - 1) / p.Backlog)
		want, why = target-held, fmt.Sprintf("%d waiting > %d per holder × %d holders", s.Waiting, p.Backlog, held)
	}
	if p.Age > 0 && s.Waiting > 0 && s.Oldest >= p.Age && want < 1 {
		want, why = 1, fmt.Sprintf("oldest waiting job %s ≥ scale_up_age %s", s.Oldest.Round(time.Millisecond), p.Age)
	}
	switch {
	case want < 1:
		return stay("%d waiting, %d holders: no backlog", s.Waiting, held)
	case free == 0:
		return stay("%s, but no run slot is free (%d of %d held)", why, held, p.Slots)
	case scaler != s.Self:
		return stay("%s: run-%d scales, not this holder", why, scaler)
	case s.SinceUp < p.Every:
		return stay("%s: last round %s ago < scale_up_every %s", why, s.SinceUp.Round(time.Millisecond), p.Every)
	}
	return Decision{Action: Up, N: min(want, free), Reason: fmt.Sprintf("%s; %d of %d run slots free", why, free, p.Slots)}
}

// NeedsBacklog reports whether Decide could say Up or Leave for s without
// the backlog (s.Known and the counts unset): whether reading the queue's
// counts this second is of any use. Only the holder that scales, and a
// holder idle long enough to leave, need them; the others skip the read.
func NeedsBacklog(p Policy, s State) bool {
	if !p.Enabled() || s.Draining {
		return false
	}
	return scalerOf(s.Slots, s.Self) == s.Self || (s.Self >= p.Keep && s.Idle >= p.IdleExit)
}

// scalerOf is the holder that scales: the lowest-numbered run slot whose
// holder has published a record and is not draining; self when there is
// none (self may not have published yet).
func scalerOf(slots []Slot, self int) int {
	for _, r := range slots {
		if r.Slot == self {
			return self
		}
		if r.Held && !r.Draining && !r.NoRecord {
			return r.Slot
		}
	}
	return self
}

// leave decides scale-down; below counts holders not draining in slots
// lower than Self.
func leave(p Policy, s State, below int) (Decision, bool) {
	if s.Self < p.Keep || s.Idle < p.IdleExit || (s.Known && s.Waiting > 0) {
		return Decision{}, false
	}
	if below < p.Keep {
		return Decision{}, false
	}
	return Decision{Action: Leave, Reason: fmt.Sprintf("idle %s ≥ idle_exit %s in run-%d, %d holders below (min_slots %d)",
		s.Idle.Round(time.Second), p.IdleExit, s.Self, below, p.Keep)}, true
}
