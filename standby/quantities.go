package standby

import "time"

// Quantities are the numbers the coverage relations are about: one config
// and the schedule that starts its candidates. Field comments name the
// config key each comes from.
type Quantities struct {
	// C is the longest gap between consecutive firings (Schedule.Gap).
	C time.Duration
	// Spawn is candidates started by one line's firing (spawn).
	Spawn int
	// Lines is the fewest crontab lines that fire together (Schedule.MinLines); 0 means 1.
	Lines int
	// PeakLines is the most line firings within any span of length C
	// (Schedule.PeakLines); 0 means Lines.
	PeakLines int
	// Slots is k, the run slots to keep covered (slots).
	Slots int
	// StandbySlots is N_s (standby_slots).
	StandbySlots int
	// Lifetime is a holder's shortest life, L_min (lifetime).
	Lifetime time.Duration
	// Jitter is added to Lifetime, uniform in [0, Jitter): L_max = Lifetime + Jitter (jitter).
	Jitter time.Duration
	// StandbyWait is S, how long a standby waits for a run slot (standby_wait).
	StandbyWait time.Duration
	// Poll is how often a standby tries the run slots, ±10% (poll_interval).
	Poll time.Duration
	// Grace is how long a holder may drain after its lifetime (shutdown_grace).
	Grace time.Duration
	// HardMargin is the slack after lifetime + grace before the hard deadline
	// ends the process (2s in baton run).
	HardMargin time.Duration
	// JobTimeout bounds one job; 0 means no limit (job_timeout).
	JobTimeout time.Duration
	// Visibility is how long an entry may sit pending before any holder
	// claims it; 0 turns claiming off (visibility_timeout).
	Visibility time.Duration
	// MaxJobs recycles a holder after about this many jobs; 0 means never (max_jobs).
	MaxJobs int
	// Startup is E, the allowance from a firing to the candidate holding a
	// slot (process start, config, flock). Zero means DefaultStartup.
	Startup time.Duration

	// Fleet mode (lock_backend redis): the slots are Redis leases shared by
	// every host. Zero LeaseTTL means flock slots, one machine: no fleet
	// relations.

	// Hosts is H, the hosts that each run the crontab entry with this config
	// (check --hosts); 0 means 1.
	Hosts int
	// LeaseTTL is how long a lease outlives its holder's last renewal (lease_ttl).
	LeaseTTL time.Duration
	// RenewDeadline is when a holder that could not renew fences itself
	// (2/3 of lease_ttl, lock.DeadlineFor).
	RenewDeadline time.Duration
	// LeaseRenew is the time between renewals (lease_renew).
	LeaseRenew time.Duration
	// MaxPerHost caps the run and standby slots one host takes; 0 means no
	// cap (max_per_host).
	MaxPerHost int
}

// DefaultStartup is the start-up allowance E when Quantities.Startup is zero:
// a candidate holds its slot within this long of the firing. Measured start-up
// is a few milliseconds; one second leaves room for a loaded machine.
const DefaultStartup = time.Second

// M is m, the fewest candidates started at one firing: Spawn × Lines on
// each of the Hosts.
func (q Quantities) M() int { return q.Spawn * max(q.Lines, 1) * q.H() }

// MC is m_C, the most candidates cron starts within any span of length C:
// Spawn × PeakLines on each of the Hosts.
func (q Quantities) MC() int { return q.Spawn * max(q.PeakLines, q.Lines, 1) * q.H() }

// H is the number of hosts running the entry: Hosts, at least 1.
func (q Quantities) H() int { return max(q.Hosts, 1) }

// RoomNeeded is the slots the fleet's hosts must have room for with
// max_per_host (run and standby slots together): k holders and the
// standbys that cover their hand-overs, k + min(N_s, k).
func (q Quantities) RoomNeeded() int { return q.Slots + min(q.StandbySlots, q.Slots) }

// Fleet reports whether the slots are Redis leases (LeaseTTL set).
func (q Quantities) Fleet() bool { return q.LeaseTTL > 0 }

// FiringsPerLife is how many firings are sure to fall within a holder's
// shortest life after its own start-up: ⌊(L_min − E)/C⌋.
func (q Quantities) FiringsPerLife() int {
	if q.C <= 0 || q.LMin() <= q.E() {
		return 0
	}
	return int((q.LMin() - q.E()) / q.C)
}

// LMin is the shortest holder lifetime: Lifetime.
func (q Quantities) LMin() time.Duration { return q.Lifetime }

// LMax is the bound on a holder's lifetime: Lifetime + Jitter (exclusive).
func (q Quantities) LMax() time.Duration { return q.Lifetime + q.Jitter }

// Deadline is the hard deadline H: the longest a holder keeps its run slot,
// lifetime plus draining, L_max + Grace + HardMargin.
func (q Quantities) Deadline() time.Duration { return q.LMax() + q.Grace + q.HardMargin }

// E is the start-up allowance: Startup, or DefaultStartup when zero.
func (q Quantities) E() time.Duration {
	if q.Startup > 0 {
		return q.Startup
	}
	return DefaultStartup
}

// PollMax is the longest a standby can take to notice a free run slot: 1.1 × Poll.
func (q Quantities) PollMax() time.Duration { return q.Poll + q.Poll/10 }
