// Package status reads what `baton status` and `baton web` show: every run
// and standby slot of a queue from the holders' records in the lock dir
// (or the fleet's leases, with the line of standbys waiting for one),
// and the queue's jobs from Redis, with warnings for what looks wrong.
//
// Read is the one call. It never takes a slot (invariant 6: observing never
// perturbs) and never writes to Redis.
package status

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/baton-run/baton/history"
	"github.com/baton-run/baton/holder"
	"github.com/baton-run/baton/internal/config"
	"github.com/baton-run/baton/internal/cronfire"
	"github.com/baton-run/baton/lock"
	"github.com/baton-run/baton/periodic"
	"github.com/baton-run/baton/scale"
	"github.com/baton-run/baton/standby"
	"github.com/baton-run/baton/work"
	"github.com/redis/go-redis/v9"
)

// Slot is one slot in status output.
type Slot struct {
	Slot int  `json:"slot"`
	Held bool `json:"held"`
	// NoRecord: the slot's lock is held (per the kernel's lock table) by PID
	// but its record is missing or unreadable (a full disk, say).
	NoRecord bool   `json:"no_record,omitempty"`
	PID      int    `json:"pid,omitempty"`
	Host     string `json:"host,omitempty"`
	// Target is the Redis server and database the holder works in, per
	// its record ("" for older versions and leases): status warns when it
	// is not this config's (two deployments sharing a lock dir).
	Target   string     `json:"target,omitempty"`
	Since    *time.Time `json:"since,omitempty"`
	Until    *time.Time `json:"until,omitempty"`
	JobsDone int64      `json:"jobs_done"`
	Job      string     `json:"job,omitempty"`
	JobSince *time.Time `json:"job_since,omitempty"`
	// Progress is what Job last reported of its progress, if anything.
	Progress *work.ProgressNote `json:"progress,omitempty"`
	// Fence and ExpiresIn (ms, on Redis' clock) are a lease's, with
	// lock_backend redis.
	Fence     int64 `json:"fence,omitempty"`
	ExpiresIn int64 `json:"expires_in_ms,omitempty"`
	Draining  bool  `json:"draining,omitempty"` // takes no more jobs: leaving
	// Children: a persistent holder's worker processes (pid, jobs served,
	// resident memory in bytes).
	Children []holder.Child `json:"children,omitempty"`
}

// Waiting is a standby in the fleet's line for a run lease (lock_backend
// redis): the first in line is handed the next run lease freed.
type Waiting struct {
	Position int    `json:"position"` // 1 is next
	Slot     int    `json:"slot"`     // its standby slot
	Host     string `json:"host"`
	PID      int    `json:"pid"`
	WaitedMS int64  `json:"waited_ms"` // since it joined the line, on Redis' clock
}

// Scale is the scaling state, when min_slots < slots.
type Scale struct {
	MinSlots int         `json:"min_slots"` // k
	Slots    int         `json:"slots"`     // N
	Holders  int         `json:"holders"`   // run slots held now
	Last     *scale.Last `json:"last,omitempty"`
}

