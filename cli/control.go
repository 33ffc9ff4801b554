package cli

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/user"
	"strings"
	"time"

	"github.com/baton-run/baton/internal/config"
	"github.com/baton-run/baton/internal/progress"
	"github.com/baton-run/baton/work"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/pflag"
)

const pauseUsage = `Usage: baton pause [--for D] [--reason TEXT] [flags]

Pause the queue: within a second every holder of it, on every host, stops
starting jobs. Jobs already running finish; holders keep their slots and
standbys stay; enqueue goes on, and due retries and delayed jobs still move
into the queue, to wait there. The pause is kept in Redis (who paused it,
from which host, when and why, shown by status, queues and metrics), so it
outlives every holder, and a Redis restart with AOF. --for ends it by
itself after D, on Redis' clock; else it lasts until 'baton resume'. A
pause of a queue that has no keys warns (a typo?) and pauses it anyway.

{{flags}}
Example:
  baton pause --config /etc/baton/thumbs.toml --reason "db migration"
  baton pause --queue thumbs --for 15m --reason "image store down"
`

const resumeUsage = `Usage: baton resume [flags]

Resume a paused queue: within a second its holders start jobs again. Exit
0 also when the queue was not paused (it says so).

{{flags}}
Example:
  baton resume --config /etc/baton/thumbs.toml
`

const cancelUsage = `Usage: baton cancel [--reason TEXT] [--from FILE] ID...

Cancel jobs by the id enqueue printed; ids also one per line from FILE, or
from stdin with '-' (an id named twice is cancelled once). A waiting,
scheduled or retrying job is taken out at once and dead-lettered with
reason "cancelled" (its unique key freed), so 'baton dead requeue ID'
brings it back. A running job is stopped by the
holder running it, on whichever host, within a second: an exec job's
process group gets SIGTERM, then SIGKILL after shutdown_grace; a persistent
child is killed and replaced; a Go handler's context is cancelled (cause
work.ErrCancelled). It is dead-lettered as cancelled, never retried, and
cancel waits for that. A job that finishes before the cancel reaches it
stays done: one outcome, never both. Exit 0 when every job was cancelled;
1 when one was done, dead or unknown (an id of another queue is unknown),
or still running when the wait ended (shutdown_grace + 5s). A blocked job
(enqueue --after) is taken out like a waiting one; the jobs enqueued
--after a cancelled job are dead-lettered as dependency_failed. On a
terminal, many ids show a progress line on stderr and a summary (--quiet:
neither).

{{flags}}
Example:
  baton cancel --config /etc/baton/thumbs.toml 1795277752922-0
  baton cancel --queue thumbs --reason "bad batch" --from ids.txt
  grep -o '^[0-9]*-[0-9]*' ids.log | baton cancel --queue thumbs -
`

// controlKeys are the settings of pause, resume and cancel.
var controlKeys = []string{config.Connection}

// pauseOpts are pause's flags.
type pauseOpts struct {
	cf     *config.Flags
	d      time.Duration
	reason string
}

// pauseFlags builds pause's flag set.
func pauseFlags() (*pflag.FlagSet, *pauseOpts) {
	fs := flagSet("pause")
	o := &pauseOpts{cf: config.Bind(fs, controlKeys...)}
	fs.DurationVar(&o.d, "for", 0, "resume by itself after this long, on Redis' clock (0: until baton resume)")
	fs.StringVar(&o.reason, "reason", "", "why, shown with the pause")
	return fs, o
}

