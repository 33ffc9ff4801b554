// Package sim is a discrete-event simulation of one baton config under cron:
// firings per the real schedule, candidates that start after a short latency
// and take a run slot, else a standby slot, else exit (each set tried from a
// random slot, as lock.FileSet does); holders with jittered lifetimes that
// drain and leave; standbys that give up after standby_wait; random crashes
// and hangs.
//
// Standbys follow standby.Protocol.Promote: a freed run slot wakes them
// within Config.Wake (inotify), and the longest-waiting standby takes it.
// With Config.PollOnly they poll every poll_interval ±10% instead, as when
// the lock directory cannot be watched.
//
// Most callers need Run:
//
//	res, err := sim.Run(sim.Config{Schedule: s, Q: q, Horizon: 30 * 24 * time.Hour, Seed: 1})
//
// A run is deterministic for a given Config (the seed included) and costs
// about a microsecond per event, so 30 simulated days take milliseconds.
// Standby polls are not simulated one by one: a standby's next poll is drawn
// only when a run slot frees, from the same ±10% renewal process the real
// code follows.
package sim

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/baton-run/baton/standby"
)

// Defaults for zero Config fields.
const (
	DefaultHorizon = 30 * 24 * time.Hour
	// DefaultLatency bounds a candidate's start-up: it tries the slots
	// uniformly within this long of its firing. It stays below the start-up
	// allowance that check assumes (standby.DefaultStartup).
	DefaultLatency = 200 * time.Millisecond
	// DefaultWake bounds how long a standby takes to try the run slots after
	// one frees: inotify's wake-up, reading the slot records, the flock calls.
	// standby.BenchmarkHandover measures 0.6 to 1ms on average on a loaded
	// two-core machine (up to 10ms at worst). Steals scale with the mean, and
	// this one's is 2.5ms.
	DefaultWake = 5 * time.Millisecond
)

// DefaultStart is the wall-clock instant of simulated time zero: a Monday
// midnight, UTC. Nothing runs at time zero.
var DefaultStart = time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)

// Config is one simulation: a baton config, its schedule and the faults.
type Config struct {
	Schedule *standby.Schedule  // when cron starts candidates
	Q        standby.Quantities // slots, spawn, lifetimes, waits (C and Lines are taken from Schedule)
	// Start is the wall-clock time of simulated time zero; zero means DefaultStart.
	Start time.Time
	// Horizon is the simulated time; zero means DefaultHorizon.
	Horizon time.Duration
	// Warmup is left out of the measurements; zero means Warmup(Q).
	Warmup time.Duration
	// Latency bounds a candidate's start-up, uniform in [0, Latency); zero means DefaultLatency.
	Latency time.Duration
	// CrashRate is crashes per holder-hour: a holder dies at once and its slot frees.
	CrashRate float64
	// HangRate is hangs per holder-hour: a holder stops working but keeps its
	// slot until its hard deadline, lifetime + shutdown_grace + margin.
	HangRate float64
	// Wake bounds a standby's reaction to a freed run slot, uniform in
	// [0, Wake); zero means DefaultWake.
	Wake time.Duration
	// PollOnly models standbys that cannot watch the lock directory
	// (inotify unavailable): they notice a free slot at their next poll.
	PollOnly bool
	// firstAwake models the protocol before fair promotion: every standby
	// tries when woken, and the first one awake wins. For comparisons.
	firstAwake bool
	// Seed seeds the random draws.
	Seed uint64
	// Trace records a timeline this long from the end of the warm-up, for SVG; 0 records none.
	Trace time.Duration
}

// Warmup is how long the system takes to fill from nothing: ⌈k/m⌉ firings,
// each at most C apart, plus the start-up allowance E. Coverage is measured
// from then on.
func Warmup(q standby.Quantities) time.Duration {
	m := max(q.M(), 1)
	return time.Duration((q.Slots+m-1)/m)*q.C + q.E()
}

