package sim

import (
	"math/rand/v2"
	"sync"
	"time"

	"github.com/baton-run/baton/standby"
)

// schedules the randomized configs draw from: regular, irregular, sparse,
// and several lines adding up.
var schedules = [][]string{
	{"* * * * *"}, {"*/2 * * * *"}, {"*/5 * * * *"}, {"*/7 * * * *"}, {"@hourly"},
	{"* * * * *", "* * * * *"}, {"0-29 * * * *", "30-59 * * * *"}, {"*/3 * * * *", "*/2 * * * *"},
}

// parsed holds schedules parsed once: a parse walks a 400-year calendar.
var parsed = sync.OnceValue(func() []*standby.Schedule {
	out := make([]*standby.Schedule, len(schedules))
	for i, specs := range schedules {
		s, err := standby.ParseSchedule(specs...)
		if err != nil {
			panic(err)
		}
		out[i] = s
	}
	return out
})

// randomConfig draws a config near the limits of the relations: most draws
// pass check, many by a small margin, and some fail one relation or more.
func randomConfig(r *rand.Rand) (standby.Quantities, *standby.Schedule) {
	sc := parsed()[r.IntN(len(schedules))]
	q := standby.Quantities{C: sc.Gap(), Lines: sc.MinLines(), PeakLines: sc.PeakLines()}
	q.Slots = 1 + r.IntN(6)
	q.Spawn = 1 + r.IntN(4)
	q.StandbySlots = q.Slots + r.IntN(3) - 1 // around the limit N_s = k
	if r.IntN(4) == 0 {
		q.StandbySlots = q.Slots + q.MC() + r.IntN(3) // plenty: younger standbys time out
	}
	need := time.Duration((q.Slots+q.M()-1)/q.M()) * q.C // firings to refill every slot
	q.Lifetime = (need + q.E() + time.Duration(r.Float64()*4*float64(need))).Round(time.Second)
	if r.IntN(8) == 0 {
		q.Lifetime = need + q.E() + time.Second // at the limit
	}
	if r.IntN(4) > 0 {
		q.Jitter = time.Duration(r.Float64() * float64(q.Lifetime)).Round(time.Second)
	}
	q.Grace, q.HardMargin = time.Duration(r.IntN(60))*time.Second, 2*time.Second
	q.JobTimeout = time.Duration(r.IntN(120)) * time.Second
	q.StandbyWait = 2*q.Deadline() + time.Duration(r.IntN(3))*time.Duration(r.IntN(600))*time.Second
	if r.IntN(6) == 0 {
		q.StandbyWait = time.Duration(float64(q.Deadline()) * (0.8 + r.Float64())).Round(time.Second)
	}
	q.Poll = []time.Duration{100 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second}[r.IntN(3)]
	q.Visibility = q.LMax() + q.Grace + time.Minute
	return q, sc
}

// passes is check's verdict with warnings counted as not passing.
func passes(q standby.Quantities) bool {
	for _, rel := range standby.Check(q) {
		if rel.Status != standby.Pass {
			return false
		}
	}
	return true
}
