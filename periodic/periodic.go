// Package periodic enqueues jobs on a schedule, exactly once per tick across
// every holder of a queue, on every host, with no leader and no single
// scheduler process.
//
// Most callers need Start, from a holder, with the queue's entries:
//
//	stop := periodic.Start(rdb, periodic.Config{Queue: "thumbs", Entries: entries, Fence: fence, Logger: log})
//	defer stop()
//
// Every holder checks every entry at least once a second, in one Redis
// round trip for all entries. A tick is claimed by one Lua script, on
// Redis' clock: it compares the tick with the entry's last claimed tick (a
// record that only moves forward), checks the claimant's lease in fleet
// mode, moves the record and adds the job to the stream as Enqueue would,
// all at once. A second holder, a holder frozen and woken late, a fenced
// holder or a second run of the same call after a lost reply finds the
// record at or past the tick and adds nothing. With no holder running,
// nothing is enqueued; the next holder applies the entry's CatchUp.
//
// Schedules are robfig/cron's standard syntax: five fields with an
// optional CRON_TZ= or TZ= prefix (UTC without one, not the host's zone:
// the hosts of a fleet must agree on every tick), the @hourly-style names,
// and @every D, whose ticks are the multiples of D since the Unix epoch.
package periodic

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/baton-run/baton/work"
	"github.com/robfig/cron/v3"
)

// CatchUp says what happens to ticks nobody claimed on time because no
// holder ran then.
type CatchUp string

// CatchUp values.
const (
	// CatchUpLatest enqueues only the most recent missed tick (anacron,
	// systemd's Persistent=). The default.
	CatchUpLatest CatchUp = "latest"
	// CatchUpNone enqueues no tick claimed later than Late after its time.
	CatchUpNone CatchUp = "none"
	// CatchUpAll enqueues every missed tick in order, the most recent
	// CatchUpMax of them at most.
	CatchUpAll CatchUp = "all"
)

// Overlap values.
const (
	// OverlapAllow enqueues a tick whatever the previous tick's job is
	// doing. The default.
	OverlapAllow = "allow"
	// OverlapSkip skips a tick (the record moves, no job, counted) while
	// the entry's previous job is waiting, scheduled, running or retrying,
	// as a Kubernetes CronJob's concurrencyPolicy: Forbid. The job holds
	// the unique key "periodic:<name>" (work.UniqueKey), freed when it is
	// done or dead.
	OverlapSkip = "skip"
)

// UniqueKey is the unique key of an entry's jobs with OverlapSkip.
func UniqueKey(name string) string { return "periodic:" + name }

// Late is how long after its scheduled time a tick still counts as on
// time: holders check every second, so a tick claimed later than this was
// missed (no holder ran, or all were frozen), and CatchUpNone skips it. A
// new entry's first tick is also enqueued only within it.
const Late = 10 * time.Second

// DefaultCatchUpMax is CatchUpMax's default.
const DefaultCatchUpMax = 100

// MaxCatchUp bounds CatchUpMax.
const MaxCatchUp = 10000

// Entry is one [[periodic]] entry of a queue's config.
type Entry struct {
	// Name identifies the entry in the queue: its record in Redis, logs,
	// BATON_PERIODIC. 1-100 letters, digits, '_', '.' or '-'.
	Name string
	// Schedule is when it fires: "*/5 * * * *", "CRON_TZ=Europe/Berlin 30 2 * * *",
	// "@hourly", "@every 10s".
	Schedule string
	// Payload is each job's payload.
	Payload []byte
	// Priority, Timeout (0: the queue's job_timeout) and MaxAttempts (0: the
	// queue's max_attempts) are each job's options, as enqueue has them.
	Priority    work.Priority
	Timeout     time.Duration
	MaxAttempts int
	// Key is each job's key (work.Key), "" for none.
	Key string
	// CatchUp is what happens to missed ticks. Default CatchUpLatest.
	CatchUp CatchUp
	// CatchUpMax bounds the ticks CatchUpAll enqueues at once. Default 100.
	CatchUpMax int
	// Overlap is OverlapAllow (the default) or OverlapSkip.
	Overlap string
}

// EntryError is a bad entry: which entry (by index and name), which key.
type EntryError struct {
	Index int    // 0-based position among the entries
	Name  string // the entry's name, "" when it has none
	Key   string // "schedule", "catch_up", ...
	Msg   string
}