// Result is what a simulation measured after the warm-up.
type Result struct {
	Horizon, Warmup time.Duration
	// Full is the fraction of time with at least k holders, counting a slot
	// whose standby is about to take it (a handover, at most 1.1 × poll) as held.
	Full float64
	// FullStrict is the fraction of time with at least k working holders,
	// handovers not counted.
	FullStrict float64
	// Any is the fraction of time with at least one holder (handovers counted).
	Any float64
	// LongestBelow is the longest stretch with fewer than k holders (handovers counted as held).
	LongestBelow time.Duration
	// Gaps counts stretches with fewer than k holders.
	Gaps int
	// GapTime is the total time with fewer than k holders.
	GapTime time.Duration
	// HandoverMax is the longest a standby took to take a run slot after it freed.
	HandoverMax time.Duration

	Firings    int // cron firings
	Candidates int // candidates started
	Direct     int // candidates that took a run slot at start
	Steals     int // of Direct: took a run slot while a standby waited for it
	Standbys   int // candidates that took a standby slot
	Nothing    int // candidates that found every slot taken and exited
	Promotions int // standbys that took a run slot
	Timeouts   int // standbys that gave up after standby_wait
	Crashes    int // holders that crashed
	Hangs      int // holders that hung until their hard deadline

	// Slots is per run slot: share of the measured time held, and holders.
	Slots []SlotStats
	// Buckets splits the measured time into equal parts: holders over time.
	Buckets []Bucket
	// Timeline is the recorded window when Config.Trace is set.
	Timeline *Timeline
}

// SlotStats describes one run slot over the measured time.
type SlotStats struct {
	Held    float64 // share of time held by a holder (working, draining or hung)
	Holders int     // holders that took it
}

// Bucket is one stretch of the measured time.
type Bucket struct {
	From, To time.Duration
	Min      int     // fewest holders at any instant (handovers counted as held)
	Mean     float64 // time-weighted mean of working holders
}

// Buckets is how many parts Result.Buckets has.
const Buckets = 30

// proc is one candidate that won a slot; it is reused after it exits.
type proc struct {
	gen       uint32
	serial    int // unique over the run, unlike the reused pid
	role      standby.Role
	slot      int
	since     time.Duration // took the current slot
	lifeEnd   time.Duration // holder: lifetime ends
	releaseAt time.Duration // holder: leaves the slot (drain done, or hard deadline)
	hung      bool
	hungAt    time.Duration
	lastPoll  time.Duration // standby: a poll of its renewal process, the latest one drawn
	arrived   time.Duration // standby: took the standby slot; the oldest is promoted first
	wakeAt    time.Duration // standby: queued wake-up after a run slot freed, -1 when none
}

// state is one simulation in progress; Run owns it.
type state struct {
	cfg     Config
	q       standby.Quantities
	rng     *rand.Rand
	queue   queue
	procs   []proc
	free    []int32       // reusable proc ids
	serial  int           // next proc serial
	pollAt  time.Duration // time of the queued evPoll, -1 when none
	run, sb []int32       // pid per slot, -1 when free
	nRun    int           // run slots held
	nWork   int           // holders not hung
	nSb     int           // standby slots held
	freedAt []time.Duration
	drain   time.Duration // longest drain after a lifetime
	now     time.Duration
	end     time.Duration // horizon
	res     Result
	meas    measure
	trace   *tracer
}