// Report is a queue's slots and jobs at one instant.
type Report struct {
	Queue   string       `json:"queue"`
	Run     []Slot       `json:"run"`
	Standby []Slot       `json:"standby"`
	Jobs    *work.Counts `json:"jobs"`
	Memory  *work.Memory `json:"redis_memory,omitempty"`
	Rate    string       `json:"rate_limit,omitempty"`
	// RecentRate is the jobs started per second over the last three seconds,
	// as the rate limiter counted them; set when a limit is.
	RecentRate *float64 `json:"recent_rate_per_second,omitempty"`
	Scale      *Scale   `json:"scale,omitempty"`
	// Coverage is how well the run slots were covered, all time: the time
	// below k and the gaps between a slot's holders (from Redis).
	Coverage *history.Coverage `json:"coverage,omitempty"`
	// Events are the queue's last slot events (EventsShown), oldest first.
	Events []history.Event `json:"events,omitempty"`
	// LeasesPausedUntil is set while fleet leases are not granted after a
	// Redis failover, restart or loss of data (a lease_ttl from when a
	// candidate first saw it): a lease the old state granted may still run.
	LeasesPausedUntil *time.Time `json:"leases_paused_until,omitempty"`
	// Line is the fleet's line of standbys waiting for a run lease, first
	// in line first (lock_backend redis; empty: nobody waits). LineStale
	// counts members left by standbys that died or timed out in line, which
	// the next hand-over that reaches them drops.
	Line      []Waiting `json:"standby_line,omitempty"`
	LineStale int       `json:"standby_line_stale,omitempty"`
	// Keys are the queue's keys with jobs waiting or running, the busiest
	// first (docs/keys.md); absent when no key has any.
	Keys *work.KeyReport `json:"keys,omitempty"`
	// Periodic are the config's [[periodic]] entries as Redis records them
	// (periodic.List); absent without entries.
	Periodic []periodic.Status `json:"periodic,omitempty"`
	// PeriodicHosts are the entries' fingerprints the holders of each
	// host noted in the last minute; they differ while hosts run different
	// [[periodic]] entries (a rolling deploy).
	PeriodicHosts []periodic.HostEntries `json:"periodic_hosts,omitempty"`
	// CronFires are each host's last cron firing, as its holders published
	// it, and whether the host went silent (no firing for more than
	// CronSilentAfter).
	CronFires       []cronfire.Fire `json:"cron_fires,omitempty"`
	CronSilentAfter time.Duration   `json:"cron_silent_after,omitempty"`
	// Warnings are what looks wrong: a queue with no keys (a typo?), jobs
	// waiting with no holder visible here.
	Warnings []string `json:"warnings,omitempty"`
	Error    string   `json:"error,omitempty"`
}

// EventsShown is how many of the last slot events Read reads.
const EventsShown = 10

// Read reads cfg's queue once: its slots from the lock dir, and, when rdb
// is not nil, its jobs and Redis's memory. jerr is Redis failing (the slots
// are still in rep, with rep.Error set); err is the lock dir failing.
//
// With lock_backend redis and no rdb the slots are unknown (they are leases
// in Redis, not files here): rep.Run and rep.Standby are empty.
func Read(ctx context.Context, cfg *config.Config, rdb redis.UniversalClient) (rep *Report, jerr, err error) {
	rep = &Report{Queue: cfg.Queue, Run: []Slot{}, Standby: []Slot{}, Rate: cfg.RateLimit}
	if cfg.LockBackend == "redis" && rdb == nil {
		return rep, nil, nil
	}
	runSet, sbSet, err := holder.SlotSets(cfg, rdb)
	if err != nil {
		return nil, nil, err
	}
	if rep.Run, err = Slots(runSet); err != nil {
		return nil, nil, err
	}
	if sbSet != nil {
		if rep.Standby, err = Slots(sbSet); err != nil {
			return nil, nil, err
		}
	}
	if f := runSet.Capabilities().Fleet; f != nil {
		if p, err := f.PausedFor(); err == nil && p > 0 {
			until := time.Now().Add(p)
			rep.LeasesPausedUntil = &until
		}
	}
	if sbSet != nil && sbSet.Capabilities().Fleet != nil {
		if rep.Line, rep.LineStale, err = line(sbSet.Capabilities().Fleet); err != nil {
			return nil, nil, err
		}
	}
	if cfg.MinSlots > 0 && cfg.MinSlots < cfg.Slots {
		rep.Scale = &Scale{MinSlots: cfg.MinSlots, Slots: cfg.Slots, Last: scale.ReadLast(cfg.LockDir, cfg.Queue)}
		for _, s := range rep.Run {
			if s.Held {
				rep.Scale.Holders++
			}
		}
	}
	var others []string
	if rdb != nil {
		rep.Jobs, rep.Memory, others, jerr = queueCounts(ctx, rdb, cfg.Queue)
		if jerr == nil {
			rep.Coverage, rep.Events, jerr = slotHistory(ctx, rdb, cfg, rep.Jobs.Stats)
		}
		if jerr == nil {
			rep.Keys = rep.Jobs.Keys(cfg.KeyCaps(), KeysShown) // from the key streams the counts read
		}
		if entries, err := cfg.PeriodicEntries(); jerr == nil && err == nil && len(entries) > 0 {
			if rep.Periodic, err = periodic.List(ctx, rdb, cfg.Queue, entries); err != nil {
				jerr = err
			} else if rep.PeriodicHosts, err = periodic.ReadHosts(ctx, rdb, cfg.Queue, time.Minute); err != nil {
				jerr = err
			}
		}
		if jerr == nil {
			rep.CronSilentAfter = CronSilentAfter(cfg)
			if rep.CronFires, err = cronfire.Read(ctx, rdb, cfg.Queue, rep.CronSilentAfter); err != nil {
				jerr = err
			}
		}
		if jerr == nil && cfg.RateLimit != "" {
			r, err := work.RecentRate(ctx, rdb, cfg.Queue)
			if err != nil {
				jerr = fmt.Errorf("read the rate: %w", err)
			}
			rep.RecentRate = &r
		}
		if jerr != nil {
			rep.Error = jerr.Error()
		}
	}
	rep.Warnings = Warnings(cfg, rep, others)
	return rep, jerr, nil
}

