package scale

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Arrival is one part of an arrival pattern: Jobs jobs at At (a burst), or,
// with Rate > 0, Rate jobs a second, evenly spaced, from At until Until.
type Arrival struct {
	Jobs      int
	Rate      float64
	At, Until time.Duration
}

// ParseArrivals reads a comma-separated pattern: "20000@10s" is a burst of
// 20,000 jobs at 10s; "100/s" is 100 jobs a second from 0 to the horizon;
// "100/s@1m-5m" the same from 1m to 5m. "20000" alone is a burst at 0.
func ParseArrivals(s string) ([]Arrival, error) {
	var out []Arrival
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		what, when, timed := strings.Cut(part, "@")
		var a Arrival
		if r, ok := strings.CutSuffix(what, "/s"); ok {
			v, err := strconv.ParseFloat(r, 64)
			if err != nil || v <= 0 || v > 1e6 {
				return nil, fmt.Errorf("%q: want a rate such as 100/s (up to 1000000/s)", part)
			}
			a.Rate, a.Until = v, -1
			if timed {
				from, to, ok := strings.Cut(when, "-")
				var err1, err2 error
				a.At, err1 = time.ParseDuration(from)
				if ok {
					a.Until, err2 = time.ParseDuration(to)
				}
				if err1 != nil || err2 != nil || a.At < 0 || (ok && a.Until <= a.At) {
					return nil, fmt.Errorf("%q: want RATE/s@FROM-TO such as 100/s@1m-5m", part)
				}
			}
		} else {
			n, err := strconv.Atoi(what)
			if err != nil || n < 1 || n > 10_000_000 {
				return nil, fmt.Errorf("%q: want a burst such as 20000@10s (1 to 10000000 jobs)", part)
			}
			a.Jobs = n
			if timed {
				if a.At, err = time.ParseDuration(when); err != nil || a.At < 0 {
					return nil, fmt.Errorf("%q: want a burst such as 20000@10s", part)
				}
			}
		}
		out = append(out, a)
	}
	if len(out) == 0 {
		return nil, errors.New("no arrivals: want e.g. 20000@10s,50/s")
	}
	return out, nil
}

// SimConfig is one scaling simulation.
type SimConfig struct {
	Policy      Policy
	Arrivals    []Arrival
	JobTime     time.Duration // each job's handler time
	Concurrency int           // jobs at once per holder
	Startup     time.Duration // a scale-up candidate holds its slot this long after it was started
	Lifetime    time.Duration // a scaled holder's lifetime (lifetime + jitter, drawn per holder)
	Jitter      time.Duration
	Horizon     time.Duration // simulated time at most
	Seed        uint64
}

// SimResult is what a simulation measured.
type SimResult struct {
	Jobs          int           // jobs that arrived
	Drained       time.Duration // when the last job that arrived was done (-1: not within the horizon)
	Settled       time.Duration // when the holders were back to k after that (-1: not within the horizon)
	HolderSeconds float64       // run slots held over [0, End]
	End           time.Duration // the window HolderSeconds covers
	MostHolders   int
	ScaleUps      int // rounds
	Started       int // candidates started
	Left          int // holders that left by idle_exit
	MaxWait       time.Duration
}

// simHolder is one holder in the simulation.
type simHolder struct {
	slot            int
	from, until     time.Duration // holds the slot from; leaves at until (-1: never)
	lanes           []time.Duration
	lastJob, lastUp time.Duration
	kept            bool
}