// Run simulates cfg and returns what it measured.
func Run(cfg Config) (*Result, error) {
	if cfg.Schedule == nil {
		return nil, errors.New("simulate: no schedule")
	}
	q := cfg.Q
	q.C, q.Lines, q.PeakLines = cfg.Schedule.Gap(), cfg.Schedule.MinLines(), cfg.Schedule.PeakLines()
	switch {
	case q.Slots < 1 || q.StandbySlots < 0 || q.Spawn < 1:
		return nil, fmt.Errorf("simulate: slots %d, standby slots %d, spawn %d: need at least 1, 0, 1", q.Slots, q.StandbySlots, q.Spawn)
	case q.Lifetime <= 0 || q.Jitter < 0 || q.StandbyWait < 0 || q.Poll <= 0 || q.Grace < 0 || q.JobTimeout < 0:
		return nil, errors.New("simulate: lifetime and poll must be positive, other durations not negative")
	case cfg.CrashRate < 0 || cfg.HangRate < 0 || math.IsNaN(cfg.CrashRate) || math.IsNaN(cfg.HangRate):
		return nil, errors.New("simulate: crash and hang rates must not be negative")
	}
	cfg.Q = q
	if cfg.Start.IsZero() {
		cfg.Start = DefaultStart
	}
	if cfg.Horizon <= 0 {
		cfg.Horizon = DefaultHorizon
	}
	if cfg.Warmup <= 0 {
		cfg.Warmup = Warmup(q)
	}
	if cfg.Latency <= 0 {
		cfg.Latency = DefaultLatency
	}
	if cfg.Wake <= 0 {
		cfg.Wake = DefaultWake
	}
	if cfg.Warmup >= cfg.Horizon {
		return nil, fmt.Errorf("simulate: horizon %v is not longer than the warm-up %v", cfg.Horizon, cfg.Warmup)
	}
	s := &state{
		cfg: cfg, q: q,
		rng:     rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		run:     fill(q.Slots),
		sb:      fill(q.StandbySlots),
		freedAt: make([]time.Duration, q.Slots),
		drain:   q.Grace,
		end:     cfg.Horizon,
		pollAt:  -1,
	}
	if q.JobTimeout > 0 {
		s.drain = min(q.JobTimeout, q.Grace)
	}
	s.meas.init(s)
	if cfg.Trace > 0 {
		s.trace = newTracer(cfg.Warmup, min(cfg.Warmup+cfg.Trace, cfg.Horizon), q)
	}
	s.scheduleFiring(0)
	for s.queue.len() > 0 {
		e := s.queue.pop()
		if e.t >= s.end {
			break
		}
		s.meas.advance(s, e.t)
		s.now = e.t
		s.handle(e)
		s.meas.settle(s)
	}
	s.meas.advance(s, s.end)
	s.now = s.end
	s.meas.finish(s)
	if s.trace != nil {
		s.res.Timeline = s.trace.finish(s)
	}
	s.res.Horizon, s.res.Warmup = cfg.Horizon, cfg.Warmup
	return &s.res, nil
}

func fill(n int) []int32 {
	v := make([]int32, n)
	for i := range v {
		v[i] = -1
	}
	return v
}

// scheduleFiring queues the first firing strictly after simulated time t.
func (s *state) scheduleFiring(t time.Duration) {
	next, lines := s.cfg.Schedule.Next(s.cfg.Start.Add(t))
	if next.IsZero() {
		return
	}
	s.queue.push(event{t: next.Sub(s.cfg.Start), kind: evFiring, lines: uint16(lines)})
}

func (s *state) handle(e event) {
	if e.kind == evFiring {
		s.firing(int(e.lines))
		return
	}
	if e.kind == evArrive {
		s.arrive()
		return
	}
	if e.kind == evPoll {
		s.poll(e)
		return
	}
	if e.kind == evWake {
		s.woken(e)
		return
	}
	p := &s.procs[e.pid]
	if p.gen != e.gen {
		return // the process this event was for has left
	}
	switch e.kind {
	case evRelease:
		if p.role == standby.Run && e.t == p.releaseAt {
			s.leaveRun(e.pid, EndLifetime)
		}
	case evCrash:
		if p.role == standby.Run && e.t < p.releaseAt {
			s.res.Crashes++
			s.leaveRun(e.pid, EndCrash)
		}
	case evHang:
		if p.role == standby.Run && !p.hung && e.t < p.releaseAt {
			s.hang(e.pid)
		}
	case evTimeout:
		if p.role == standby.Standby {
			s.res.Timeouts++
			s.leaveStandby(e.pid, EndTimeout)
			s.handover()
		}
	}
}

