package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/baton-run/baton/internal/config"
	"github.com/baton-run/baton/lock"
	"github.com/baton-run/baton/work"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/pflag"
)

const statusUsage = `Usage: baton status [flags]

Show every run and standby slot (held or free, pid, host, since, until, jobs
done, current job) and the queue's jobs: waiting (never delivered), pending
(running or left by a holder that died), scheduled (delayed by enqueue --in
or --at), retrying (failed, due later), dead (see 'baton dead') and done (all
time). It also says when Redis is at maxmemory or may evict jobs. It reads
the holders' records and never takes a slot. Exit 1 when Redis cannot be
reached (the slots are still shown).

{{flags}}
Example:
  baton status --config /etc/baton/thumbs.toml
  baton status --config /etc/baton/thumbs.toml --json | jq '.jobs.waiting'
`

// slotStatus is one slot in status output.
type slotStatus struct {
	Slot     int        `json:"slot"`
	Held     bool       `json:"held"`
	PID      int        `json:"pid,omitempty"`
	Host     string     `json:"host,omitempty"`
	Since    *time.Time `json:"since,omitempty"`
	Until    *time.Time `json:"until,omitempty"`
	JobsDone int64      `json:"jobs_done"`
	Job      string     `json:"job,omitempty"`
	JobSince *time.Time `json:"job_since,omitempty"`
}

// jobCounts is the queue in status output.
type jobCounts struct {
	Waiting   int64 `json:"waiting"`   // in the stream, never delivered
	Pending   int64 `json:"pending"`   // delivered, not yet acknowledged
	Scheduled int64 `json:"scheduled"` // delayed by their producer (enqueue --in, --at)
	Retrying  int64 `json:"retrying"`  // failed, waiting for their retry time
	Dead      int64 `json:"dead"`      // dead letters kept
	Done      int64 `json:"done"`      // acknowledged, all time
}

type statusReport struct {
	Queue   string       `json:"queue"`
	Run     []slotStatus `json:"run"`
	Standby []slotStatus `json:"standby"`
	Jobs    *jobCounts   `json:"jobs"`
	Memory  *work.Memory `json:"redis_memory,omitempty"`
	Rate    string       `json:"rate_limit,omitempty"`
	Error   string       `json:"error,omitempty"`
}

// statusFlags builds status's flag set.
func statusFlags() (*pflag.FlagSet, *jsonOpts) {
	fs := flagSet("status")
	return fs, new(jsonOpts).bind(fs, config.Bind(fs, config.Connection, "lock_dir", "slots", "standby_slots", "rate_limit"), "print one JSON object")
}

func runStatus(ctx context.Context, e *env, args []string) error {
	fs, o := statusFlags()
	cf, asJSON := o.cf, &o.asJSON
	if err := parse(e, fs, statusUsage, args); err != nil {
		return err
	}
	cfg, err := cf.Load(e.Getenv)
	if err != nil {
		return err
	}
	rep := statusReport{Queue: cfg.Queue, Run: []slotStatus{}, Standby: []slotStatus{}, Rate: cfg.RateLimit}
	runSet, sbSet, err := slotSets(cfg)
	if err != nil {
		return err
	}
	if rep.Run, err = slotsOf(runSet); err != nil {
		return err
	}
	if sbSet != nil {
		if rep.Standby, err = slotsOf(sbSet); err != nil {
			return err
		}
	}
	jobs, mem, jerr := queueCounts(ctx, cfg)
	rep.Jobs, rep.Memory = jobs, mem
	if jerr != nil {
		rep.Error = jerr.Error()
	}
	if *asJSON {
		if err := writeJSON(e, rep); err != nil {
			return err
		}
	} else {
		printStatus(e.Stdout, cfg, &rep)
	}
	if jerr != nil {
		return jerr
	}
	return nil
}

func slotsOf(s *lock.FileSet) ([]slotStatus, error) {
	recs, err := s.Records()
	if err != nil {
		return nil, err
	}
	out := make([]slotStatus, len(recs))
	for i, r := range recs {
		out[i] = slotStatus{Slot: r.Slot, Held: r.Held, PID: r.PID, Host: r.Host, JobsDone: r.JobsDone, Job: r.Job,
			Since: timePtr(r.Since), Until: timePtr(r.Until), JobSince: timePtr(r.JobSince)}
	}
	return out, nil
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// queueCounts reads the queue's counts and Redis's memory in one round
// trip. Acknowledged entries are deleted, so the stream holds exactly the
// waiting and pending ones.
func queueCounts(ctx context.Context, cfg *config.Config) (*jobCounts, *work.Memory, error) {
	rdb, err := connect(ctx, cfg, 1)
	if err != nil {
		return nil, nil, err
	}
	defer rdb.Close()
	k := work.KeysFor(cfg.Queue)
	var xlen *redis.IntCmd
	var groups *redis.XInfoGroupsCmd
	var done *redis.StringCmd
	var scheduled, retrying, dead *redis.IntCmd
	var mem work.Memory
	_, _ = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		xlen = p.XLen(ctx, k.Stream)
		groups = p.XInfoGroups(ctx, k.Stream)
		scheduled = p.ZCard(ctx, k.Scheduled)
		retrying = p.ZCard(ctx, k.Retry)
		dead = p.XLen(ctx, k.Dead)
		done = p.HGet(ctx, k.Stats, "done")
		return nil
	})
	if err := xlen.Err(); err != nil {
		return nil, nil, fmt.Errorf("read queue: %w", err)
	}
	mem, err = work.ReadMemory(ctx, rdb)
	if err != nil {
		return nil, nil, fmt.Errorf("read redis memory: %w", err)
	}
	c := &jobCounts{}
	for _, g := range groups.Val() { // an error here means no stream yet
		if g.Name == work.Group {
			c.Pending = g.Pending
		}
	}
	c.Waiting = xlen.Val() - c.Pending
	c.Scheduled, c.Retrying, c.Dead = scheduled.Val(), retrying.Val(), dead.Val()
	c.Done, _ = strconv.ParseInt(done.Val(), 10, 64)
	return c, &mem, nil
}

func printStatus(w io.Writer, cfg *config.Config, rep *statusReport) {
	fmt.Fprintf(w, "queue %s on %s\n", rep.Queue, config.RedactURL(cfg.RedisURL))
	if j := rep.Jobs; j != nil {
		fmt.Fprintf(w, "jobs  %d waiting, %d pending, %d scheduled, %d retrying, %d dead, %d done\n\n", j.Waiting, j.Pending, j.Scheduled, j.Retrying, j.Dead, j.Done)
	} else {
		fmt.Fprintf(w, "jobs  unknown (redis unreachable)\n\n")
	}
	if rep.Rate != "" {
		fmt.Fprintf(w, "rate  at most %s jobs started, across all holders\n\n", rep.Rate)
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
		cur := ""
		if s.Job != "" && s.JobSince != nil {
			cur = s.Job + " for " + time.Since(*s.JobSince).Round(100*time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\theld\t%d\t%s\t%s\t%s\t%d\t%s\n", name, s.PID, s.Host, clock(s.Since), clock(s.Until), s.JobsDone, cur)
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
