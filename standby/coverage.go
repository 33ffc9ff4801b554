package standby

import (
	"fmt"
	"strings"
	"time"

	"github.com/baton-run/baton/lock"
)

// Status is a relation's verdict.
type Status int

// Verdicts, from best to worst.
const (
	Pass Status = iota // holds
	Warn               // holds only under an assumption check cannot prove, or a small known risk
	Fail               // does not hold: expect gaps
)

func (s Status) String() string { return [...]string{"PASS", "WARN", "FAIL"}[s] }

// MarshalText writes PASS, WARN or FAIL.
func (s Status) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads PASS, WARN or FAIL.
func (s *Status) UnmarshalText(b []byte) error {
	for v := Pass; v <= Fail; v++ {
		if string(b) == v.String() {
			*s = v
			return nil
		}
	}
	return fmt.Errorf("status %q: want PASS, WARN or FAIL", b)
}

// Relation is one coverage relation evaluated for a config.
type Relation struct {
	Name    string `json:"name"`    // stable identifier, e.g. "standby-outwaits-lifetime"
	Formula string `json:"formula"` // in the quantities' symbols, e.g. "S > L_max"
	Values  string `json:"values"`  // the formula with this config's numbers
	Margin  string `json:"margin"`  // how far from the limit; negative when it fails
	Status  Status `json:"status"`
	Why     string `json:"why"`           // what breaks when it does not hold
	Fix     string `json:"fix,omitempty"` // one concrete change, with numbers, unless Pass
}

// Check evaluates every coverage relation for q. Relations are sufficient
// conditions: when all pass, a crash-free run keeps k holders at all times
// after the warm-up (handovers aside: milliseconds, or up to 1.1 ×
// poll_interval where the lock directory cannot be watched). See
// docs/coverage.md for the derivations and the simulations behind them.
//
// In fleet mode (q.Fleet) the relations count candidates from all q.H()
// hosts, and more follow: the lease timings' order, a standby that
// outwaits a holder's lease, losing a whole host, and max_per_host (room
// with a host lost, and room for the standbys).
func Check(q Quantities) []Relation {
	rs := []Relation{
		outwaitsLifetime(q),
		outwaitsDeadline(q),
		survivesLostHandover(q),
		cronBeatsLifetime(q),
		replenishment(q),
		standbySlots(q),
		pollInterval(q),
		visibility(q),
		maxJobs(q),
	}
	if q.Fleet() {
		rs = append(rs, leaseOrder(q), outwaitsLease(q), hostLoss(q))
		if q.MaxPerHost > 0 {
			rs = append(rs, hostCap(q), hostRoom(q))
		}
	}
	return rs
}

// Failed reports whether any relation failed.
func Failed(rs []Relation) bool {
	for _, r := range rs {
		if r.Status == Fail {
			return true
		}
	}
	return false
}

func outwaitsLifetime(q Quantities) Relation {
	r := Relation{
		Name:    "standby-outwaits-lifetime",
		Formula: "S ≥ L_max",
		Values:  fmt.Sprintf("%s ≥ %s", FormatDuration(q.StandbyWait), FormatDuration(q.LMax())),
		Margin:  signed(q.StandbyWait - q.LMax()),
		Why: "a standby must still be waiting when the holder it backs up reaches the end of its lifetime " +
			"(S > L for every lifetime L, which is always below L_max)",
	}
	if q.StandbyWait >= q.LMax() {
		return r
	}
	r.Status = Fail
	r.Fix = "raise standby_wait to at least " + FormatDuration(ceilSecond(q.LMax()))
	if j := floorSecond(q.StandbyWait - q.Lifetime); j >= 0 && q.Jitter > 0 {
		r.Fix += ", or lower jitter to " + FormatDuration(j)
	}
	return r
}

