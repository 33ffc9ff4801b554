package holder

import (
	"context"
	"time"

	"github.com/baton-run/baton/history"
	"github.com/baton-run/baton/lock"
)

// watchSlots records what this process sees of the run slots, and the jobs
// it dead-letters (dead, unless nil), in the queue's slot history
// (history.Recorder.Watch, whose goroutine the returned func stops).
func (h *Holder) watchSlots(slot string, dead func() int64) (stop func()) {
	if h.hist == nil {
		return func() {}
	}
	warned := false
	return h.hist.Watch(slot, dead, func(err error) {
		if !warned {
			h.log.Warn().Err(err).Msg("cannot record the slot history (status's events, time below k); retrying")
		}
		warned = true
	})
}

// took records taking slot in the slot history, in a goroutine of its own
// (the first job need not wait for the round trip) that closes tookDone;
// left, recording the leave, waits for it.
func (h *Holder) took(slot lock.Slot) {
	if h.hist == nil {
		return
	}
	by, free := h.o.By, time.Duration(-1)
	if by == "" {
		by = history.ByCandidate
	}
	if !h.freeSince.IsZero() {
		free = h.clk.Now().Sub(h.freeSince)
	}
	done, i, prev, log := make(chan struct{}), slot.Index(), slot.Inherited(), h.log
	h.tookDone = done
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		gap, known, err := h.hist.Took(ctx, i, by, prev, free)
		switch {
		case err != nil:
			log.Warn().Err(err).Msg("cannot record the take in the slot history")
		case known:
			log.Debug().Dur("gap", gap).Msg("the slot was free for this long")
		}
	}()
}

// left records leaving slot in the slot history, once: the forced exits
// (a second signal, the hard deadline) record it too, within wait, just
// before the process exits and the kernel frees the slot; else the next
// take would count a death.
func (h *Holder) left(slot lock.Slot, why string, jobs int64, wait time.Duration) {
	if h.hist == nil {
		return
	}
	h.leftOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		if h.tookDone != nil {
			select {
			case <-h.tookDone:
			case <-ctx.Done():
			}
		}
		if err := h.hist.Left(ctx, slot.Index(), why, jobs); err != nil {
			h.log.Warn().Err(err).Msg("cannot record leaving in the slot history")
		}
	})
}