func runPause(ctx context.Context, e *env, args []string) error {
	fs, o := pauseFlags()
	if err := parse(e, fs, pauseUsage, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("the queue is a flag: baton pause --queue "+fs.Arg(0), "pause: unexpected argument %q", fs.Arg(0))
	}
	if fs.Changed("for") && o.d <= 0 {
		return usagef("", "pause: --for %s is not positive (give e.g. --for 15m; without --for the pause lasts until baton resume)", o.d)
	}
	if fs.Changed("for") && o.d < time.Millisecond {
		return usagef("", "pause: --for %s is under 1ms, the expiry's unit (give e.g. --for 15m)", o.d)
	}
	cfg, rdb, err := loadAndConnect(ctx, e, o.cf, 1)
	if err != nil {
		return err
	}
	defer rdb.Close()
	warnIfNoQueue(ctx, e, rdb, cfg.Queue)
	p := work.Pause{User: whoAmI(e), Host: hostname(), Reason: o.reason}
	if err := work.PauseQueue(ctx, rdb, cfg.Queue, p, o.d); err != nil {
		return err
	}
	if o.d > 0 {
		fmt.Fprintf(e.Stdout, "queue %s paused for %s: no holder starts a job; running jobs finish\n", cfg.Queue, o.d)
	} else {
		fmt.Fprintf(e.Stdout, "queue %s paused until 'baton resume': no holder starts a job; running jobs finish\n", cfg.Queue)
	}
	return nil
}

// warnIfNoQueue warns, as status does, when q has no keys in this
// database, naming the queues there are.
func warnIfNoQueue(ctx context.Context, e *env, rdb redis.Cmdable, q string) {
	qs, err := work.Queues(ctx, rdb)
	if err != nil {
		return
	}
	for _, name := range qs {
		if name == q {
			return
		}
	}
	list := "none"
	if len(qs) > 0 {
		list = strings.Join(qs, ", ")
	}
	fmt.Fprintf(e.Stderr, "warning: queue %s has no keys in this Redis database (a typo?); queues here: %s\n", q, list)
}

func runResume(ctx context.Context, e *env, args []string) error {
	fs, cf := resumeFlags()
	if err := parse(e, fs, resumeUsage, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("the queue is a flag: baton resume --queue "+fs.Arg(0), "resume: unexpected argument %q", fs.Arg(0))
	}
	cfg, rdb, err := loadAndConnect(ctx, e, cf, 1)
	if err != nil {
		return err
	}
	defer rdb.Close()
	was, err := work.Resume(ctx, rdb, cfg.Queue)
	if err != nil {
		return err
	}
	if was {
		fmt.Fprintf(e.Stdout, "queue %s resumed: holders start jobs again within a second\n", cfg.Queue)
	} else {
		fmt.Fprintf(e.Stdout, "queue %s was not paused\n", cfg.Queue)
	}
	return nil
}

// resumeFlags builds resume's flag set.
func resumeFlags() (*pflag.FlagSet, *config.Flags) {
	fs := flagSet("resume")
	return fs, config.Bind(fs, controlKeys...)
}

// cancelOpts are cancel's flags.
type cancelOpts struct {
	jsonOpts
	reason, from string
	quiet        bool
}

// cancelFlags builds cancel's flag set.
func cancelFlags() (*pflag.FlagSet, *cancelOpts) {
	fs := flagSet("cancel")
	o := new(cancelOpts)
	o.bind(fs, config.Bind(fs, append(controlKeys, "dead_max", "shutdown_grace")...), "print one JSON object per id, one per line")
	fs.StringVar(&o.reason, "reason", "", "why, kept in the dead letter")
	fs.StringVar(&o.from, "from", "", "read more ids from this file, one per line ('-': stdin)")
	fs.BoolVarP(&o.quiet, "quiet", "q", false, "no progress line (shown on a terminal for many ids)")
	return fs, o
}

func runCancel(ctx context.Context, e *env, args []string) error {
	fs, o := cancelFlags()
	if err := parse(e, fs, cancelUsage, args); err != nil {
		return err
	}
	ids, err := cancelIDs(e, fs.Args(), o.from)
	if err != nil {
		return err
	}
	if len(ids) == 0 {
		return usagef("run 'baton cancel --help'", "cancel: give at least one job id")
	}
	cfg, rdb, err := loadAndConnect(ctx, e, o.cf, 1)
	if err != nil {
		return err
	}
	defer rdb.Close()
	why := "cancelled by " + whoAmI(e) + "@" + hostname()
	if o.reason != "" {
		why += ": " + o.reason
	}
	// On a terminal, many ids show their progress on stderr.
	m := progress.Start(rawStderr(e), !o.quiet, progress.Options{Label: "cancel", Noun: "ids", Total: int64(len(ids))})
	defer m.Finish()
	out := *e
	out.Stdout = m.Writer(e.Stdout)
	failed := 0
	for i, id := range ids {
		wctx, cancel := context.WithTimeout(ctx, cfg.ShutdownGrace.D()+5*time.Second)
		r, err := work.CancelAndWait(wctx, rdb, cfg.Queue, work.CancelOptions{Reason: why, DeadMax: cfg.DeadMax}, id)
		cancel()
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil && r.Outcome != work.CancelRequested:
			return fmt.Errorf("%w (%d of %d ids done)", err, i, len(ids))
		}
		if r.Outcome != work.CancelDone {
			failed++
		}
		m.Add(1)
		if o.asJSON {
			if err := writeJSON(&out, r); err != nil {
				return err
			}
			continue
		}
		fmt.Fprintln(out.Stdout, describeCancel(&r))
	}
	if failed > 0 {
		return &exitError{code: ExitRuntime, err: fmt.Errorf("%d of %d jobs not cancelled", failed, len(ids))}
	}
	return nil
}