func outwaitsDeadline(q Quantities) Relation {
	h := q.Deadline()
	r := Relation{
		Name:    "standby-outwaits-deadline",
		Formula: "S > H = L_max + grace + margin",
		Values: fmt.Sprintf("%s > %s + %s + %s", FormatDuration(q.StandbyWait), FormatDuration(q.LMax()),
			FormatDuration(q.Grace), FormatDuration(q.HardMargin)),
		Margin: signed(q.StandbyWait - h),
		Why: "a holder keeps its slot until it has drained, at the latest until its hard deadline H; " +
			"a standby that gives up sooner leaves the slot to the next firing",
	}
	if q.StandbyWait > h {
		return r
	}
	r.Status = Fail
	r.Fix = "raise standby_wait to at least " + FormatDuration(above(h))
	if g := below(q.StandbyWait - q.LMax() - q.HardMargin); g >= 0 && q.Grace > 0 {
		r.Fix += ", or lower shutdown_grace to " + FormatDuration(g)
	}
	return r
}

func survivesLostHandover(q Quantities) Relation {
	h := q.Deadline()
	r := Relation{
		Name:    "standby-survives-lost-handover",
		Formula: "S ≥ 2·H",
		Values:  fmt.Sprintf("%s ≥ 2·%s", FormatDuration(q.StandbyWait), FormatDuration(h)),
		Margin:  signed(q.StandbyWait - 2*h),
		Why: "a candidate that cron starts just as a holder leaves, before the waiting standby wakes (milliseconds; " +
			"a poll where the lock dir cannot be watched), takes the slot first: the standby passed over must " +
			"then outwait the new holder too",
	}
	if q.StandbyWait >= 2*h {
		return r
	}
	r.Status = Fail
	r.Fix = "raise standby_wait to at least " + FormatDuration(ceilSecond(2*h))
	if j := floorSecond(q.StandbyWait/2 - q.Lifetime - q.Grace - q.HardMargin); j >= 0 && q.Jitter > j {
		r.Fix += ", or lower jitter to " + FormatDuration(j)
	}
	return r
}

func cronBeatsLifetime(q Quantities) Relation {
	r := Relation{
		Name:    "cron-beats-lifetime",
		Formula: "L_min > C + E",
		Values:  fmt.Sprintf("%s > %s + %s", FormatDuration(q.LMin()), FormatDuration(q.C), FormatDuration(q.E())),
		Margin:  signed(q.LMin() - q.C - q.E()),
		Why:     "cron must start a new candidate before a holder's lifetime can end, or its slot waits for the next firing",
	}
	if q.LMin() > q.C+q.E() {
		return r
	}
	r.Status = Fail
	r.Fix = "raise lifetime to at least " + FormatDuration(above(q.C+q.E()))
	if s := scheduleWithGap(q.LMin() - q.E()); s != "" {
		r.Fix += ", or fire more often: schedule " + s
	}
	return r
}

func replenishment(q Quantities) Relation {
	m, k, e := q.M(), q.Slots, q.E()
	firings := q.FiringsPerLife()
	got := m * firings
	r := Relation{
		Name:    "replenishment",
		Formula: "m·⌊(L_min − E)/C⌋ ≥ k",
		Values:  fmt.Sprintf("%d·%d = %d ≥ %d", m, firings, got, k),
		Margin:  fmt.Sprintf("%+d candidates", got-k),
		Why: "within any lifetime cron must start at least k candidates, since every slot can retire once per L_min " +
			"(m·L_min/k > C counted in whole firings)",
	}
	if got >= k {
		return r
	}
	r.Status = Fail
	var fixes []string
	lines := max(q.Lines, 1) * q.H()
	if firings > 0 {
		fixes = append(fixes, fmt.Sprintf("raise spawn to %d", ceilDiv(k, firings*lines)))
	}
	need := ceilDiv(k, m) // firings per lifetime
	fixes = append(fixes, "raise lifetime to at least "+FormatDuration(time.Duration(need)*q.C+e))
	if s := scheduleWithGap((q.LMin() - e) / time.Duration(need)); s != "" {
		fixes = append(fixes, "fire more often: schedule "+s)
	}
	r.Fix = strings.Join(fixes, ", or ")
	return r
}

