package sim

import (
	"time"

	"github.com/baton-run/baton/standby"
)

// End is why a process left a slot.
type End uint8

// Reasons a span ends.
const (
	EndLifetime End = iota // lifetime and drain done (or hard deadline after a hang)
	EndCrash               // crashed
	EndPromoted            // standby took a run slot
	EndTimeout             // standby gave up after standby_wait
	EndOpen                // still there when the window ends
)

func (e End) String() string {
	return [...]string{"lifetime", "crash", "promoted", "timeout", "open"}[e]
}

// Timeline is what happened in a window of simulated time, for a picture.
type Timeline struct {
	Start               time.Time // wall clock of simulated time zero
	From, To            time.Duration
	Slots, StandbySlots int
	Spans               []Span
	Vacancies           []Interval // run slots without a holder
	Gaps                []Interval // fewer than k holders (handovers counted as held)
	Firings             []time.Duration
	Promotions          []Promotion
}

// Span is one process in one slot.
type Span struct {
	Role     standby.Role
	Slot     int
	Proc     int // the process, the same across its standby and run spans
	From, To time.Duration
	End      End
	HungAt   time.Duration // when it hung; 0 when it did not
}

// Interval is [From, To) on one run slot (Slot) or on all of them (Slot -1).
type Interval struct {
	Slot     int
	From, To time.Duration
}

// Promotion is a standby moving to a run slot at T.
type Promotion struct {
	T            time.Duration
	Standby, Run int // slots
	Proc         int
}

// tracer records the window; a nil tracer records nothing.
type tracer struct {
	tl Timeline
}

func newTracer(from, to time.Duration, q standby.Quantities) *tracer {
	return &tracer{tl: Timeline{From: from, To: to, Slots: q.Slots, StandbySlots: q.StandbySlots}}
}

func (t *tracer) in(a, b time.Duration) bool { return t != nil && b > t.tl.From && a < t.tl.To }

func (t *tracer) firing(at time.Duration) {
	if t.in(at, at+1) {
		t.tl.Firings = append(t.tl.Firings, at)
	}
}

func (t *tracer) span(s *state, pid int32, why End) {
	p := &s.procs[pid]
	if !t.in(p.since, s.now) {
		return
	}
	sp := Span{Role: p.role, Slot: p.slot, Proc: p.serial, From: p.since, To: s.now, End: why}
	if p.hung {
		sp.HungAt = p.hungAt
	}
	t.tl.Spans = append(t.tl.Spans, sp)
}

func (t *tracer) promotion(s *state, from, to int) {
	if t.in(s.now, s.now+1) {
		t.tl.Promotions = append(t.tl.Promotions, Promotion{T: s.now, Standby: from, Run: to, Proc: s.procs[s.sb[from]].serial})
	}
}

// vacancy records that run slot i, free since freedAt, is taken now.
func (t *tracer) vacancy(s *state, i int, _ bool) {
	if t.in(s.freedAt[i], s.now) && s.now > s.freedAt[i] {
		t.tl.Vacancies = append(t.tl.Vacancies, Interval{Slot: i, From: s.freedAt[i], To: s.now})
	}
}

func (t *tracer) gap(a, b time.Duration) {
	if t.in(a, b) {
		t.tl.Gaps = append(t.tl.Gaps, Interval{Slot: -1, From: a, To: b})
	}
}

func (t *tracer) finish(s *state) *Timeline {
	for _, pid := range append(append([]int32(nil), s.run...), s.sb...) {
		if pid >= 0 {
			t.span(s, pid, EndOpen)
		}
	}
	for i, pid := range s.run {
		if pid < 0 && t.in(s.freedAt[i], s.now) {
			t.tl.Vacancies = append(t.tl.Vacancies, Interval{Slot: i, From: s.freedAt[i], To: s.now})
		}
	}
	t.tl.Start = s.cfg.Start
	return &t.tl
}
