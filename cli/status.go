package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/baton-run/baton/internal/config"
	"github.com/baton-run/baton/lock"
	"github.com/baton-run/baton/work"
	"github.com/spf13/pflag"
)

const statusUsage = `Usage: baton status [flags]

Show every run and standby slot (held or free, pid, host, since, until, jobs
done, current job; a persistent holder's children under it: pid, jobs
served, resident memory) and the queue's jobs: waiting (never delivered), pending
(running or left by a holder that died), scheduled (delayed by enqueue --in
or --at), retrying (failed, due later), dead (see 'baton dead') and done (all
time). It also says when Redis is at maxmemory or may evict jobs. It reads
the holders' records and the kernel's lock table (/proc/locks) and never
takes a slot: a slot locked without a readable record shows as "held, record
unreadable" (no_record in --json). Exit 1 when Redis cannot be
reached (the slots are still shown).

{{flags}}
Example:
  baton status --config /etc/baton/thumbs.toml
  baton status --config /etc/baton/thumbs.toml --json | jq '.jobs.waiting'
`

// slotStatus is one slot in status output.
type slotStatus struct {
	Slot int  `json:"slot"`
	Held bool `json:"held"`
	// NoRecord: the slot's lock is held (per the kernel's lock table) by PID
	// but its record is missing or unreadable (a full disk, say).
	NoRecord bool       `json:"no_record,omitempty"`
	PID      int        `json:"pid,omitempty"`
	Host     string     `json:"host,omitempty"`
	Since    *time.Time `json:"since,omitempty"`
	Until    *time.Time `json:"until,omitempty"`
	JobsDone int64      `json:"jobs_done"`
	Job      string     `json:"job,omitempty"`
	JobSince *time.Time `json:"job_since,omitempty"`
	// Children: a persistent holder's worker processes (pid, jobs served,
	// resident memory in bytes).
	Children []lock.Child `json:"children,omitempty"`
}

type statusReport struct {
	Queue   string       `json:"queue"`
	Run     []slotStatus `json:"run"`
	Standby []slotStatus `json:"standby"`
	Jobs    *work.Counts `json:"jobs"`
	Memory  *work.Memory `json:"redis_memory,omitempty"`
	Rate    string       `json:"rate_limit,omitempty"`
	// Warnings are what looks wrong: a queue with no keys (a typo?), jobs
	// waiting with no holder visible here.
	Warnings []string `json:"warnings,omitempty"`
	Error    string   `json:"error,omitempty"`
}

// statusFlags builds status's flag set.
func statusFlags() (*pflag.FlagSet, *statusOpts) {
	fs := flagSet("status")
	o := new(statusOpts)
	o.bind(fs, config.Bind(fs, config.Connection, "lock_dir", "slots", "standby_slots"), "print one JSON object (with --watch: one per line, per refresh)")
	fs.BoolVar(&o.watch, "watch", false, "refresh until interrupted, with rates per second and the last slot events")
	fs.DurationVar(&o.interval, "interval", time.Second, "time between refreshes with --watch")
	return fs, o
}

// statusOpts are status's flags.
type statusOpts struct {
	jsonOpts
	watch    bool
	interval time.Duration
}

func runStatus(ctx context.Context, e *env, args []string) error {
	fs, o := statusFlags()
	cf, asJSON, watch, interval := o.cf, &o.asJSON, &o.watch, &o.interval
	if err := parse(e, fs, statusUsage, args); err != nil {
		return err
	}
	if *interval < 100*time.Millisecond {
		return usagef("", "status: --interval %s: must be at least 100ms", *interval)
	}
	cfg, err := cf.Load(e.Getenv)
	if err != nil {
		return err
	}
	if *watch {
		return watchStatus(ctx, e, cfg, *interval, *asJSON)
	}
	rep, jerr, err := readStatus(ctx, cfg)
	if err != nil {
		return err
	}
	if *asJSON {
		if err := writeJSON(e, rep); err != nil {
			return err
		}
	} else {
		printStatus(e.Stdout, cfg, rep)
	}
	return jerr
}

// readStatus reads the slots and the queue once. jerr is Redis failing (the
// slots are still there); err is the lock dir failing.
func readStatus(ctx context.Context, cfg *config.Config) (rep *statusReport, jerr, err error) {
	rep = &statusReport{Queue: cfg.Queue, Run: []slotStatus{}, Standby: []slotStatus{}, Rate: cfg.RateLimit}
	runSet, sbSet, err := slotSets(cfg)
	if err != nil {
		return nil, nil, err
	}
	if rep.Run, err = slotsOf(runSet); err != nil {
		return nil, nil, err
	}
	if sbSet != nil {
		if rep.Standby, err = slotsOf(sbSet); err != nil {
			return nil, nil, err
		}
	}
	jobs, mem, others, jerr := queueCounts(ctx, cfg)
	rep.Jobs, rep.Memory = jobs, mem
	if jerr != nil {
		rep.Error = jerr.Error()
	}
	rep.Warnings = statusWarnings(cfg, rep, others)
	return rep, jerr, nil
}