// describeCancel says in one line what became of one id.
func describeCancel(r *work.CancelResult) string {
	switch {
	case r.Outcome == work.CancelDone && r.State == work.StateRunning:
		return fmt.Sprintf("%s cancelled: stopped while running; dead letter %s ('baton dead requeue %s' runs it again)", r.ID, r.Letter, r.ID)
	case r.Outcome == work.CancelDone:
		return fmt.Sprintf("%s cancelled: was %s; dead letter %s ('baton dead requeue %s' brings it back)", r.ID, r.State, r.Letter, r.ID)
	case r.Outcome == work.CancelRequested:
		return fmt.Sprintf("%s still running on %s: cancel requested; its holder has not stopped it yet (stopped? frozen?); it is stopped when a holder next runs it", r.ID, r.Slot)
	case r.State == work.StateDone || r.State == work.StateUnknown && r.Letter == "":
		if r.State == work.StateDone {
			return fmt.Sprintf("%s not cancelled: it is done", r.ID)
		}
		return fmt.Sprintf("%s not cancelled: unknown on this queue (done and not kept, or never enqueued here)", r.ID)
	default:
		return fmt.Sprintf("%s not cancelled: it is %s", r.ID, r.State)
	}
}

// cancelIDs are the ids from the command line, where "-" reads stdin, and
// from the file from names ("-": stdin), one per line or separated by
// spaces; blank lines and lines starting with # are skipped.
func cancelIDs(e *env, args []string, from string) ([]string, error) {
	var ids []string
	stdin := false
	read := func(r io.Reader, name string) error {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			ids = append(ids, strings.Fields(line)...)
		}
		if err := sc.Err(); err != nil {
			return fmt.Errorf("cancel: read ids from %s: %w", name, err)
		}
		return nil
	}
	fromStdin := func() error {
		if stdin {
			return nil // read once
		}
		stdin = true
		return read(e.Stdin, "stdin")
	}
	for _, a := range args {
		if a == "-" {
			if err := fromStdin(); err != nil {
				return nil, err
			}
			continue
		}
		ids = append(ids, a)
	}
	switch from {
	case "":
	case "-":
		if err := fromStdin(); err != nil {
			return nil, err
		}
	default:
		f, err := os.Open(from)
		if err != nil {
			return nil, usagef("give a readable file of ids, one per line", "cancel: %v", err)
		}
		defer f.Close()
		if err := read(f, from); err != nil {
			return nil, err
		}
	}
	seen := make(map[string]bool, len(ids))
	uniq := ids[:0]
	for _, id := range ids {
		if !work.IsJobID(id) {
			return nil, usagef("job ids look like 1700000000000-0 (enqueue prints them)", "cancel: %q is not a job id", id)
		}
		if !seen[id] { // an id named twice is cancelled once, not reported as dead the second time
			seen[id] = true
			uniq = append(uniq, id)
		}
	}
	return uniq, nil
}

// whoAmI is the user running baton, for a pause's or a cancel's record.
func whoAmI(e *env) string {
	if u := e.Getenv("SUDO_USER"); u != "" {
		return u
	}
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	if u := e.Getenv("USER"); u != "" {
		return u
	}
	return "?"
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return "?"
	}
	return h
}
