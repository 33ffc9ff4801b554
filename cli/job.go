package cli

import (
	"context"
	"fmt"
	"github.com/baton-run/baton/holder"
	"strings"
	"time"

	"github.com/baton-run/baton/internal/config"
	"github.com/baton-run/baton/internal/proc"
	qstatus "github.com/baton-run/baton/internal/status"
	"github.com/baton-run/baton/work"
	"github.com/spf13/pflag"
)

const jobUsage = `Usage: baton job [flags] ID

Say where a job is, by the id enqueue printed: waiting (and how many
waiting jobs are ahead of it), running (on which slot, since when, which
attempt; with the holder's pid when it runs on this host, or with
lock_backend redis its pid and host wherever it runs, and the job's own
process when the holder runs on this host), blocked (enqueued with
--after: the jobs it still waits for), scheduled (due
when), retrying (attempt, due when), dead (why), done (when; only with
retention > 0, which keeps done jobs that long), or unknown: a done job not
kept (retention 0, the default, or its record expired or was dropped) or
a job never enqueued on this queue. A running job shows the progress it
last reported (work.Progress, a persistent child's progress frame, an exec
job's BATON_PROGRESS_FD), a done job the size of its result. It only
reads. Exit 0 when the job was found, 1 when unknown.

With --result it writes a done job's result, the raw bytes it handed back
(work.SetResult, a persistent child's return value, an exec job's
BATON_RESULT_FILE), to stdout and nothing else; exit 1 when the job is not
done or its result is not kept (results are kept with the done records,
for retention). --json carries the result base64-encoded in "result".

{{flags}}
Example:
  baton job --config /etc/baton/thumbs.toml 1795277752922-0
  baton job --queue thumbs --json 1795277752922-0 | jq -r .state
  baton job --queue thumbs --result 1795277752922-0 > thumb.png
`

// jobFlags builds job's flag set.
func jobFlags() (*pflag.FlagSet, *jobOpts) {
	fs := flagSet("job")
	o := &jobOpts{jsonOpts: new(jsonOpts).bind(fs, config.Bind(fs, readKeys...), "print one JSON object")}
	fs.BoolVar(&o.result, "result", false, "write the done job's result, raw, to stdout")
	return fs, o
}

// jobOpts are job's options.
type jobOpts struct {
	*jsonOpts
	result bool // --result
}

func runJob(ctx context.Context, e *env, args []string) error {
	fs, o := jobFlags()
	cf, asJSON, asResult := o.cf, &o.asJSON, &o.result
	if err := parse(e, fs, jobUsage, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("run 'baton job --help'", "job: give one job id")
	}
	if *asResult && *asJSON {
		return usagef("--json carries the result base64-encoded", "job: --result and --json together")
	}
	cfg, rdb, err := loadAndConnect(ctx, e, cf, 1)
	if err != nil {
		return err
	}
	defer rdb.Close()
	if *asResult {
		b, err := work.Result(ctx, rdb, cfg.Queue, fs.Arg(0))
		if err != nil {
			return err
		}
		_, err = e.Stdout.Write(b)
		return err
	}
	loc, err := work.Locate(ctx, rdb, cfg.Queue, fs.Arg(0))
	if err != nil {
		return fmt.Errorf("job %s: %w", fs.Arg(0), err)
	}
	holder := localHolder(cfg, loc)
	var progress *work.ProgressNote
	var result []byte
	switch loc.State {
	case work.StateRunning:
		if n, ok, err := work.ProgressOf(ctx, rdb, cfg.Queue, loc.ID); err == nil && ok {
			progress = &n
		}
	case work.StateDone:
		result, _ = work.Result(ctx, rdb, cfg.Queue, loc.ID)
	}
	if loc.State == work.StateUnknown && !*asJSON {
		return fmt.Errorf("job %s is unknown on queue %s: done and not kept (see retention), or never enqueued here", loc.ID, cfg.Queue)
	}
	if *asJSON {
		if err := writeJSON(e, struct {
			*work.Location
			PID    int        `json:"pid,omitempty"` // the holder's
			Host   string     `json:"host,omitempty"`
			Since  *time.Time `json:"since,omitempty"`
			JobPID int        `json:"job_pid,omitempty"`
			// Progress is a running job's last progress report.
			Progress *work.ProgressNote `json:"progress,omitempty"`
			// Result is a done job's result, base64 (encoding/json).
			Result []byte `json:"result,omitempty"`
		}{loc, holder.PID, holder.Host, qstatus.TimePtr(holder.JobSince), holder.JobPID, progress, result}); err != nil {
			return err
		}
	} else {
		s := describeJob(loc, holder)
		if loc.Key != "" {
			s = describeKeyed(cfg, loc, holder)
		}
		switch {
		case progress != nil:
			s += fmt.Sprintf("; progress %s (reported %s ago)", progress, max(time.Since(progress.At).Round(100*time.Millisecond), 0))
		case result != nil:
			s += fmt.Sprintf("; result of %d bytes (baton job --result %s)", len(result), loc.ID)
		}
		fmt.Fprintln(e.Stdout, s)
	}
	if loc.State == work.StateUnknown {
		return fmt.Errorf("job %s is unknown on queue %s", loc.ID, cfg.Queue)
	}
	return nil
}