func standbySlots(q Quantities) Relation {
	k, ns := q.Slots, q.StandbySlots
	r := Relation{
		Name:    "standby-slots",
		Formula: "N_s ≥ k",
		Values:  fmt.Sprintf("%d ≥ %d", ns, k),
		Margin:  fmt.Sprintf("%+d slots", ns-k),
		Why:     "every holder that retires needs a standby waiting to take its slot",
	}
	if ns >= k {
		return r
	}
	r.Status = Fail
	wait := FormatDuration(q.C + q.E())
	if ns == 0 {
		r.Why = fmt.Sprintf("with no standby slots every retiring holder leaves its run slot empty until the next firing, up to %s", wait)
	} else {
		who := fmt.Sprintf("the %d standbys take %d of the free run slots", ns, ns)
		if ns == 1 {
			who = "the one standby takes one of the free run slots"
		}
		r.Why = fmt.Sprintf("when %d or more holders retire within one cron gap, %s and the rest stay empty until "+
			"the next firing, up to %s (all %d retiring together: %d run slot%s empty)",
			ns+1, who, wait, k, k-ns, plural(k-ns))
	}
	r.Fix = fmt.Sprintf("raise standby_slots to %d", k)
	return r
}

func pollInterval(q Quantities) Relation {
	limit := q.LMin() / 100
	r := Relation{
		Name:    "poll-interval",
		Formula: "1.1·P ≤ L_min/100",
		Values:  fmt.Sprintf("%s ≤ %s", FormatDuration(q.PollMax()), FormatDuration(limit)),
		Margin:  signed(limit - q.PollMax()),
		Why: "standbys wake on inotify and take a freed slot within milliseconds, but where the lock dir cannot " +
			"be watched they notice it at their next poll: each handover leaves the slot empty up to " +
			"1.1 × poll_interval, kept under 1% of a lifetime",
	}
	if q.PollMax() <= limit {
		return r
	}
	r.Status = Warn
	p := (limit * 10 / 11).Truncate(time.Millisecond)
	if p >= 10*time.Millisecond {
		r.Fix = "lower poll_interval to " + FormatDuration(p)
	} else {
		r.Fix = "raise lifetime to at least " + FormatDuration(ceilSecond(110*q.Poll))
	}
	return r
}

func visibility(q Quantities) Relation {
	j := q.JobTimeout + q.Grace
	r := Relation{
		Name:    "visibility-timeout",
		Formula: "V > job_timeout + grace",
		Values:  fmt.Sprintf("%s > %s + %s", FormatDuration(q.Visibility), FormatDuration(q.JobTimeout), FormatDuration(q.Grace)),
		Margin:  signed(q.Visibility - j),
		Why: "an entry is claimed from another slot only once it sat untouched for V; a job that outlives " +
			"V while its holder cannot reach Redis to refresh it could run twice",
	}
	switch {
	case q.Visibility == 0:
		r.Status = Warn
		r.Margin = "off"
		r.Why = "claiming is off: entries left pending by a slot that never returns (after slots was lowered) stay pending"
		r.Fix = "set visibility_timeout to at least " + FormatDuration(above(j))
	case q.Visibility <= j:
		r.Status = Fail
		r.Fix = "raise visibility_timeout to at least " + FormatDuration(above(j))
		if t := below(q.Visibility - q.Grace); q.JobTimeout > 0 && t > 0 {
			r.Fix += ", or lower job_timeout to " + FormatDuration(t)
		}
	}
	return r
}

func maxJobs(q Quantities) Relation {
	r := Relation{
		Name:    "max-jobs",
		Formula: "max_jobs = 0",
		Values:  fmt.Sprintf("%d = 0", q.MaxJobs),
		Margin:  "-",
		Why:     "L_min is the lifetime only if nothing ends a holder sooner",
	}
	if q.MaxJobs > 0 {
		r.Status = Warn
		r.Why = fmt.Sprintf("a holder leaves after about %d jobs, possibly before its lifetime of %s: the relations "+
			"above assume it does not", q.MaxJobs, FormatDuration(q.Lifetime))
		r.Fix = fmt.Sprintf("set max_jobs = 0, or keep it high enough that %d jobs take longer than %s", q.MaxJobs, FormatDuration(q.Lifetime))
	}
	return r
}