// Simulate runs the arrival pattern against Policy.Keep holders that never
// leave (cron and the standbys keep them: check and the coverage simulation
// prove that) and, when scale is true, the holders Decide starts and stops.
// Time advances in 10ms steps; each holder decides once a second. It ends
// at the horizon, or once every job is done and the holders are back to k.
func Simulate(c SimConfig, scale bool) (SimResult, error) {
	if c.JobTime <= 0 || c.Concurrency < 1 || c.Horizon <= 0 || c.Policy.Keep < 1 || c.Policy.Slots < c.Policy.Keep {
		return SimResult{}, errors.New("simulate: want job time > 0, concurrency ≥ 1, horizon > 0, 1 ≤ min_slots ≤ slots")
	}
	const step = 10 * time.Millisecond
	rng := rand.New(rand.NewPCG(c.Seed, 13))
	arrivals := expand(c.Arrivals, c.Horizon)
	if len(arrivals) > 20_000_000 {
		return SimResult{}, errors.New("simulate: more than 20,000,000 jobs: shorten --horizon or lower the rates")
	}
	res := SimResult{Jobs: len(arrivals), Drained: -1, Settled: -1}
	holders := make([]*simHolder, c.Policy.Slots) // by slot; nil = free
	for i := 0; i < c.Policy.Keep; i++ {
		holders[i] = &simHolder{slot: i, until: -1, lanes: make([]time.Duration, c.Concurrency), lastUp: -time.Hour, kept: true}
	}
	type pending struct {
		slot int
		at   time.Duration
	}
	var starting []pending
	next, head := 0, 0 // next arrival to enqueue; head of the waiting queue (indexes into arrivals)
	done := 0
	lastEnd := time.Duration(0)
	for t := time.Duration(0); t <= c.Horizon; t += step {
		for next < len(arrivals) && arrivals[next] <= t {
			next++
		}
		// candidates that took their slot
		kept := starting[:0]
		for _, p := range starting {
			if p.at > t {
				kept = append(kept, p)
				continue
			}
			if holders[p.slot] == nil {
				until := c.Lifetime
				if c.Jitter > 0 {
					until += time.Duration(rng.Int64N(int64(c.Jitter)))
				}
				holders[p.slot] = &simHolder{slot: p.slot, from: t, until: t + until, lanes: make([]time.Duration, c.Concurrency), lastJob: t, lastUp: -time.Hour}
			}
		}
		starting = kept
		// lifetimes that end (scaled holders; kept ones are replaced at once)
		for i, h := range holders {
			if h != nil && h.until >= 0 && t >= h.until && allFree(h.lanes, t) {
				holders[i] = nil
			}
		}
		// work: lanes take waiting jobs in turn, from a rotating holder
		n := 0
		for _, h := range holders {
			if h != nil {
				n++
			}
		}
		res.MostHolders = max(res.MostHolders, n)
		res.HolderSeconds += float64(n) * step.Seconds()
		off := int(t/step) % len(holders)
		for progress := true; progress && head < next; {
			progress = false
			for k := range holders {
				h := holders[(k+off)%len(holders)]
				if h == nil || (h.until >= 0 && t >= h.until) {
					continue
				}
				for l := range h.lanes {
					if head >= next {
						break
					}
					start := max(h.lanes[l], arrivals[head], t)
					if start >= t+step {
						continue
					}
					res.MaxWait = max(res.MaxWait, start-arrivals[head])
					h.lanes[l] = start + c.JobTime
					h.lastJob = start
					lastEnd = max(lastEnd, h.lanes[l])
					head++
					done++
					progress = true
				}
			}
		}
		if res.Drained < 0 && done == len(arrivals) && next == len(arrivals) && t >= lastEnd {
			res.Drained = lastEnd
		}
		if res.Drained >= 0 && res.Settled < 0 && n == c.Policy.Keep && len(starting) == 0 {
			res.Settled = t
			res.End = t
			return res, nil
		}
		if !scale || t%time.Second != 0 {
			continue
		}
		// once a second, every holder decides on the same table
		table := make([]Slot, len(holders))
		for i, h := range holders {
			table[i] = Slot{Slot: i, Held: h != nil}
			if h != nil && h.until >= 0 && t >= h.until {
				table[i].Draining = true
			}
		}
		for _, p := range starting {
			table[p.slot].Held = true // a candidate on its way counts as held
		}
		var oldest time.Duration
		if head < next {
			oldest = t - arrivals[head]
		}
		for i, h := range holders {
			if h == nil {
				continue
			}
			busy := !allFree(h.lanes, t)
			idle := t - h.lastJob
			if busy {
				idle = 0
			}
			d := Decide(c.Policy, State{Known: true, Waiting: int64(next - head), Oldest: oldest, Slots: table, Self: i,
				Draining: table[i].Draining, Idle: idle, SinceUp: t - h.lastUp})
			switch d.Action {
			case Up:
				h.lastUp = t
				res.ScaleUps++
				for j, left := 0, d.N; j < len(table) && left > 0; j++ {
					if !table[j].Held {
						table[j].Held = true
						starting = append(starting, pending{slot: j, at: t + c.Startup})
						res.Started++
						left--
					}
				}
			case Leave:
				if !busy {
					holders[i] = nil
					table[i] = Slot{Slot: i}
					res.Left++
				}
			}
		}
	}
	res.End = c.Horizon
	return res, nil
}

func allFree(lanes []time.Duration, t time.Duration) bool {
	for _, l := range lanes {
		if l > t {
			return false
		}
	}
	return true
}

// expand lists every arrival time in order, up to horizon.
func expand(as []Arrival, horizon time.Duration) []time.Duration {
	var out []time.Duration
	for _, a := range as {
		if a.Rate == 0 {
			if a.At <= horizon {
				for i := 0; i < a.Jobs; i++ {
					out = append(out, a.At)
				}
			}
			continue
		}
		until := a.Until
		if until < 0 || until > horizon {
			until = horizon
		}
		gap := time.Duration(float64(time.Second) / a.Rate)
		for t := a.At; t < until && len(out) <= 20_000_000; t += max(gap, 1) {
			out = append(out, t)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
