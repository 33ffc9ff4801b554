package cli

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/baton-run/baton/internal/config"
	"github.com/baton-run/baton/internal/progress"
	qstatus "github.com/baton-run/baton/internal/status"
	"github.com/baton-run/baton/work"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"github.com/spf13/pflag"
)

const enqueueUsage = `Usage: baton enqueue [flags] [PAYLOAD...]

Add one job per PAYLOAD argument or, with none, one job per line of standard
input (the newline is not part of the payload; empty lines are skipped).
Each job's id is printed on its own line: the job's id for life, which
BATON_JOB_ID, status and 'baton dead' use. Jobs are sent 1000 per round
trip. Every payload is checked first: one over max_payload adds nothing
(exit 2) unless --skip-bad, which adds the others and reports the bad ones
by line number. On a terminal, a large input shows a progress line on
stderr (count, rate, time left) and a summary; --quiet shows neither.

Job options (each applies to every job of the call):
  --in D            run after D (e.g. 10m); status counts it as scheduled
  --at TIME         run at TIME (RFC 3339, e.g. 2026-12-01T09:00:00Z); a past time runs now
  --unique-key K    add nothing while a job with key K is waiting, scheduled,
                    running or retrying: print that job's id instead, exit 0
  --unique-for D    hold the unique key at most D (default: until done or dead)
  --timeout D       this job's own job_timeout
  --max-attempts N  this job's own max_attempts
  --priority P      high, normal (default) or low: a holder takes waiting
                    high jobs before normal ones, normal before low
  --after ID[,ID…]  wait, blocked, until every job named is done, then run;
                    when one is dead-lettered, so is this job (reason
                    dependency_failed). ID is a job of this queue, or
                    QUEUE:ID one of another queue (Redis Cluster too: its
                    release is forwarded, once). An id that is not on its
                    queue (a done job counts only within retention), or not a
                    job id, adds nothing (exit 2)
  --key K           the job's key (a tenant, a customer): at most
                    key_concurrency of a key's jobs run at once, and keys
                    take turns (docs/keys.md)


Batches (docs/workflows.md): the jobs of the call as one batch whose
callback job runs once every one of them is done or dead; the batch id is
printed on stderr. No --in, --at or --unique-key with a batch.
  --batch-callback P        the callback job's payload: makes the batch
  --batch-callback-queue Q  the callback's queue (default: this one)
  --batch-name NAME         the batch's name
  --on-success-only         run the callback only if no job died (else it
                            is dead-lettered as batch_failed)
  --batch ID                add the jobs to an open batch (baton batch open)

{{flags}}
Example:
  baton enqueue --queue thumbs /srv/img/1.jpg /srv/img/2.jpg
  find /srv/img -name '*.jpg' | baton enqueue --queue thumbs --quiet
  baton enqueue --queue mail --in 10m --unique-key welcome-42 '{"user":42}'
  baton enqueue --queue mail --priority high '{"reset":42}'
  a=$(baton enqueue --queue build fetch); b=$(baton enqueue --queue build --after "$a" compile)
  baton enqueue --queue build --after "$a,$b" package
  baton enqueue --queue deploy --after "build:$b" ship    # after a job of queue build
  ls /srv/img/*.jpg | baton enqueue --queue thumbs --batch-callback 'zip /srv/thumbs' --quiet
  baton enqueue --queue api --key customer-42 '{"call":"refund"}'
`

// enqueueChunk is how many jobs go in one pipeline round trip.
const enqueueChunk = 1000

// enqueueFlags are enqueue's flags: the per-job options as given on the
// command line, and how to print.
type enqueueFlags struct {
	jsonOpts
	quiet, skipBad         bool
	in, uniqueFor, timeout time.Duration
	at, uniqueKey, prio    string
	maxAttempts            int
	after                  []string
	batch                  batchEnqueue // --batch, --batch-callback…: batch.go
	key                    string       // --key (enqueue_key.go)
}