// CronSilentAfter is how long a host may go without a cron firing before
// status calls it silent: twice the schedule's longest gap C, plus
// cronfire.Margin.
func CronSilentAfter(cfg *config.Config) time.Duration {
	c := time.Minute
	if s, err := standby.ParseSchedule(cfg.Schedule); err == nil {
		c = s.Gap()
	}
	return 2*c + cronfire.Margin
}

// slotHistory reads the coverage totals and the last events.
func slotHistory(ctx context.Context, rdb redis.Cmdable, cfg *config.Config, stats map[string]int64) (*history.Coverage, []history.Event, error) {
	cov, err := history.ReadCoverage(ctx, rdb, cfg.Queue, cfg.MinSlots, stats)
	if err != nil {
		return nil, nil, err
	}
	ev, err := history.ReadEvents(ctx, rdb, cfg.Queue, EventsShown)
	if err != nil {
		return nil, nil, err
	}
	return cov, ev, nil
}

// Slots reads the records of every slot of s.
func Slots(s lock.Set) ([]Slot, error) {
	recs, err := s.Records()
	if err != nil {
		return nil, err
	}
	out := make([]Slot, len(recs))
	for i, r := range recs {
		a := holder.ActivityOf(r)
		out[i] = Slot{Slot: r.Slot, Held: r.Held, NoRecord: r.NoRecord, PID: r.PID, Host: r.Host, Target: r.Target, JobsDone: a.JobsDone, Job: a.Job,
			Since: TimePtr(r.Since), Until: TimePtr(r.Until), JobSince: TimePtr(a.JobSince), Progress: a.Progress, Fence: r.Fence, ExpiresIn: r.ExpiresIn.Milliseconds(), Draining: a.Draining, Children: a.Children}
	}
	return out, nil
}

// line reads the fleet's line of standbys (sb: the standby leases).
func line(sb lock.Fleet) ([]Waiting, int, error) {
	l, stale, err := sb.Line()
	if err != nil {
		return nil, 0, err
	}
	out := make([]Waiting, len(l))
	for i, w := range l {
		out[i] = Waiting{Position: w.Position, Slot: w.Slot, Host: w.Host, PID: w.PID, WaitedMS: w.Waited.Milliseconds()}
	}
	return out, stale, nil
}

// TimePtr is &t, or nil for the zero time (omitted from JSON).
func TimePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// queueCounts reads the queue's counts and Redis's memory; when the queue
// has no keys at all, also the queues that do exist (else nil).
func queueCounts(ctx context.Context, rdb redis.Cmdable, q string) (*work.Counts, *work.Memory, []string, error) {
	c, err := work.ReadCounts(ctx, rdb, q)
	if err != nil {
		return nil, nil, nil, err
	}
	mem, err := work.ReadMemory(ctx, rdb, q)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("read redis memory: %w", err)
	}
	var others []string
	if c.Waiting+c.Pending+c.Scheduled+c.Retrying+c.Dead+c.Blocked == 0 && len(c.Stats) == 0 {
		if qs, err := work.Queues(ctx, rdb); err == nil && !slices.Contains(qs, q) {
			others = append(qs[:0:0], qs...)
		}
	}
	return c, &mem, others, nil
}

