package sim

import "time"

// measure integrates the coverage over [warm-up, horizon). The state is
// constant between events, so each interval adds its length to whatever it
// satisfies.
type measure struct {
	from, to   time.Duration
	last       time.Duration // integrated up to here
	full       time.Duration // covered ≥ k
	strict     time.Duration // working ≥ k
	any        time.Duration // covered ≥ 1
	belowSince time.Duration // start of the current stretch below k, -1 when none
	held       []time.Duration
	width      time.Duration // bucket width
	work       []float64     // per bucket: ∫ working holders dt, in ns
}

func (m *measure) init(s *state) {
	m.from, m.to = s.cfg.Warmup, s.cfg.Horizon
	m.belowSince = -1
	m.held = make([]time.Duration, s.q.Slots)
	s.res.Slots = make([]SlotStats, s.q.Slots)
	m.width = (m.to - m.from + Buckets - 1) / Buckets
	s.res.Buckets = make([]Bucket, Buckets)
	m.work = make([]float64, Buckets)
	for i := range s.res.Buckets {
		b := &s.res.Buckets[i]
		b.From = m.from + time.Duration(i)*m.width
		b.To = min(b.From+m.width, m.to)
		b.Min = s.q.Slots + s.q.StandbySlots + 1
	}
}

// covered counts holders that work, plus free run slots a waiting standby is
// about to take (a handover lasts at most one poll).
func covered(s *state) int {
	return s.nWork + min(s.q.Slots-s.nRun, s.nSb)
}

// advance adds the interval [last, t), over which the state did not change.
func (m *measure) advance(s *state, t time.Duration) {
	a, b := max(m.last, m.from), min(t, m.to)
	m.last = t
	if b <= a {
		return
	}
	dt, c, k := b-a, covered(s), s.q.Slots
	if c >= k {
		m.full += dt
	}
	if s.nWork >= k {
		m.strict += dt
	}
	if c >= 1 {
		m.any += dt
	}
	for i := int((a - m.from) / m.width); i < Buckets && s.res.Buckets[i].From < b; i++ {
		bk := &s.res.Buckets[i]
		lo, hi := max(a, bk.From), min(b, bk.To)
		if hi <= lo {
			continue
		}
		bk.Min = min(bk.Min, c)
		m.work[i] += float64(s.nWork) * float64(hi-lo)
	}
}

// settle notes, after an event, whether a stretch below k began or ended.
func (m *measure) settle(s *state) {
	below := covered(s) < s.q.Slots
	switch {
	case below && m.belowSince < 0:
		m.belowSince = s.now
	case !below && m.belowSince >= 0:
		m.closeBelow(s, s.now)
	}
}

func (m *measure) closeBelow(s *state, t time.Duration) {
	a, b := max(m.belowSince, m.from), min(t, m.to)
	if b > a {
		s.res.Gaps++
		s.res.GapTime += b - a
		s.res.LongestBelow = max(s.res.LongestBelow, b-a)
		s.trace.gap(a, b)
	}
	m.belowSince = -1
}

// took notes that run slot i got a holder now.
func (m *measure) took(s *state, i int, promoted bool) {
	if s.now >= m.from {
		s.res.Slots[i].Holders++
	}
	s.trace.vacancy(s, i, promoted)
}

// left notes that run slot i's holder, there since since, left now.
func (m *measure) left(s *state, i int, since time.Duration) {
	if a, b := max(since, m.from), min(s.now, m.to); b > a {
		m.held[i] += b - a
	}
}

func (m *measure) finish(s *state) {
	if m.belowSince >= 0 {
		m.closeBelow(s, m.to)
	}
	for i, pid := range s.run {
		if pid >= 0 {
			m.left(s, i, s.procs[pid].since)
		}
	}
	span := float64(m.to - m.from)
	s.res.Full = float64(m.full) / span
	s.res.FullStrict = float64(m.strict) / span
	s.res.Any = float64(m.any) / span
	for i := range s.res.Slots {
		s.res.Slots[i].Held = float64(m.held[i]) / span
	}
	for i := range s.res.Buckets {
		bk := &s.res.Buckets[i]
		if w := bk.To - bk.From; w > 0 {
			bk.Mean = m.work[i] / float64(w)
		} else {
			bk.Min = 0
		}
	}
}
