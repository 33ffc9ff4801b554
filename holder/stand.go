package holder

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/baton-run/baton/history"
	"github.com/baton-run/baton/internal/cronfire"
	"github.com/baton-run/baton/lock"
	"github.com/baton-run/baton/standby"
)

// Stand holds standby slot sb: it connects and checks everything first, so
// a promotion starts work at once, then waits for a run slot (p.Promote).
// It returns the run slot to Hold, or nil when standby_wait ended without
// one or ctx was cancelled; sb is released unless it returns a run slot
// (Promote releases it once the run slot is taken).
func (h *Holder) Stand(ctx context.Context, p *standby.Protocol, sb lock.Slot) (lock.Slot, error) {
	log := h.log.With().Str("slot", sb.Name()).Str("role", lock.RoleStandby).Logger()
	h.setName("baton:standby")
	if p.Clock == nil {
		p.Clock = h.clk // the wait ends on the holder's clock, as the record says
	}
	now := h.clk.Now()
	if err := sb.Publish(h.record(lock.RoleStandby, now, now.Add(p.Wait))); err != nil {
		log.Warn().Err(err).Msg("publish slot record")
	}
	if err := h.connect(ctx); err != nil {
		_ = sb.Release()
		if ctx.Err() != nil {
			return nil, nil // told to stop while connecting
		}
		return nil, err
	}
	defer cronfire.Start(h.rdb, h.cfg.LockDir, h.cfg.Queue, h.host, log)() // its goroutine lives while this standby waits
	// The wait starts now. Past it a standby leaves; frozen, it is healed
	// like a holder past its hard deadline.
	rec := h.record(lock.RoleStandby, now, h.clk.Now().Add(p.Wait))
	rec.Deadline = rec.Until.Add(standby.StandbyGrace)
	rec.BootDeadline = lock.BootClock() + rec.Deadline.Sub(h.clk.Now())
	if err := sb.Publish(rec); err != nil {
		if err := refuseUnhealable(err, sb, h.cfg.LockDir); err != nil {
			_ = sb.Release()
			return nil, err
		}
		log.Warn().Err(err).Msg("publish slot record")
	}
	log.Debug().Dur("standby_wait", p.Wait).Msg("standing by")
	stopWatch := h.watchSlots(sb.Name(), nil)
	p.Took = func(_ int, freeSince time.Time) { h.freeSince = freeSince }
	run, ok, err := p.Promote(ctx, sb)
	stopWatch()
	switch {
	case errors.Is(err, context.Canceled):
		log.Debug().Msg("stopped while standing by")
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("wait for a run slot: %w", err)
	case !ok:
		log.Debug().Msg("standby_wait is over without a free run slot: leaving")
		return nil, nil
	}
	log.Info().Str("run_slot", run.Name()).Msg("promoted")
	h.o.By = history.ByStandby
	return run, nil
}
