package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/baton-run/baton/history"
	"github.com/baton-run/baton/internal/config"
	qstatus "github.com/baton-run/baton/internal/status"
	"github.com/baton-run/baton/work"
	"github.com/spf13/pflag"
)

const statusUsage = `Usage: baton status [flags]

Show every run and standby slot (held or free, pid, host, since, until, jobs
done, current job; a persistent holder's children under it: pid, jobs
served, resident memory), the queue's last slot events (takes, promotions,
retirements, deaths, dead letters), how long fewer than k run slots were
held and the mean gap between a slot's holders, and its jobs: waiting (never
delivered), pending (running or left by a holder that died), scheduled
(delayed by enqueue --in or --at), blocked (enqueued --after jobs not yet
done; shown when there are some), retrying (failed, due later), dead (see
'baton dead') and done (all time), and the [[periodic]] entries (next tick,
last tick claimed and its job, ticks missed and skipped; a warning when a
tick went unclaimed). It also says when Redis is at maxmemory or may evict
jobs, and when cron has not started baton on a host for more than 2C + 4s
(each candidate marks its firing; holders publish it: a cron line per
host, cron_fires in --json; 'baton periodic forget-host' forgets a retired
host). With lock_backend redis the slots are the fleet's leases (fencing
token, time left), and the line of standbys waiting for a run lease
follows, first in line first: position, standby slot, host, pid and time
waited (standby_line in --json). It reads the holders' records and the
kernel's lock table (/proc/locks) and never takes a slot: a slot locked
without a readable record shows as "held, record unreadable" (no_record in
--json). Exit 1 when Redis cannot be reached (flock slots are still shown; a
fleet's leases, in Redis, are not).

{{flags}}
Example:
  baton status --config /etc/baton/thumbs.toml
  baton status --config /etc/baton/thumbs.toml --json | jq '.jobs.waiting'
`

// slotStatus and statusReport are status's output (internal/status, shared
// with baton web).
type (
	slotStatus   = qstatus.Slot
	statusReport = qstatus.Report
)

// readKeys are the settings of the commands that read a queue and its
// slots (status, metrics, web, job): where Redis is, and where the slots are.
var readKeys = []string{config.Connection, "lock_dir", "lock_backend", "slots", "standby_slots", "min_slots"}