// jobHolder is the holder running a job, as its slot record says.
type jobHolder struct {
	PID  int
	Host string // fleet mode: the host it runs on
	// JobSince is when the job started, when the record names it (a holder
	// with concurrency > 1 names only its latest job).
	JobSince time.Time
	// JobPID is the job's own process, when the holder runs on this host
	// and its child with BATON_JOB_ID=<id> can be seen (exec jobs).
	JobPID int
}

// localHolder is the holder running loc, from the record of the slot its
// consumer names (holder.Consumer): a flock slot of this host, or in fleet
// mode a lease of any host. Zero when that slot is not held.
func localHolder(cfg *config.Config, loc *work.Location) (h jobHolder) {
	if loc.State != work.StateRunning {
		return h
	}
	run, _, err := slotSets(cfg)
	if err != nil {
		return h
	}
	i := 0
	for i < run.Size() && holder.Consumer(cfg, i) != loc.Consumer {
		i++
	}
	if i == run.Size() {
		return h
	}
	recs, err := run.Records()
	if err != nil || !recs[i].Held || recs[i].PID == 0 {
		return h
	}
	h.PID = recs[i].PID
	if a := holder.ActivityOf(recs[i]); a.Job == loc.ID {
		h.JobSince = a.JobSince
	}
	if cfg.LockBackend == "redis" {
		h.Host = recs[i].Host
	}
	if cfg.LockBackend != "redis" || h.Host == cfg.Host {
		h.JobPID = proc.ChildWithEnv(h.PID, "BATON_JOB_ID="+loc.ID)
	}
	return h
}

func describeJob(l *work.Location, h jobHolder) string {
	in := func(t time.Time) string {
		d := time.Until(t).Round(time.Second)
		if d <= 0 {
			return "now"
		}
		return "in " + d.String()
	}
	switch l.State {
	case work.StateWaiting:
		if l.Priority != "" {
			return fmt.Sprintf("job %s: waiting at %s priority, %d waiting jobs of that priority ahead of it (entry %s)", l.ID, l.Priority, l.Ahead, l.Entry)
		}
		return fmt.Sprintf("job %s: waiting, %d waiting jobs ahead of it (entry %s)", l.ID, l.Ahead, l.Entry)
	case work.StateRunning:
		s := fmt.Sprintf("job %s: running on %s, delivery %d of entry %s", l.ID, l.Consumer, l.Deliveries, l.Entry)
		switch {
		case h.PID > 0 && h.Host != "":
			s += fmt.Sprintf(", pid %d on host %s", h.PID, h.Host)
		case h.PID > 0:
			s += fmt.Sprintf(", pid %d", h.PID)
		}
		if !h.JobSince.IsZero() {
			s += fmt.Sprintf(", for %s", time.Since(h.JobSince).Round(100*time.Millisecond))
		} else {
			s += fmt.Sprintf(", last touched %s ago", l.Idle.Round(100*time.Millisecond))
		}
		if h.JobPID > 0 {
			s += fmt.Sprintf("; the job's process is pid %d", h.JobPID)
		}
		return s
	case work.StateBlocked:
		return describeBlocked(l)
	case work.StateScheduled:
		return fmt.Sprintf("job %s: scheduled, due %s (%s)", l.ID, l.Due.Local().Format(time.DateTime), in(l.Due))
	case work.StateRetrying:
		return fmt.Sprintf("job %s: retrying, %d runs failed, next due %s (%s)", l.ID, l.Attempts, l.Due.Local().Format(time.DateTime), in(l.Due))
	case work.StateDone:
		return fmt.Sprintf("job %s: done at %s (%s ago)", l.ID, l.DoneAt.Local().Format(time.DateTime), max(time.Since(l.DoneAt).Round(time.Second), 0))
	case work.StateDead:
		return fmt.Sprintf("job %s: dead (%s after %d attempts, %s): see 'baton dead show %s'",
			l.ID, l.Dead.Reason, l.Attempts, l.Dead.FailedAt.Local().Format(time.DateTime), l.ID)
	}
	return fmt.Sprintf("job %s: %s", l.ID, l.State)
}

// describeBlocked says what a blocked job waits for.
func describeBlocked(l *work.Location) string {
	s := fmt.Sprintf("job %s: blocked, waiting for %s", l.ID, strings.Join(l.WaitingFor, ", "))
	if len(l.WaitingFor) == 0 {
		s = fmt.Sprintf("job %s: blocked, released in a moment (the jobs it waited for are settled)", l.ID)
	}
	if !l.Due.IsZero() {
		s += fmt.Sprintf("; then due %s", l.Due.Local().Format(time.DateTime))
	}
	return s
}