func (s *state) firing(lines int) {
	t := s.now
	s.res.Firings++
	for range lines * s.q.Spawn {
		lat := time.Duration(s.rng.Int64N(int64(s.cfg.Latency)))
		s.queue.push(event{t: t + lat, kind: evArrive})
	}
	s.trace.firing(t)
	s.scheduleFiring(t)
}

// arrive is a candidate's Enter: a run slot, else a standby slot, else nothing.
func (s *state) arrive() {
	s.res.Candidates++
	if i := s.freeRun(); i >= 0 {
		s.res.Direct++
		if s.nSb > 0 {
			s.res.Steals++
		}
		s.hold(s.newProc(), i, false)
		return
	}
	j := -1
	if s.nSb < len(s.sb) {
		j = s.firstFree(s.sb)
	}
	if j < 0 {
		s.res.Nothing++
		return
	}
	s.res.Standbys++
	pid := s.newProc()
	p := &s.procs[pid]
	p.role, p.slot, p.since, p.arrived, p.lastPoll, p.wakeAt = standby.Standby, j, s.now, s.now, s.now, -1
	s.sb[j] = pid
	s.nSb++
	s.queue.push(event{t: s.now + s.q.StandbyWait, kind: evTimeout, pid: pid, gen: p.gen})
}

// freeRun is the run slot a TryAcquire would take now, or -1.
func (s *state) freeRun() int {
	if s.nRun == len(s.run) {
		return -1
	}
	return s.firstFree(s.run)
}

// firstFree is the first free slot from a random one on, as lock.FileSet
// tries them; the caller knows one is free.
func (s *state) firstFree(slots []int32) int {
	n := len(slots)
	first := s.rng.IntN(n)
	for k := range n {
		if i := (first + k) % n; slots[i] < 0 {
			return i
		}
	}
	return -1
}

func (s *state) newProc() int32 {
	if n := len(s.free); n > 0 {
		pid := s.free[n-1]
		s.free = s.free[:n-1]
		gen := s.procs[pid].gen
		s.procs[pid] = proc{gen: gen, serial: s.serial}
		s.serial++
		return pid
	}
	s.procs = append(s.procs, proc{serial: s.serial})
	s.serial++
	return int32(len(s.procs) - 1)
}

func (s *state) exit(pid int32) {
	p := &s.procs[pid]
	p.gen++
	p.role = standby.None
	s.free = append(s.free, pid)
}

// hold makes pid the holder of run slot i from now: a jittered lifetime,
// then a drain, and perhaps a crash or a hang on the way.
func (s *state) hold(pid int32, i int, promoted bool) {
	p := &s.procs[pid]
	q := s.q
	life := q.Lifetime
	if q.Jitter > 0 {
		life += time.Duration(s.rng.Int64N(int64(q.Jitter)))
	}
	drain := time.Duration(0)
	if s.drain > 0 {
		drain = time.Duration(s.rng.Int64N(int64(s.drain)))
	}
	p.role, p.slot, p.since, p.hung = standby.Run, i, s.now, false
	p.lifeEnd = s.now + life
	p.releaseAt = p.lifeEnd + drain
	s.run[i] = pid
	s.nRun++
	s.nWork++
	s.meas.took(s, i, promoted)
	s.queue.push(event{t: p.releaseAt, kind: evRelease, pid: pid, gen: p.gen})
	deadline := p.lifeEnd + q.Grace + q.HardMargin
	if at, ok := s.fault(s.cfg.CrashRate); ok && at < deadline {
		s.queue.push(event{t: at, kind: evCrash, pid: pid, gen: p.gen})
	}
	if at, ok := s.fault(s.cfg.HangRate); ok && at < p.releaseAt {
		s.queue.push(event{t: at, kind: evHang, pid: pid, gen: p.gen})
	}
}

