package cli

import (
	"context"
	"os"
	"time"

	"github.com/baton-run/baton/internal/config"
	"github.com/baton-run/baton/lock"
	"github.com/baton-run/baton/scale"
	"github.com/baton-run/baton/work"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
)

// envScale marks a candidate started by a holder to scale up: it takes a
// free run slot or exits, never a standby slot.
const envScale = "BATON_SCALE"

// policy is cfg's scaling policy.
func policy(cfg *config.Config) scale.Policy {
	return scale.Policy{Keep: cfg.MinSlots, Slots: cfg.Slots, Backlog: int64(cfg.ScaleUpBacklog), Age: cfg.ScaleUpAge.D(),
		Every: cfg.ScaleUpEvery.D(), IdleExit: cfg.IdleExit.D()}
}

// scaler takes one holder's scale decision once a second, from the publish
// loop's goroutine, which owns every field.
type scaler struct {
	pol   scale.Policy
	run   lock.Set // all N run slots
	rdb   redis.UniversalClient
	dir   string // lock_dir: the last decision goes there
	queue string
	self  int
	st    *work.Stats
	until time.Time       // the end of the lifetime: draining after it
	sig   context.Context // done when told to stop
	leave func()          // stops taking jobs: the holder drains and leaves
	spawn func(n int) int // starts n scale-up candidates, returns how many started
	log   zerolog.Logger

	jobs   int64     // Done + Failed + Dead at the last step
	active time.Time // when the holder last had a job
	up     time.Time // the last scale-up round
	left   bool
}

// newScaler returns nil when min_slots = slots: nothing to scale.
func (h *holder) newScaler(slot lock.Slot, st *work.Stats, until time.Time, sig context.Context, leave func()) *scaler {
	pol := policy(h.cfg)
	if !pol.Enabled() {
		return nil
	}
	run, _, err := slotSets(h.cfg)
	if err != nil {
		return nil
	}
	now := time.Now()
	return &scaler{pol: pol, run: run, rdb: h.rdb, dir: h.cfg.LockDir, queue: h.cfg.Queue, self: slot.Index(), st: st, until: until, sig: sig,
		leave: leave, log: h.log, active: now,
		spawn: func(n int) int { return spawn(h.log, n, envScale+"=1") }}
}

// step takes one decision and acts on it; next is the record about to be
// published: it carries the draining flag and the last scale decision.
func (s *scaler) step(next *lock.Record) {
	now := time.Now()
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
	state.Slots, _ = s.run.Records()
	if !scale.NeedsBacklog(s.pol, state) {
		return // another holder scales, and this one is not idle: no read
	}
	ctx, cancel := context.WithTimeout(s.sig, 500*time.Millisecond)
	if c, err := work.ReadCounts(ctx, s.rdb, s.queue); err == nil {
		state.Known, state.Waiting, state.Pending, state.Oldest, state.Paused = true, c.Waiting, c.Pending, c.OldestWaiting, c.Paused != nil
	}
	cancel()
	d := scale.Decide(s.pol, state)
	switch d.Action {
	case scale.Up:
		s.up = now
		n := s.spawn(d.N)
		s.log.Info().Int("candidates", n).Int64("waiting", state.Waiting).Dur("oldest_waiting", state.Oldest).Str("reason", d.Reason).Msg("scale up")
	case scale.Leave:
		s.left = true
		next.Draining = true
		s.log.Info().Str("reason", d.Reason).Msg("scale down: idle above min_slots, leaving")
		s.leave()
	default:
		return
	}
	last := scale.Last{Decision: d.String(), Slot: s.self, PID: os.Getpid(), At: now, Waiting: state.Waiting, Oldest: state.Oldest.String()}
	if err := last.Write(s.dir, s.queue); err != nil {
		s.log.Debug().Err(err).Msg("write the last scale decision")
	}
}