// newEnqueueFlags builds enqueue's flag set.
func newEnqueueFlags() (*pflag.FlagSet, *enqueueFlags) {
	fs := flagSet("enqueue")
	f := new(enqueueFlags)
	cf := config.Bind(fs, config.Connection, "max_payload", "enqueue_wait_replicas", "enqueue_wait_timeout")
	fs.BoolVarP(&f.quiet, "quiet", "q", false, "do not print job ids, nor progress")
	f.bind(fs, cf, `print one JSON object per job: {"id": ..., "duplicate": bool}`)
	fs.BoolVar(&f.skipBad, "skip-bad", false, "add the good jobs and report the bad ones (exit 0)")
	fs.DurationVar(&f.in, "in", 0, "run after this delay")
	fs.StringVar(&f.at, "at", "", "run at this time (RFC 3339)")
	fs.StringVar(&f.uniqueKey, "unique-key", "", "add nothing while a job with this key is queued")
	fs.DurationVar(&f.uniqueFor, "unique-for", 0, "hold the unique key at most this long")
	fs.DurationVar(&f.timeout, "timeout", 0, "this job's own job_timeout")
	fs.IntVar(&f.maxAttempts, "max-attempts", 0, "this job's own max_attempts (default: the queue's)")
	fs.StringVar(&f.prio, "priority", "normal", "high, normal or low")
	fs.StringSliceVar(&f.after, "after", nil, "run only once these jobs are done (ids, comma-separated; QUEUE:ID for another queue's)")
	fs.StringVar(&f.batch.id, "batch", "", "add the jobs to this open batch ('baton batch open')")
	f.batch.cb.bind(fs, "batch-")
	fs.StringVar(&f.key, "key", "", "the job's key: at most key_concurrency of a key's jobs run at once")
	return fs, f
}

func runEnqueue(ctx context.Context, e *env, args []string) error {
	fs, f := newEnqueueFlags()
	cf, quiet, asJSON, skipBad := f.cf, &f.quiet, &f.asJSON, &f.skipBad
	if err := parse(e, fs, enqueueUsage, args); err != nil {
		return err
	}
	opts, err := f.options(fs.Changed("unique-key"), fs.Changed("max-attempts"))
	if err != nil {
		return err
	}
	if opts, err = f.keyOption(opts, fs.Changed("key")); err != nil {
		return err
	}
	inBatch, err := f.batch.check(fs)
	if err != nil {
		return err
	}
	cfg, err := cf.Load(e.Getenv)
	if err != nil {
		return err
	}
	payloads, lines, err := readPayloads(e, fs.Args())
	if err != nil {
		return err
	}
	payloads, err = checkPayloads(e, payloads, lines, cfg.MaxPayload, *skipBad)
	if err != nil {
		return err
	}
	rdb, err := connect(ctx, cfg, 2)
	if err != nil {
		return err
	}
	defer rdb.Close()
	// Spans are flushed after the ids are printed (defers run last first).
	defer stopTracing(startTracing(ctx, e, plainWarn(e, "enqueue")), enqueueFlush, zerolog.Nop())
	ctx = callerTrace(ctx, e)
	// On a terminal, a large stdin shows its progress on stderr.
	m := progress.Start(rawStderr(e), !*quiet, progress.Options{Label: "enqueue", Noun: "jobs", Total: int64(len(payloads))})
	defer m.Finish()
	out := bufio.NewWriter(m.Writer(e.Stdout))
	defer out.Flush()
	if inBatch {
		return f.batch.send(ctx, e, fs, rdb, cfg, payloads, opts, func(id, batch string) {
			switch {
			case *asJSON:
				fmt.Fprintf(out, "{\"id\":%q,\"duplicate\":false,\"batch\":%q}\n", id, batch)
			case !*quiet:
				fmt.Fprintln(out, id)
			}
		})
	}
	return sendJobs(ctx, rdb, cfg, payloads, opts, e.Stderr, func(id string, dup bool) {
		m.Add(1)
		switch {
		case *asJSON:
			fmt.Fprintf(out, "{\"id\":%q,\"duplicate\":%t}\n", id, dup)
		case !*quiet:
			fmt.Fprintln(out, id)
		}
	})
}

// options turns the flags into job options, naming the flag of a bad value.
func (f *enqueueFlags) options(uniqueSet, attemptsSet bool) ([]work.Option, error) {
	var opts []work.Option
	switch {
	case f.in < 0:
		return nil, usagef("", "enqueue: --in %s: must not be negative", f.in)
	case f.in > 0 && f.at != "":
		return nil, usagef("", "enqueue: --in and --at: give one of them")
	case f.in > 0:
		opts = append(opts, work.In(f.in))
	case f.at != "":
		t, err := time.Parse(time.RFC3339, f.at)
		if err != nil {
			return nil, usagef("e.g. --at 2026-12-01T09:00:00Z or --at 2026-12-01T10:00:00+01:00",
				"enqueue: --at %q: want an RFC 3339 time", f.at)
		}
		opts = append(opts, work.At(t))
	}
	switch {
	case uniqueSet && f.uniqueKey == "":
		return nil, usagef("", "enqueue: --unique-key: must not be empty")
	case f.uniqueKey != "":
		opts = append(opts, work.UniqueKey(f.uniqueKey))
	}
	switch {
	case f.uniqueFor < 0 || f.uniqueFor > 0 && f.uniqueFor < time.Millisecond:
		return nil, usagef("", "enqueue: --unique-for %s: must be at least 1ms (0: until the job is done or dead)", f.uniqueFor)
	case f.uniqueFor > 0 && f.uniqueKey == "":
		return nil, usagef("add --unique-key K", "enqueue: --unique-for needs --unique-key")
	case f.uniqueFor > 0:
		opts = append(opts, work.UniqueFor(f.uniqueFor))
	}
	switch {
	case f.timeout < 0:
		return nil, usagef("", "enqueue: --timeout %s: must be positive", f.timeout)
	case f.timeout > 0:
		opts = append(opts, work.Timeout(f.timeout))
	}
	switch {
	case attemptsSet && (f.maxAttempts < 1 || f.maxAttempts > 1000):
		return nil, usagef("", "enqueue: --max-attempts %d: must be between 1 and 1000", f.maxAttempts)
	case attemptsSet:
		opts = append(opts, work.MaxAttempts(f.maxAttempts))
	}
	p, err := work.ParsePriority(f.prio)
	if err != nil || f.prio == "" {
		return nil, usagef("", "enqueue: --priority %q: want high, normal or low", f.prio)
	}
	if p != work.PriorityNormal {
		opts = append(opts, work.WithPriority(p))
	}
	if f.after != nil {
		o, err := afterOption(f.after)
		if err != nil {
			return nil, err
		}
		opts = append(opts, o)
	}
	return opts, nil
}