// fault draws when a fault with rate per hour strikes a holder starting now.
func (s *state) fault(perHour float64) (time.Duration, bool) {
	if perHour <= 0 {
		return 0, false
	}
	h := s.rng.ExpFloat64() / perHour
	if h > float64(s.end)/float64(time.Hour) {
		return 0, false
	}
	return s.now + time.Duration(h*float64(time.Hour)), true
}

// hang stops the holder's work; the hard deadline ends it at lifetime +
// grace + margin.
func (s *state) hang(pid int32) {
	p := &s.procs[pid]
	p.hung = true
	s.nWork--
	s.res.Hangs++
	p.releaseAt = p.lifeEnd + s.q.Grace + s.q.HardMargin
	p.hungAt = s.now
	s.queue.push(event{t: p.releaseAt, kind: evRelease, pid: pid, gen: p.gen})
}

func (s *state) leaveRun(pid int32, why End) {
	p := &s.procs[pid]
	i := p.slot
	s.trace.span(s, pid, why)
	s.meas.left(s, i, p.since)
	s.run[i] = -1
	s.freedAt[i] = s.now
	s.nRun--
	if !p.hung {
		s.nWork--
	}
	s.exit(pid)
	s.handover()
}

// handover arranges for a waiting standby to take a free run slot. With the
// watcher, a freed slot wakes the standbys: the oldest takes it, and the
// others defer to it. When a standby leaves (promoted or timed out) while a
// slot is still free, the deferring ones look again within milliseconds, and
// the next oldest takes it. Without the watcher, see schedulePoll.
func (s *state) handover() {
	if s.nSb == 0 || s.nRun == len(s.run) {
		return
	}
	if s.cfg.PollOnly {
		s.schedulePoll()
		return
	}
	if !s.cfg.firstAwake {
		s.wake(s.oldest())
		return
	}
	for _, pid := range s.sb {
		if pid >= 0 {
			s.wake(pid)
		}
	}
}

// wake queues standby pid's try of the run set within Config.Wake, unless
// an earlier one is queued.
func (s *state) wake(pid int32) {
	p := &s.procs[pid]
	at := s.now + time.Duration(s.rng.Int64N(int64(s.cfg.Wake)))
	if p.wakeAt >= s.now && p.wakeAt <= at {
		return
	}
	p.wakeAt = at
	s.queue.push(event{t: at, kind: evWake, pid: pid, gen: p.gen})
}

// woken is a standby's try after a wake-up.
func (s *state) woken(e event) {
	p := &s.procs[e.pid]
	if p.gen != e.gen || p.role != standby.Standby || e.t != p.wakeAt {
		return
	}
	p.wakeAt = -1
	if i := s.freeRun(); i >= 0 {
		s.promote(e.pid, i)
		if !s.cfg.firstAwake {
			s.handover() // a second free slot: the next oldest, deferring, looks again
		}
	}
}

// oldest is the standby that has waited longest; there is one.
func (s *state) oldest() int32 {
	best := int32(-1)
	for _, pid := range s.sb {
		if pid >= 0 && (best < 0 || s.procs[pid].arrived < s.procs[best].arrived ||
			s.procs[pid].arrived == s.procs[best].arrived && s.procs[pid].serial < s.procs[best].serial) {
			best = pid
		}
	}
	return best
}

// poll is a standby trying the run slots. The event may be stale (the
// standby left, or an earlier poll was queued since); the queue of polls is
// kept either way.
func (s *state) poll(e event) {
	if e.t == s.pollAt {
		s.pollAt = -1
	}
	p := &s.procs[e.pid]
	if p.gen == e.gen && p.role == standby.Standby && e.t == p.lastPoll {
		if i := s.freeRun(); i >= 0 {
			s.promote(e.pid, i)
		}
	}
	s.schedulePoll()
}