// statusFlags builds status's flag set.
func statusFlags() (*pflag.FlagSet, *statusOpts) {
	fs := flagSet("status")
	o := new(statusOpts)
	o.bind(fs, config.Bind(fs, readKeys...), "print one JSON object (with --watch: one per line, per refresh)")
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
	if fs.NArg() > 0 { // not a queue name: that is --queue
		return usagef("the queue is a flag: baton status --queue "+fs.Arg(0), "status: unexpected argument %q", fs.Arg(0))
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
	rdb, cerr := connect(ctx, cfg, 1)
	if cerr != nil {
		rep, _, err = qstatus.Read(ctx, cfg, nil)
		if err != nil {
			return nil, nil, err
		}
		rep.Error = cerr.Error()
		return rep, cerr, nil
	}
	defer rdb.Close()
	return qstatus.Read(ctx, cfg, rdb)
}

func printStatus(w io.Writer, cfg *config.Config, rep *statusReport) {
	if j := rep.Jobs; j != nil && j.Paused != nil {
		fmt.Fprintf(w, "queue %s on %s: PAUSED (%s); no job starts until 'baton resume'\n", rep.Queue, cfg.RedisName(), j.Paused)
	} else {
		fmt.Fprintf(w, "queue %s on %s\n", rep.Queue, cfg.RedisName())
	}
	if j := rep.Jobs; j != nil {
		fmt.Fprintf(w, "jobs  %d waiting, %d pending, %d scheduled, %d retrying, %d dead, %d done\n", j.Waiting, j.Pending, j.Scheduled, j.Retrying, j.Dead, j.Done)
		if j.Blocked > 0 {
			fmt.Fprintf(w, "      %d blocked: enqueued --after jobs not yet done\n", j.Blocked)
		}
		if b := j.ByPriority; b != nil {
			fmt.Fprintf(w, "      waiting by priority: %d high, %d normal, %d low\n", b["high"], b["normal"], b["low"])
		}
		if j.OldestWaiting >= 100*time.Millisecond {
			fmt.Fprintf(w, "      the oldest waiting job has waited %s\n", j.OldestWaiting.Round(100*time.Millisecond))
		}
		fmt.Fprintln(w)
	} else {
		fmt.Fprintf(w, "jobs  unknown (%s)\n\n", redisCause(cfg, rep))
	}
	printKeys(w, rep.Keys)
	if rep.Rate != "" {
		fmt.Fprintf(w, "rate  at most %s jobs started, across all holders", rep.Rate)
		if rep.RecentRate != nil {
			fmt.Fprintf(w, "; %.1f/s over the last 3s", *rep.RecentRate)
		}
		fmt.Fprint(w, "\n\n")
	}
	if c := rep.Coverage; c != nil && (c.Held >= 0 || c.BelowK > 0) {
		fmt.Fprintf(w, "cover below k=%d for %s all time", c.Keep, c.BelowK.Round(100*time.Millisecond))
		for _, by := range []string{history.ByStandby, history.ByCandidate} {
			if g, ok := c.Gaps[by]; ok {
				fmt.Fprintf(w, "; %d takes by a %s, mean gap %s", g.Count, by, g.Mean().Round(time.Millisecond))
			}
		}
		fmt.Fprint(w, "\n\n")
	}
	if len(rep.Periodic) > 0 {
		for i, p := range rep.Periodic {
			head := "      "
			if i == 0 {
				head = "periodic"
			}
			last := "never claimed"
			if !p.LastTick.IsZero() {
				last = "last " + p.LastTick.Format(time.RFC3339)
			}
			if p.LastJob != "" {
				last += ", job " + p.LastJob
			}
			fmt.Fprintf(w, "%-8s %s (%s): next %s, %s; %d missed, %d skipped\n", head, p.Name, p.Schedule, p.Next.Format(time.RFC3339), last, p.Missed, p.Skipped)
		}
		fmt.Fprintln(w)
	}
	for i, f := range rep.CronFires {
		head := "      "
		if i == 0 {
			head = "cron"
		}
		silent := ""
		if f.Silent {
			silent = fmt.Sprintf(": SILENT, more than %s", rep.CronSilentAfter)
		}
		fmt.Fprintf(w, "%-8s %s: started baton at %s, %s ago%s\n", head, f.Host, f.Last.Format(time.RFC3339), time.Since(f.Last).Round(time.Second), silent)
		if i == len(rep.CronFires)-1 {
			fmt.Fprintln(w)
		}
	}
	if sc := rep.Scale; sc != nil {
		fmt.Fprintf(w, "scale %d holders now, kept %d (min_slots), at most %d (slots)\n", sc.Holders, sc.MinSlots, sc.Slots)
		if l := sc.Last; l != nil {
			fmt.Fprintf(w, "      last %s, by run-%d at %s (%s ago)\n", l.Decision, l.Slot, clock(&l.At), time.Since(l.At).Round(time.Second))
		}
		fmt.Fprintln(w)
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
	lease := cfg.LockBackend == "redis"
	if lease && len(rep.Run) == 0 {
		// Read leaves the slots out when Redis cannot be read: the
		// fleet's leases are there, not in this host's lock dir.
		fmt.Fprintf(w, "slots unknown (the fleet's leases are in Redis: %s)\n", redisCause(cfg, rep))
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	// empty is the cells after STATE a row without a record leaves blank,
	// every one tab-terminated so that the columns stay aligned below it.
	empty := "\t\t\t\t\t\t"
	if lease {
		empty += "\t\t"
	}
	if lease {
		fmt.Fprintln(tw, "SLOT\tSTATE\tPID\tHOST\tSINCE\tUNTIL\tJOBS\tCURRENT\tFENCE\tEXPIRES IN")
	} else {
		fmt.Fprintln(tw, "SLOT\tSTATE\tPID\tHOST\tSINCE\tUNTIL\tJOBS\tCURRENT")
	}
	row := func(name string, s slotStatus) {
		if !s.Held {
			fmt.Fprintf(tw, "%s\tfree%s\n", name, empty)
			return
		}
		if s.NoRecord {
			fmt.Fprintf(tw, "%s\theld, record unreadable\t%d%s\n", name, s.PID, empty[1:])
			return
		}
		cur := ""
		if s.Job != "" && s.JobSince != nil {
			cur = s.Job + " for " + time.Since(*s.JobSince).Round(100*time.Millisecond).String()
			if s.Progress != nil {
				cur += " (" + s.Progress.String() + ")"
			}
		}
		state := "held"
		switch {
		case !lease && s.Target != "" && s.Target != cfg.RedisTarget():
			state = "held by another deployment (" + s.Target + ")"
		case s.Draining:
			state = "held, draining"
		}
		if lease {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%d\t%s\t%d\t%s\n", name, state, s.PID, s.Host, clock(s.Since), clock(s.Until), s.JobsDone, cur,
				s.Fence, (time.Duration(s.ExpiresIn) * time.Millisecond).String())
		} else {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%d\t%s\n", name, state, s.PID, s.Host, clock(s.Since), clock(s.Until), s.JobsDone, cur)
		}
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
	if lease && rep.Jobs != nil {
		printLine(w, rep)
	}
	if len(rep.Events) > 0 {
		fmt.Fprintln(w, "\nevents")
		for _, e := range rep.Events {
			fmt.Fprintf(w, "  %s %s\n", clock(&e.At), e)
		}
	}
}

// redisCause is why rep has no jobs: Redis's error without the address the
// first line already gives (a wrong password is not "unreachable").
func redisCause(cfg *config.Config, rep *statusReport) string {
	if rep.Error == "" {
		return "redis unreachable"
	}
	return strings.TrimPrefix(rep.Error, redisAt(cfg))
}

// printLine prints the fleet's line of standbys waiting for a run lease.
func printLine(w io.Writer, rep *statusReport) {
	stale := ""
	if rep.LineStale > 0 {
		stale = fmt.Sprintf(" (and %d left by standbys gone, dropped at the next hand-over)", rep.LineStale)
	}
	if len(rep.Line) == 0 {
		fmt.Fprintf(w, "\nline  no standby waiting for a run lease%s\n", stale)
		return
	}
	fmt.Fprintf(w, "\nline  %d standbys waiting for a run lease, first in line first%s\n", len(rep.Line), stale)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  POS\tSLOT\tHOST\tPID\tWAITED")
	for _, l := range rep.Line {
		fmt.Fprintf(tw, "  %d\tstandby-%d\t%s\t%d\t%s\n", l.Position, l.Slot, l.Host, l.PID,
			(time.Duration(l.WaitedMS) * time.Millisecond).Round(100*time.Millisecond))
	}
	tw.Flush()
}

func clock(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Local().Format("15:04:05")
}