// readPayloads takes the arguments, or else one payload per stdin line, with
// their line (or argument) numbers.
func readPayloads(e *env, args []string) ([][]byte, []int, error) {
	var payloads [][]byte
	var lines []int
	if len(args) > 0 {
		for i, a := range args {
			payloads, lines = append(payloads, []byte(a)), append(lines, i+1)
		}
		return payloads, lines, nil
	}
	in := bufio.NewReaderSize(e.Stdin, 64<<10)
	for n := 1; ; n++ {
		line, err := in.ReadBytes('\n')
		line = bytes.TrimSuffix(line, []byte("\n"))
		if len(line) > 0 {
			payloads, lines = append(payloads, line), append(lines, n)
		}
		if errors.Is(err, io.EOF) {
			return payloads, lines, nil
		}
		if err != nil {
			return nil, nil, fmt.Errorf("read stdin: %w", err)
		}
	}
}

// checkPayloads refuses payloads over max: all of them (nothing is sent), or
// with skip only the bad ones, each reported by its line (lines[i] is
// payloads[i]'s).
func checkPayloads(e *env, payloads [][]byte, lines []int, max int, skip bool) ([][]byte, error) {
	good := payloads[:0:0]
	for i, p := range payloads {
		if len(p) <= max {
			good = append(good, p)
			continue
		}
		if !skip {
			return nil, usagef("raise max_payload, pass a reference (a path, a URL) instead of the data, or add --skip-bad",
				"enqueue: payload %d is %d bytes, over max_payload (%d); nothing added", lines[i], len(p), max)
		}
		fmt.Fprintf(e.Stderr, "baton: enqueue: payload %d is %d bytes, over max_payload (%d): skipped\n", lines[i], len(p), max)
	}
	return good, nil
}

// sendJobs enqueues payloads in chunks and reports each job's id. With
// enqueue_wait_replicas, each chunk ends with WAIT; a chunk that too few
// replicas confirmed is still reported (its jobs are queued) and fails the
// call.
func sendJobs(ctx context.Context, rdb redis.Cmdable, cfg *config.Config, payloads [][]byte, opts []work.Option, warn io.Writer, report func(id string, dup bool)) error {
	added := 0
	for start := 0; start < len(payloads); start += enqueueChunk {
		chunk := payloads[start:min(start+enqueueChunk, len(payloads))]
		msgs := make([]work.Message, len(chunk))
		for i, p := range chunk {
			msgs[i] = work.Message{Payload: p, Options: opts}
		}
		ids, err := work.EnqueueManyReplicated(ctx, rdb, cfg.Queue, msgs, cfg.EnqueueWaitReplicas, cfg.EnqueueWaitTimeout.D())
		dups := map[int]bool{}
		var de *work.DuplicateError
		if errors.As(err, &de) {
			for _, i := range de.Jobs {
				dups[i] = true
			}
			err = nil
		}
		if err, ok := chainErr(err, ids, start); ok {
			return err
		}
		if dependencyFailed(warn, ids, err) {
			err = nil
		}
		for i, id := range ids {
			if id != "" {
				report(id, dups[i])
				added++
			}
		}
		if errors.Is(err, work.ErrNotReplicated) {
			return &hintError{msg: fmt.Sprintf("enqueue: %s added, the last %d %v: a failover now could lose them", qstatus.Jobs(int64(added)), len(chunk), err),
				hint: "check the replicas (INFO replication), or lower enqueue_wait_replicas; enqueuing again may run these jobs twice", err: err}
		}
		if err != nil {
			return fmt.Errorf("enqueue: %s added before: %w", qstatus.Jobs(int64(added)), err)
		}
	}
	return nil
}