func leaseOrder(q Quantities) Relation {
	ttl, d, renew := q.LeaseTTL, q.RenewDeadline, q.LeaseRenew
	r := Relation{
		Name:    "lease-order",
		Formula: "lease_ttl > D > 3·lease_renew",
		Values:  fmt.Sprintf("%s > %s > 3·%s", FormatDuration(ttl), FormatDuration(d), FormatDuration(renew)),
		Margin:  signed(d - 3*renew),
		Why: "a holder that cannot renew fences itself at its renew deadline D, before its lease can expire " +
			"(lease_ttl > D); at least three renewals fit in D, so one or two slow ones do not fence a healthy holder",
	}
	switch {
	case renew <= 0 || d >= ttl || renew >= d:
		r.Status = Fail
		r.Why = "out of order (lease_ttl > D > lease_renew): a holder could run jobs after its lease went to another, " +
			"or one late renewal fences a healthy holder"
		r.Fix = "lower lease_renew to " + FormatDuration(max(d/3, time.Millisecond).Truncate(time.Millisecond))
	case d < 3*renew:
		r.Status = Warn
		r.Why = fmt.Sprintf("only %d renewals fit in the renew deadline %s: that many slow renewals in a row fence a healthy holder",
			d/renew, FormatDuration(d))
		r.Fix = "lower lease_renew to " + FormatDuration((d / 3).Truncate(time.Millisecond))
	}
	return r
}

func outwaitsLease(q Quantities) Relation {
	h := q.Deadline()
	r := Relation{
		Name:    "standby-outwaits-lease",
		Formula: "S > H + lease_ttl",
		Values:  fmt.Sprintf("%s > %s + %s", FormatDuration(q.StandbyWait), FormatDuration(h), FormatDuration(q.LeaseTTL)),
		Margin:  signed(q.StandbyWait - h - q.LeaseTTL),
		Why: "a holder that dies (kill -9, a lost host) keeps its lease until lease_ttl after its last renewal, " +
			"at the latest H + lease_ttl after it started: a standby that gives up sooner leaves the slot to the next firing",
	}
	if q.StandbyWait > h+q.LeaseTTL {
		return r
	}
	r.Status = Fail
	r.Fix = "raise standby_wait to at least " + FormatDuration(above(h+q.LeaseTTL))
	if t := below(q.StandbyWait - h); t > 0 && lock.DeadlineFor(t) >= 3*q.LeaseRenew {
		r.Fix += ", or lower lease_ttl to " + FormatDuration(t)
	}
	return r
}

func hostLoss(q Quantities) Relation {
	hosts, k, firings := q.H(), q.Slots, q.FiringsPerLife()
	per := q.M() / hosts // candidates per firing on one host
	got := per * (hosts - 1) * firings
	r := Relation{
		Name:    "host-loss",
		Formula: "m/N_h·(N_h−1)·⌊(L_min − E)/C⌋ ≥ k",
		Values:  fmt.Sprintf("%d·%d·%d = %d ≥ %d", per, hosts-1, firings, got, k),
		Margin:  fmt.Sprintf("%+d candidates", got-k),
		Why: "with one whole host lost, the other N_h−1 hosts' cron must still start at least k candidates within " +
			"any lifetime (their standbys take the lost host's slots once its leases expire)",
	}
	if got >= k {
		return r
	}
	if hosts == 1 {
		r.Status = Warn
		r.Why = "one host: losing it stops every slot until it returns (run the entry on 2 or more hosts and say so with --hosts)"
		r.Fix = "run the crontab entry on a second host"
		return r
	}
	r.Status = Fail
	var fixes []string
	lines := max(q.Lines, 1) * (hosts - 1)
	if firings > 0 {
		fixes = append(fixes, fmt.Sprintf("raise spawn to %d", ceilDiv(k, firings*lines)))
	}
	if per > 0 {
		if n := ceilDiv(k, per*max(firings, 1)) + 1; firings > 0 {
			fixes = append(fixes, fmt.Sprintf("run the entry on %d hosts", n))
		}
	}
	fixes = append(fixes, "raise lifetime to at least "+FormatDuration(time.Duration(ceilDiv(k, max(per*(hosts-1), 1)))*q.C+q.E()))
	r.Fix = strings.Join(fixes, ", or ")
	return r
}