func slotsOf(s *lock.FileSet) ([]slotStatus, error) {
	recs, err := s.Records()
	if err != nil {
		return nil, err
	}
	out := make([]slotStatus, len(recs))
	for i, r := range recs {
		out[i] = slotStatus{Slot: r.Slot, Held: r.Held, NoRecord: r.NoRecord, PID: r.PID, Host: r.Host, JobsDone: r.JobsDone, Job: r.Job,
			Since: timePtr(r.Since), Until: timePtr(r.Until), JobSince: timePtr(r.JobSince), Children: r.Children}
	}
	return out, nil
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// queueCounts reads the queue's counts and Redis's memory; when the queue
// has no keys at all, also the queues that do exist (else nil).
func queueCounts(ctx context.Context, cfg *config.Config) (*work.Counts, *work.Memory, []string, error) {
	rdb, err := connect(ctx, cfg, 1)
	if err != nil {
		return nil, nil, nil, err
	}
	defer rdb.Close()
	c, err := work.ReadCounts(ctx, rdb, cfg.Queue)
	if err != nil {
		return nil, nil, nil, err
	}
	mem, err := work.ReadMemory(ctx, rdb)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("read redis memory: %w", err)
	}
	var others []string
	if c.Waiting+c.Pending+c.Scheduled+c.Retrying+c.Dead == 0 && len(c.Stats) == 0 {
		if qs, err := work.Queues(ctx, rdb); err == nil && !slices.Contains(qs, cfg.Queue) {
			others = append(qs[:0:0], qs...)
		}
	}
	return c, &mem, others, nil
}

// statusWarnings says what looks wrong in rep.
func statusWarnings(cfg *config.Config, rep *statusReport, others []string) []string {
	var w []string
	if others != nil {
		list := "none"
		if len(others) > 0 {
			list = strings.Join(others, ", ")
		}
		w = append(w, fmt.Sprintf("queue %s has no keys in this Redis database (a typo?); queues here: %s", rep.Queue, list))
	}
	held := 0
	for _, s := range rep.Run {
		if s.Held {
			held++
		}
	}
	if j := rep.Jobs; j != nil && j.Waiting+j.Pending > 0 && held == 0 {
		w = append(w, fmt.Sprintf("%d jobs waiting or pending and no holder in %s: is cron running 'baton run'? "+
			"Holders run by another user use another default lock dir (/tmp/baton-<uid>), and holders on other hosts are not visible here",
			j.Waiting+j.Pending, cfg.LockDir))
	}
	return w
}

func printStatus(w io.Writer, cfg *config.Config, rep *statusReport) {
	fmt.Fprintf(w, "queue %s on %s\n", rep.Queue, config.RedactURL(cfg.RedisURL))
	if j := rep.Jobs; j != nil {
		fmt.Fprintf(w, "jobs  %d waiting, %d pending, %d scheduled, %d retrying, %d dead, %d done\n", j.Waiting, j.Pending, j.Scheduled, j.Retrying, j.Dead, j.Done)
		if j.OldestWaiting >= 100*time.Millisecond {
			fmt.Fprintf(w, "      the oldest waiting job has waited %s\n", j.OldestWaiting.Round(100*time.Millisecond))
		}
		fmt.Fprintln(w)
	} else {
		fmt.Fprintf(w, "jobs  unknown (redis unreachable)\n\n")
	}
	if rep.Rate != "" {
		fmt.Fprintf(w, "rate  at most %s jobs started, across all holders\n\n", rep.Rate)
	}
	for _, warn := range rep.Warnings {
		fmt.Fprintf(w, "warning: %s\n", warn)
	}
	if len(rep.Warnings) > 0 {
		fmt.Fprintln(w)
	}
	if m := rep.Memory; m != nil && (m.AtLimit() || m.Evicts()) {
		if m.AtLimit() {
			fmt.Fprintf(w, "redis OUT OF MEMORY: %d of maxmemory %d bytes used; new jobs and retries are refused, holders keep acknowledging\n", m.Used, m.Max)
		}
		if m.Evicts() {
			fmt.Fprintf(w, "redis maxmemory-policy is %s: at maxmemory Redis may evict queued jobs\n", m.Policy)
		}
		fmt.Fprintf(w, "hint: %s\n\n", work.OOMHint)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SLOT\tSTATE\tPID\tHOST\tSINCE\tUNTIL\tJOBS\tCURRENT")
	row := func(name string, s slotStatus) {
		if !s.Held {
			fmt.Fprintf(tw, "%s\tfree\t\t\t\t\t\t\n", name)
			return
		}
		if s.NoRecord {
			fmt.Fprintf(tw, "%s\theld, record unreadable\t%d\t\t\t\t\t\n", name, s.PID)
			return
		}
		cur := ""
		if s.Job != "" && s.JobSince != nil {
			cur = s.Job + " for " + time.Since(*s.JobSince).Round(100*time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\theld\t%d\t%s\t%s\t%s\t%d\t%s\n", name, s.PID, s.Host, clock(s.Since), clock(s.Until), s.JobsDone, cur)
		for _, c := range s.Children {
			fmt.Fprintf(tw, "  child\tworker\t%d\t\t\t\t%d\trss %.1f MiB\n", c.PID, c.Jobs, float64(c.RSS)/(1<<20))
		}
	}
	for _, s := range rep.Run {
		row("run-"+strconv.Itoa(s.Slot), s)
	}
	for _, s := range rep.Standby {
		row("standby-"+strconv.Itoa(s.Slot), s)
	}
	tw.Flush()
}

func clock(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Local().Format("15:04:05")
}