func (e *EntryError) Error() string {
	who := fmt.Sprintf("periodic entry %d", e.Index+1)
	if e.Name != "" {
		who = fmt.Sprintf("periodic entry %q", e.Name)
	}
	return who + ": " + e.Key + ": " + e.Msg
}

var entryName = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

// Check validates entries: each one's keys, and names unique. The error is
// an *EntryError. Defaults (CatchUp, CatchUpMax, Overlap) are filled in.
func Check(entries []Entry) error {
	seen := map[string]bool{}
	for i := range entries {
		e := &entries[i]
		bad := func(key, format string, a ...any) error {
			return &EntryError{Index: i, Name: e.Name, Key: key, Msg: fmt.Sprintf(format, a...)}
		}
		if e.CatchUp == "" {
			e.CatchUp = CatchUpLatest
		}
		if e.CatchUpMax == 0 {
			e.CatchUpMax = DefaultCatchUpMax
		}
		if e.Overlap == "" {
			e.Overlap = OverlapAllow
		}
		switch {
		case e.Name == "":
			return bad("name", "missing: every entry needs a name, unique in the queue")
		case len(e.Name) > 100 || !entryName.MatchString(e.Name):
			return bad("name", "%q: use 1-100 letters, digits, '_', '.' or '-'", e.Name)
		case seen[e.Name]:
			return bad("name", "%q: another entry has this name; names must be unique in the queue", e.Name)
		case e.Schedule == "":
			return bad("schedule", `missing: e.g. "*/5 * * * *", "@hourly" or "@every 30s"`)
		case e.CatchUp != CatchUpLatest && e.CatchUp != CatchUpNone && e.CatchUp != CatchUpAll:
			return bad("catch_up", "%q: want latest, none or all", e.CatchUp)
		case e.CatchUpMax < 1 || e.CatchUpMax > MaxCatchUp:
			return bad("catch_up_max", "%d: must be between 1 and %d", e.CatchUpMax, MaxCatchUp)
		case e.Overlap != OverlapAllow && e.Overlap != OverlapSkip:
			return bad("overlap", "%q: want allow or skip", e.Overlap)
		case e.Timeout < 0:
			return bad("timeout", "%s: must be positive (or unset for the queue's job_timeout)", e.Timeout)
		case e.MaxAttempts < 0 || e.MaxAttempts > 1000:
			return bad("max_attempts", "%d: must be between 1 and 1000 (or unset for the queue's max_attempts)", e.MaxAttempts)
		}
		seen[e.Name] = true
		if _, err := parseSchedule(e.Schedule); err != nil {
			return bad("schedule", "%q: %v", e.Schedule, err)
		}
	}
	return nil
}

// Schedule is a parsed entry schedule.
type Schedule struct {
	src   string             // as written
	spec  *cron.SpecSchedule // nil for @every
	every time.Duration      // @every's period, whole seconds
	loc   *time.Location
}

// ErrNeverFires is a schedule without a tick in the next five years
// ("0 0 30 2 *").
var ErrNeverFires = errors.New("never fires")

// ParseSchedule parses an entry's schedule (see the package comment).
func ParseSchedule(spec string) (*Schedule, error) { return parseSchedule(spec) }

func parseSchedule(spec string) (*Schedule, error) {
	s, err := cron.ParseStandard(spec)
	if err != nil {
		return nil, err
	}
	switch s := s.(type) {
	case cron.ConstantDelaySchedule:
		// robfig/cron rounds the period down to whole seconds, at least
		// one: refuse what it would change rather than tick otherwise.
		_, d, _ := strings.Cut(spec, "@every")
		if p, err := time.ParseDuration(strings.TrimSpace(d)); err != nil || p != s.Delay {
			return nil, fmt.Errorf("@every takes whole seconds, at least 1s (it would run every %s)", s.Delay)
		}
		return &Schedule{src: spec, every: s.Delay, loc: time.UTC}, nil
	case *cron.SpecSchedule:
		out := &Schedule{src: spec, spec: s, loc: s.Location}
		if s.Location == time.Local {
			// Without CRON_TZ: UTC, so that every host computes the same ticks.
			out.loc = time.UTC
			c := *s
			c.Location = time.UTC
			out.spec = &c
		}
		if out.spec.Next(time.Now()).IsZero() {
			return nil, ErrNeverFires
		}
		return out, nil
	}
	return nil, fmt.Errorf("unsupported schedule type %T", s)
}

