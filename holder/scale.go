package holder

import (
	"context"
	"os"
	"time"

	"github.com/baton-run/baton/internal/config"
	"github.com/baton-run/baton/lock"
	"github.com/baton-run/baton/scale"
	"github.com/baton-run/baton/work"
)

// ScalePolicy is cfg's scaling policy.
func ScalePolicy(cfg *config.Config) scale.Policy {
	return scale.Policy{Keep: cfg.MinSlots, Slots: cfg.Slots, Backlog: int64(cfg.ScaleUpBacklog), Age: cfg.ScaleUpAge.D(),
		Every: cfg.ScaleUpEvery.D(), IdleExit: cfg.IdleExit.D()}
}

// scaler takes one holder's scale decision once a second, from the
// publisher's goroutine, which owns every field.
type scaler struct {
	h     *Holder
	pol   scale.Policy
	self  int
	st    *work.Stats
	until time.Time       // the end of the lifetime: draining after it
	sig   context.Context // done when told to stop
	leave func()          // stops taking jobs: the holder drains and leaves

	jobs   int64     // Done + Failed + Dead at the last step
	active time.Time // when the holder last had a job
	up     time.Time // the last scale-up round
	left   bool
}

// newScaler returns nil when min_slots = slots: nothing to scale.
func (h *Holder) newScaler(slot lock.Slot, st *work.Stats, until time.Time, sig context.Context, leave func()) *scaler {
	pol := ScalePolicy(h.cfg)
	if !pol.Enabled() || h.o.Run == nil {
		return nil
	}
	return &scaler{h: h, pol: pol, self: slot.Index(), st: st, until: until, sig: sig, leave: leave, active: h.clk.Now()}
}

// step takes one decision and acts on it; next is the activity about to be
// published: it carries the draining flag.
func (s *scaler) step(next *Activity) {
	h := s.h
	now := h.clk.Now()
	jobs := s.st.Done.Load() + s.st.Failed.Load() + s.st.Dead.Load()
	if jobs != s.jobs || s.st.Recent.Load() != nil {
		s.jobs, s.active = jobs, now
	}
	draining := s.left || !now.Before(s.until) || s.sig.Err() != nil
	next.Draining = draining
	if draining {
		return
	}
	state := scale.State{Self: s.self, Idle: now.Sub(s.active), SinceUp: now.Sub(s.up)}
	state.Slots = scaleSlots(h.o.Run)
	if !scale.NeedsBacklog(s.pol, state) {
		return // another holder scales, and this one is not idle: no read
	}
	ctx, cancel := context.WithTimeout(s.sig, 500*time.Millisecond)
	if c, err := work.ReadCounts(ctx, h.rdb, h.cfg.Queue); err == nil {
		state.Known, state.Waiting, state.Pending, state.Oldest, state.Paused = true, c.Waiting, c.Pending, c.OldestWaiting, c.Paused != nil
	}
	cancel()
	d := scale.Decide(s.pol, state)
	switch d.Action {
	case scale.Up:
		s.up = now
		n := 0
		if h.o.Hooks.Spawn != nil {
			n = h.o.Hooks.Spawn(d.N)
		}
		h.log.Info().Int("candidates", n).Int64("waiting", state.Waiting).Dur("oldest_waiting", state.Oldest).Str("reason", d.Reason).Msg("scale up")
	case scale.Leave:
		s.left = true
		next.Draining = true
		h.log.Info().Str("reason", d.Reason).Msg("scale down: idle above min_slots, leaving")
		s.leave()
	default:
		return
	}
	last := scale.Last{Decision: d.String(), Slot: s.self, PID: os.Getpid(), At: now, Waiting: state.Waiting, Oldest: state.Oldest.String()}
	if err := last.Write(h.cfg.LockDir, h.cfg.Queue); err != nil {
		h.log.Debug().Err(err).Msg("write the last scale decision")
	}
}

// scaleSlots is the run slot table as scaling sees it; nil when it cannot
// be read.
func scaleSlots(run lock.Set) []scale.Slot {
	recs, err := run.Records()
	if err != nil {
		return nil
	}
	out := make([]scale.Slot, len(recs))
	for i, r := range recs {
		out[i] = scale.Slot{Slot: r.Slot, Held: r.Held, NoRecord: r.NoRecord, Draining: ActivityOf(r).Draining}
	}
	return out
}