// Warnings says what looks wrong in rep; others are the queues that exist
// when rep's queue has no keys at all (else nil).
func Warnings(cfg *config.Config, rep *Report, others []string) []string {
	var w []string
	if others != nil {
		list := "none"
		if len(others) > 0 {
			list = strings.Join(others, ", ")
		}
		if len(rep.Periodic) > 0 {
			w = append(w, fmt.Sprintf("queue %s has no keys in this Redis database yet: its [[periodic]] entries are enqueued by its holders, and none has run "+
				"(is cron running 'baton run' with this config?); queues here: %s", rep.Queue, list))
		} else {
			w = append(w, fmt.Sprintf("queue %s has no keys in this Redis database (a typo?); queues here: %s", rep.Queue, list))
		}
	}
	if p := rep.LeasesPausedUntil; p != nil {
		w = append(w, fmt.Sprintf("leases paused after a Redis failover, restart or loss of data until %s: no slot is granted before a lease granted before it has expired (docs/fleet.md)",
			p.Format("15:04:05.000")))
	}
	if cfg.LockBackend != "redis" {
		w = append(w, foreign(cfg, rep)...)
	}
	held := 0
	for _, s := range rep.Run {
		if s.Held {
			held++
		}
	}
	if j := rep.Jobs; j != nil && j.Waiting+j.Pending > 0 && held == 0 {
		if cfg.LockBackend == "redis" {
			w = append(w, fmt.Sprintf("%s waiting or pending and no run lease held on any host: is cron running 'baton run' with lock_backend redis on the fleet's hosts?",
				Jobs(j.Waiting+j.Pending)))
		} else {
			w = append(w, fmt.Sprintf("%s waiting or pending and no holder in %s: is cron running 'baton run'? "+
				"Holders run by another user use another default lock dir (/tmp/baton-<uid>), and holders on other hosts are not visible here",
				Jobs(j.Waiting+j.Pending), cfg.LockDir))
		}
	}
	if hs := rep.PeriodicHosts; len(hs) > 1 {
		byPrint := map[string][]string{}
		for _, h := range hs {
			byPrint[h.Fingerprint] = append(byPrint[h.Fingerprint], h.Host)
		}
		if len(byPrint) > 1 {
			var groups []string
			for p, hosts := range byPrint {
				groups = append(groups, strings.Join(hosts, ", ")+" ("+p+")")
			}
			sort.Strings(groups)
			w = append(w, "the hosts run different [[periodic]] entries: "+strings.Join(groups, "; ")+
				"; each tick of an entry name is still enqueued once, with the payload and options of the host that claims it")
		}
	}
	for _, f := range rep.CronFires {
		if f.Silent {
			w = append(w, fmt.Sprintf("cron has not started baton on host %s since %s (%s ago; more than 2C + %s = %s for schedule %q): is its crontab line still there, is cron running? (a host taken out of service: baton periodic forget-host %s)",
				f.Host, f.Last.Format(time.RFC3339), time.Since(f.Last).Round(time.Second), cronfire.Margin, rep.CronSilentAfter, cfg.Schedule, f.Host))
		}
	}
	for _, p := range rep.Periodic {
		if !p.Unclaimed.IsZero() {
			w = append(w, fmt.Sprintf("periodic entry %q: its tick of %s is not claimed (%s late): no holder of the queue was running; the next one applies catch_up %s",
				p.Name, p.Unclaimed.Format(time.RFC3339), time.Since(p.Unclaimed).Round(time.Second), p.CatchUp))
		}
	}
	return w
}

// foreign warns of held slots whose records name another Redis target:
// another deployment shares the lock dir and queue name, and its holders
// take this one's slots (baton run refuses to start then).
func foreign(cfg *config.Config, rep *Report) []string {
	self := cfg.RedisTarget()
	var w []string
	for _, set := range []struct {
		role  string
		slots []Slot
	}{{lock.RoleRun, rep.Run}, {lock.RoleStandby, rep.Standby}} {
		for _, s := range set.slots {
			if s.Held && s.Target != "" && s.Target != self {
				w = append(w, fmt.Sprintf("%s slot %d is held by pid %d of another deployment, working in Redis %s, not %s (this config's): "+
					"two deployments share lock dir %s and queue %s; give each its own lock_dir", set.role, s.Slot, s.PID, s.Target, self, cfg.LockDir, cfg.Queue))
			}
		}
	}
	return w
}

// Jobs is n jobs in words: "1 job", "2 jobs".
func Jobs(n int64) string {
	if n == 1 {
		return "1 job"
	}
	return fmt.Sprintf("%d jobs", n)
}