// Location is the time zone the schedule's fields are read in (UTC for
// @every and without CRON_TZ).
func (s *Schedule) Location() *time.Location { return s.loc }

// Every is the period of an @every schedule, 0 for the others.
func (s *Schedule) Every() time.Duration { return s.every }

// Next returns the first tick strictly after t, in the schedule's zone,
// or the zero time when there is none within five years.
func (s *Schedule) Next(t time.Time) time.Time {
	if s.every > 0 {
		n := t.UnixMilli() / s.every.Milliseconds()
		return time.UnixMilli((n + 1) * s.every.Milliseconds()).In(s.loc)
	}
	return s.spec.Next(t.In(s.loc))
}

// Prev returns the last tick at or before t, or the zero time when there
// is none within about ten years.
func (s *Schedule) Prev(t time.Time) time.Time {
	if s.every > 0 {
		p := s.every.Milliseconds()
		return time.UnixMilli(t.UnixMilli() / p * p).In(s.loc)
	}
	// Back off doubling until a tick lies in (t-d, t], then walk forward:
	// the walk is bounded by the ticks of about twice the last gap.
	for d := time.Second; d < 10*366*24*time.Hour; d *= 2 {
		n := s.spec.Next(t.Add(-d).In(s.loc))
		if n.IsZero() || n.After(t) {
			continue
		}
		for {
			m := s.spec.Next(n)
			if m.IsZero() || m.After(t) {
				return n
			}
			n = m
		}
	}
	return time.Time{}
}

// String is the schedule as written.
func (s *Schedule) String() string { return strings.TrimSpace(s.src) }

// claim modes, ARGV of the claim script: how a tick late by more than Late
// is treated, and a tick for an entry without a record.
const (
	modeEnqueue = "e" // enqueue, however late (latest, all)
	modeOnTime  = "o" // enqueue only on time, else move the record only and count it missed (none)
	modeNew     = "n" // a new entry's first tick: enqueue only on time, else move the record only, counted nowhere
)

// tickClaim is one tick to claim for an entry.
type tickClaim struct {
	at   time.Time
	mode string
}

// due returns the ticks to claim for an entry with schedule s and policy
// (cu, max), given its last claimed tick (zero: no record yet) and now on
// Redis' clock, oldest first. Every tick within Late of now is on time and
// claimed whatever the policy: a holder whose round came late (a loaded
// machine, a slow Redis) finds two or more ticks due at once, and must not
// count the older ones as missed while holders ran. The policy decides
// only the ticks older than Late, the ones nobody could claim: latest, the
// newest of them when no tick is on time; none, the newest recorded
// without a job; all, the newest max of all the ticks due, in order.
func due(s *Schedule, cu CatchUp, max int, last, now time.Time) []tickClaim {
	t := s.Prev(now)
	if t.IsZero() || !last.IsZero() && !t.After(last) {
		return nil
	}
	if last.IsZero() {
		// A new entry: its latest tick, on time or only recorded (not
		// missed: nobody was to claim it), so that adding an entry does
		// not fire it for a tick long past.
		return []tickClaim{{t, modeNew}}
	}
	mode := modeEnqueue
	if cu == CatchUpNone {
		mode = modeOnTime
	}
	var out []tickClaim // newest first
	for ; !t.IsZero() && t.After(last); t = s.Prev(t.Add(-time.Millisecond)) {
		onTime := now.Sub(t) <= Late
		if !onTime && (cu == CatchUpAll && len(out) >= max || cu != CatchUpAll && len(out) > 0) {
			break
		}
		out = append(out, tickClaim{t, mode})
		if !onTime && cu != CatchUpAll {
			break
		}
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// MinGap is the shortest time between two of the n ticks after from: the
// period of an @every schedule, the tightest spacing of the others (0 when
// the schedule has fewer than two ticks in five years).
func (s *Schedule) MinGap(from time.Time, n int) time.Duration {
	if s.every > 0 {
		return s.every
	}
	var gap time.Duration
	t := s.Next(from)
	for i := 1; i < n && !t.IsZero(); i++ {
		u := s.Next(t)
		if u.IsZero() {
			break
		}
		if d := u.Sub(t); gap == 0 || d < gap {
			gap = d
		}
		t = u
	}
	return gap
}
