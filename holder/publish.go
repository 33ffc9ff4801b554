package holder

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/baton-run/baton/lock"
	"github.com/baton-run/baton/work"
)

// publish refreshes the slot record with progress every half second, in a
// goroutine that the returned func stops (and waits for): the publisher,
// which owns rec and failing, and runs Options.Heal and step (the scaler's
// turn, unless nil) once a second. A record that cannot be written (a full
// disk) is retried every tick; the failure is logged once, and the
// recovery. children, unless nil, lists a persistent holder's children for
// the record.
func (h *Holder) publish(slot lock.Slot, rec lock.Record, st *work.Stats, children func() []Child, step func(*Activity)) (stop func()) {
	failing := false
	put := func(r lock.Record) {
		err := slot.Publish(r)
		switch {
		case err != nil && !failing:
			h.log.Error().Err(err).Msg("cannot publish the slot record: status shows this slot as held without a record; retrying")
		case err == nil && failing:
			h.log.Info().Msg("slot record published again")
		}
		failing = err != nil
	}
	put(rec)
	done, quit := make(chan struct{}), make(chan struct{})
	t := h.clk.NewTicker(500 * time.Millisecond)
	go func() {
		defer close(done)
		defer t.Stop()
		for tick := 0; ; tick++ {
			select {
			case <-quit:
				return
			case <-t.C():
			}
			if tick%2 == 1 && h.o.Heal != nil {
				h.o.Heal() // a frozen sibling: once a second
			}
			next, act := rec, ActivityOf(rec)
			act.JobsDone = st.Done.Load()
			act.Job, act.JobSince, act.Progress = "", time.Time{}, nil
			if j := st.Recent.Load(); j != nil {
				act.Job, act.JobSince = j.ID, j.Started
				if n, ok := j.ProgressNow(); ok {
					act.Progress = &n
				}
			}
			if step != nil && tick%2 == 1 {
				step(&act)
			}
			if children != nil {
				act.Children = children()
			}
			act.Put(&next)
			if !sameRecord(next, rec) || failing {
				rec = next
				put(rec)
			}
		}
	}()
	return func() { close(quit); <-done }
}

// recordChildren is a persistent holder's children as its record shows them.
func recordChildren(cs []work.ChildInfo) []Child {
	out := make([]Child, len(cs))
	for i, c := range cs {
		out[i] = Child{PID: c.PID, Jobs: c.Jobs, RSS: c.RSS}
	}
	return out
}

// sameRecord: a and b would be written alike (a Record holds slices, so
// == cannot say).
func sameRecord(a, b lock.Record) bool {
	ja, erra := json.Marshal(a)
	jb, errb := json.Marshal(b)
	return erra == nil && errb == nil && bytes.Equal(ja, jb)
}