func hostCap(q Quantities) Relation {
	hosts, k, c := q.H(), q.Slots, q.MaxPerHost
	got := (hosts - 1) * c
	r := Relation{
		Name:    "host-cap",
		Formula: "(N_h−1)·max_per_host ≥ k",
		Values:  fmt.Sprintf("%d·%d = %d ≥ %d", hosts-1, c, got, k),
		Margin:  fmt.Sprintf("%+d slots", got-k),
		Why:     "with one whole host lost, the other hosts must have room under max_per_host for k holders",
	}
	if got >= k {
		return r
	}
	r.Status = Fail
	if hosts == 1 {
		r.Status = Warn
		r.Why = "one host: losing it stops every slot until it returns"
	}
	r.Fix = fmt.Sprintf("raise max_per_host to %d", ceilDiv(k, max(hosts-1, 1)))
	return r
}

// hostRoom: max_per_host caps a host's run and standby slots together, so
// with every host up the fleet must have room for k holders and the
// standbys that cover their hand-overs (standby-slots counts the standby
// slots, not whether any host may take them).
func hostRoom(q Quantities) Relation {
	hosts, k, c := q.H(), q.Slots, q.MaxPerHost
	need, got := q.RoomNeeded(), hosts*c
	r := Relation{
		Name:    "host-room",
		Formula: "N_h·max_per_host ≥ k + min(N_s, k)",
		Values:  fmt.Sprintf("%d·%d = %d ≥ %d", hosts, c, got, need),
		Margin:  fmt.Sprintf("%+d slots", got-need),
		Why:     "max_per_host counts run and standby slots together: the hosts must have room for k holders and the standbys that take over from them",
	}
	if got >= need {
		return r
	}
	r.Status = Fail
	r.Why = fmt.Sprintf("max_per_host counts run and standby slots together: %d hosts take at most %d, so at most %d of the standbys that cover hand-overs can ever wait",
		hosts, got, max(got-k, 0))
	r.Fix = fmt.Sprintf("raise max_per_host to %d, or run the entry on %d hosts", ceilDiv(need, hosts), ceilDiv(need, c))
	return r
}

// scheduleWithGap suggests the sparsest every-n-minutes schedule whose gap
// is below limit, or "" when even every minute is too sparse.
func scheduleWithGap(limit time.Duration) string {
	for _, n := range []int{30, 20, 15, 12, 10, 6, 5, 4, 3, 2} {
		if time.Duration(n)*time.Minute < limit {
			return fmt.Sprintf("'*/%d * * * *'", n)
		}
	}
	if time.Minute < limit {
		return "'* * * * *'"
	}
	return ""
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// FormatDuration writes d as a Go duration without zero trailing units
// ("6m10s", "1h", "500ms"): the form check prints and the config accepts.
func FormatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

func signed(d time.Duration) string {
	if d >= 0 {
		return "+" + FormatDuration(d)
	}
	return FormatDuration(d)
}

// above is the least whole number of seconds greater than d.
func above(d time.Duration) time.Duration { return d.Truncate(time.Second) + time.Second }

// below is the greatest whole number of seconds less than d (negative when d ≤ 0).
func below(d time.Duration) time.Duration { return ceilSecond(d) - time.Second }

func ceilSecond(d time.Duration) time.Duration {
	if t := d.Truncate(time.Second); t != d && d > 0 {
		return t + time.Second
	}
	return d.Truncate(time.Second)
}

func floorSecond(d time.Duration) time.Duration {
	if t := d.Truncate(time.Second); t != d && d < 0 {
		return t - time.Second
	}
	return d.Truncate(time.Second)
}