// schedulePoll queues the first standby poll that will find a free run slot.
// Standbys poll all the time, but a poll matters only while a run slot is
// free, so only the earliest such poll becomes an event: one event per
// handover instead of one per standby per poll. Younger standbys defer to
// the oldest for two poll intervals, longer than its next poll can take,
// so only the oldest one's polls count.
func (s *state) schedulePoll() {
	if s.nSb == 0 || s.nRun == len(s.run) {
		return
	}
	only := int32(-1)
	if !s.cfg.firstAwake {
		only = s.oldest()
	}
	first, at, settledN := int32(-1), time.Duration(0), 0
	for _, pid := range s.sb {
		if pid < 0 || only >= 0 && pid != only {
			continue
		}
		p := &s.procs[pid]
		if p.lastPoll <= s.now {
			if s.settled(p) {
				settledN++
				continue
			}
			p.lastPoll = s.stepPolls(p)
		}
		if first < 0 || p.lastPoll < at {
			first, at = pid, p.lastPoll
		}
	}
	if settledN > 0 {
		// Settled standbys poll at independent stationary phases: draw the
		// earliest of them at once; each is equally likely to be the one.
		if x := s.now + s.firstOf(settledN); first < 0 || x < at {
			pick := s.rng.IntN(settledN)
			for _, pid := range s.sb {
				if pid >= 0 && (only < 0 || pid == only) && s.procs[pid].lastPoll <= s.now && s.settled(&s.procs[pid]) {
					if pick == 0 {
						first, at = pid, x
						break
					}
					pick--
				}
			}
			s.procs[first].lastPoll = at
		}
	}
	if s.pollAt >= 0 && s.pollAt <= at {
		return // an earlier poll is already queued
	}
	s.pollAt = at
	s.queue.push(event{t: at, kind: evPoll, pid: first, gen: s.procs[first].gen})
}

func (s *state) leaveStandby(pid int32, why End) {
	p := &s.procs[pid]
	s.trace.span(s, pid, why)
	s.sb[p.slot] = -1
	s.nSb--
	s.exit(pid)
}

// promote moves standby pid to run slot i: the run slot is taken before the
// standby slot is let go, as in Protocol.Promote.
func (s *state) promote(pid int32, i int) {
	p := &s.procs[pid]
	s.res.Promotions++
	if s.now >= s.cfg.Warmup {
		s.res.HandoverMax = max(s.res.HandoverMax, s.now-s.freedAt[i])
	}
	s.trace.span(s, pid, EndPromoted)
	s.trace.promotion(s, p.slot, i)
	s.sb[p.slot] = -1
	s.nSb--
	s.hold(pid, i, true)
}

// settledPolls is how many poll intervals after its last known poll a
// standby's phase is drawn from the stationary distribution instead of
// stepped poll by poll.
const settledPolls = 8

func (s *state) settled(p *proc) bool { return s.now-p.lastPoll > settledPolls*s.q.Poll }

// stepPolls is the standby's first poll after now, stepping its renewal
// process (gaps uniform in [0.9, 1.1] × Poll) from the last known poll.
func (s *state) stepPolls(p *proc) time.Duration {
	lo, hi := float64(s.q.Poll)*0.9, float64(s.q.Poll)*1.1
	t := p.lastPoll
	for t <= s.now {
		t += time.Duration(lo + s.rng.Float64()*(hi-lo))
	}
	return t
}

// firstOf draws the earliest next poll among n standbys at independent
// stationary phases. One standby's wait for its next poll has survival
// function 1 − x/P up to 0.9P, then a quadratic down to 0 at 1.1P; the
// earliest of n has that function to the power n, inverted here.
func (s *state) firstOf(n int) time.Duration {
	p := float64(s.q.Poll)
	a, w := 0.9*p, 0.2*p
	v := math.Pow(s.rng.Float64(), 1/float64(n)) // survival of the earliest poll
	if x := p * (1 - v); x <= a {
		return time.Duration(x) + 1
	}
	c := p*(1-v) - a
	return time.Duration(a+w*(1-math.Sqrt(max(0, 1-2*c/w)))) + 1
}
