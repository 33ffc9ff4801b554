// Package standby is the run/standby protocol on two slot sets, after
// IPC::ConcurrencyLimit::WithStandby: a candidate takes a run slot, or else a
// standby slot from which it polls the run set until promoted or timed out.
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
// has done nothing but a few non-blocking flock calls.
package standby

import (
	"context"
	"math/rand/v2"
	"time"

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

// Protocol couples a run set and a standby set.
type Protocol struct {
	Run     lock.Set
	Standby lock.Set      // nil when there are no standby slots
	Poll    time.Duration // time between tries of the run set, jittered ±10%
	Wait    time.Duration // S: how long a standby waits before giving up
}

// Enter tries a run slot, then a standby slot.
func (p *Protocol) Enter() (Role, lock.Slot, error) {
	if s, ok, err := p.Run.TryAcquire(); err != nil || ok {
		return Run, s, err
	}
	if p.Standby == nil {
		return None, nil, nil
	}
	if s, ok, err := p.Standby.TryAcquire(); err != nil || ok {
		return Standby, s, err
	}
	return None, nil, nil
}

// Promote polls the run set until a slot is free and returns it, having taken
// it before releasing sb. It gives up after Wait, or when sb is lost, with
// (nil, false, nil), and on ctx cancel with ctx.Err(); sb is released either way.
//
// When the run set is a lock.Watcher, a freed slot wakes the standby at once;
// polling stays as the fallback.
func (p *Protocol) Promote(ctx context.Context, sb lock.Slot) (lock.Slot, bool, error) {
	defer sb.Release()
	var changed <-chan struct{}
	if w, ok := p.Run.(lock.Watcher); ok {
		if ch, stop, err := w.Watch(); err == nil {
			changed = ch
			defer stop()
		}
	}
	deadline := time.NewTimer(p.Wait)
	defer deadline.Stop()
	tick := time.NewTimer(0) // try at once: a slot may have freed while we set up
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, false, ctx.Err()
		case <-deadline.C:
			return nil, false, nil
		case <-sb.Lost():
			return nil, false, nil
		case <-changed:
		case <-tick.C:
			tick.Reset(jitter(p.Poll))
		}
		if s, ok, err := p.Run.TryAcquire(); err != nil || ok {
			return s, ok, err
		}
	}
}

// jitter spreads d uniformly over ±10% so standbys do not poll in step.
func jitter(d time.Duration) time.Duration {
	return d + time.Duration((rand.Float64()*0.2-0.1)*float64(d))
}
