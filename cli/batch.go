package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/baton-run/baton/internal/config"
	"github.com/baton-run/baton/work"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/pflag"
)

const batchUsage = `Usage: baton batch open [--callback PAYLOAD] [--callback-queue Q] [--name NAME] [--on-success-only]
       baton batch close ID
       baton batch [show] ID [--json]
       baton batch list [--json]

A batch is a set of jobs of one queue with a callback job: once the batch
is closed and every job in it is settled (done, or dead for any reason),
the callback job is enqueued, exactly once, with BATON_BATCH (the batch id)
and BATON_BATCH_SUMMARY (JSON: id, name, queue, total, done, dead, the
first 1,000 dead job ids). open prints a new batch's id; 'baton enqueue
--batch ID' adds jobs to it; close says no more will come (an empty batch
closed fires its callback at once). ID shows the batch: total, done, dead,
waiting, running, closed, the callback's job id and state. list shows the
queue's batches. 'baton enqueue --batch-callback' does open, add and close
in one call. See docs/workflows.md.

{{flags}}
Example:
  id=$(baton batch open --queue thumbs --callback 'zip /srv/thumbs' --name nightly)
  find /srv/img -name '*.jpg' | baton enqueue --queue thumbs --batch "$id" --quiet
  baton batch close --queue thumbs "$id"
  baton batch --queue thumbs "$id"
`

// batchVerbs are batch's first arguments besides an id.
var batchVerbs = []string{"open", "close", "show", "list"}

// batchOpts are batch's flags.
type batchOpts struct {
	jsonOpts
	cb batchCallbackFlags
}

// batchCallbackFlags are the callback's flags, shared by batch open and
// enqueue (whose names carry a batch- prefix).
type batchCallbackFlags struct {
	callback, queue, name string
	successOnly           bool
}

// bind adds the flags to fs, their names prefixed with prefix.
func (b *batchCallbackFlags) bind(fs *pflag.FlagSet, prefix string) {
	fs.StringVar(&b.callback, prefix+"callback", "", "the batch's callback job: its payload, run once the batch is complete")
	fs.StringVar(&b.queue, prefix+"callback-queue", "", "the callback job's queue (default: the batch's)")
	fs.StringVar(&b.name, prefix+"name", "", "the batch's name, shown by 'baton batch' and in the summary")
	fs.BoolVar(&b.successOnly, "on-success-only", false, "run the callback only when no job of the batch died (else dead-letter it as batch_failed)")
}

// set reports whether any callback flag was given (names with prefix).
func (b *batchCallbackFlags) set(fs *pflag.FlagSet, prefix string) bool {
	return fs.Changed(prefix+"callback") || fs.Changed(prefix+"callback-queue") || fs.Changed(prefix+"name") || fs.Changed("on-success-only")
}

// options checks the callback flags against max_payload and returns the
// batch's options: a usage error (exit 2) before anything is written.
func (b *batchCallbackFlags) options(fs *pflag.FlagSet, prefix string, maxPayload int) ([]work.BatchOption, error) {
	var opts []work.BatchOption
	if fs.Changed(prefix + "callback") {
		if len(b.callback) > maxPayload {
			return nil, usagef("raise max_payload, or pass a reference (a path, a URL) instead of the data",
				"batch: the callback's payload is %d bytes, over max_payload (%d); nothing written", len(b.callback), maxPayload)
		}
		if b.queue != "" && !validQueue(b.queue) {
			return nil, usagef("", "batch: --%scallback-queue %q: not a queue name", prefix, b.queue)
		}
		opts = append(opts, work.BatchCallback([]byte(b.callback), b.queue))
	} else if fs.Changed(prefix+"callback-queue") || fs.Changed("on-success-only") {
		return nil, usagef("add --"+prefix+"callback PAYLOAD", "batch: --%scallback-queue and --on-success-only need --%scallback", prefix, prefix)
	}
	if b.name != "" {
		opts = append(opts, work.BatchName(b.name))
	}
	if b.successOnly {
		opts = append(opts, work.OnSuccessOnly())
	}
	return opts, nil
}

// validQueue reports whether q can name a queue: no braces (the hash tag),
// no blank.
func validQueue(q string) bool {
	return q != "" && !strings.ContainsAny(q, "{} \t\r\n")
}

// batchFlags builds batch's flag set.
func batchFlags() (*pflag.FlagSet, *batchOpts) {
	fs := flagSet("batch")
	o := new(batchOpts)
	o.bind(fs, config.Bind(fs, config.Connection, "max_payload"), "print JSON (show, list)")
	o.cb.bind(fs, "")
	return fs, o
}

func runBatch(ctx context.Context, e *env, args []string) error {
	fs, o := batchFlags()
	if err := parse(e, fs, batchUsage, args); err != nil {
		return err
	}
	rest := fs.Args()
	if len(rest) == 0 {
		return usagef("run 'baton batch --help'", "batch: say open, close, list, or a batch id")
	}
	verb, ids := rest[0], rest[1:]
	if verb != "open" && verb != "close" && verb != "show" && verb != "list" {
		verb, ids = "show", rest
	}
	switch {
	case verb == "open" || verb == "list":
		if len(ids) > 0 {
			return usagef("", "batch %s takes no id", verb)
		}
	case len(ids) != 1:
		return usagef("", "batch %s takes one batch id", verb)
	case !work.ValidBatchID(ids[0]):
		return usagef("a batch id looks like b1a2b3c4d5e6f7, as 'batch open' printed it", "batch: %q is not a batch id", ids[0])
	}
	if verb != "open" && o.cb.set(fs, "") {
		return usagef("", "batch %s: the callback flags go with open", verb)
	}
	cfg, err := o.cf.Load(e.Getenv)
	if err != nil {
		return err
	}
	var opts []work.BatchOption
	if verb == "open" {
		if opts, err = o.cb.options(fs, "", cfg.MaxPayload); err != nil {
			return err
		}
	}
	rdb, err := connect(ctx, cfg, 2)
	if err != nil {
		return err
	}
	defer rdb.Close()
	out := bufio.NewWriter(e.Stdout)
	defer out.Flush()
	switch verb {
	case "open":
		b, err := work.NewBatch(ctx, rdb, cfg.Queue, opts...)
		if err != nil {
			return err
		}
		fmt.Fprintln(out, b.ID())
		return nil
	case "close":
		b, err := work.OpenBatch(ctx, rdb, cfg.Queue, ids[0])
		if err != nil {
			return batchUsageErr(err)
		}
		return b.Close(ctx)
	case "list":
		bs, err := work.ListBatches(ctx, rdb, cfg.Queue)
		if err != nil {
			return err
		}
		if o.asJSON {
			for _, b := range bs {
				line, _ := json.Marshal(b)
				fmt.Fprintf(out, "%s\n", line)
			}
			return nil
		}
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "BATCH\tNAME\tSTATE\tTOTAL\tDONE\tDEAD\tCALLBACK")
		for _, b := range bs {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\n", b.ID, dash(b.Name), batchState(b), b.Total, b.Done, b.Dead, b.CallbackState)
		}
		return tw.Flush()
	}
	b, err := work.GetBatch(ctx, rdb, cfg.Queue, ids[0])
	if err != nil {
		return batchUsageErr(err)
	}
	if o.asJSON {
		line, _ := json.Marshal(b)
		fmt.Fprintf(out, "%s\n", line)
		return nil
	}
	printBatch(out, b)
	return nil
}

// printBatch prints a batch for people.
func printBatch(out *bufio.Writer, b *work.BatchInfo) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "batch\t%s\n", b.ID)
	if b.Name != "" {
		fmt.Fprintf(tw, "name\t%s\n", b.Name)
	}
	fmt.Fprintf(tw, "queue\t%s\n", b.Queue)
	fmt.Fprintf(tw, "state\t%s\n", batchState(b))
	fmt.Fprintf(tw, "created\t%s\n", time.UnixMilli(b.Created).UTC().Format(time.RFC3339))
	fmt.Fprintf(tw, "total\t%d\n", b.Total)
	fmt.Fprintf(tw, "done\t%d\n", b.Done)
	fmt.Fprintf(tw, "dead\t%d\n", b.Dead)
	if !b.Complete {
		fmt.Fprintf(tw, "running\t%d\n", b.Running)
		fmt.Fprintf(tw, "waiting\t%d\n", b.Waiting)
	}
	cb := b.CallbackState
	switch {
	case !b.Callback:
	case b.CallbackID != "":
		cb = fmt.Sprintf("%s, job %s in queue %s", b.CallbackState, b.CallbackID, b.CallbackQueue)
	default:
		cb = fmt.Sprintf("%s, in queue %s", b.CallbackState, b.CallbackQueue)
	}
	if b.OnSuccessOnly {
		cb += " (on success only)"
	}
	fmt.Fprintf(tw, "callback\t%s\n", cb)
	if b.Summary != nil && len(b.Summary.DeadIDs) > 0 {
		ids := b.Summary.DeadIDs
		more := ""
		if len(ids) > 10 {
			ids, more = ids[:10], fmt.Sprintf(" (and %d more)", b.Summary.Dead-10)
		}
		fmt.Fprintf(tw, "dead jobs\t%s%s\n", strings.Join(ids, " "), more)
	}
	_ = tw.Flush()
}

// batchState is open, closed (members still running) or complete.
func batchState(b *work.BatchInfo) string {
	switch {
	case b.Complete:
		return "complete"
	case b.Closed:
		return "closed"
	}
	return "open"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// batchUsageErr makes an unknown or closed batch the caller's mistake
// (exit 2).
func batchUsageErr(err error) error {
	switch {
	case errors.Is(err, work.ErrNoBatch):
		return usagef("'baton batch list' shows the queue's batches; --queue names the queue", "%v", err)
	case errors.Is(err, work.ErrBatchClosed):
		return usagef("open a new batch, or use --batch-callback", "%v", err)
	}
	return err
}

// batchEnqueue is enqueue with --batch or --batch-callback: every job of the
// call is a member of one batch, printed on stderr (and in --json lines).
type batchEnqueue struct {
	id string             // --batch: an open batch's id
	cb batchCallbackFlags // --batch-callback and friends: a new batch, closed at the end
}

// check refuses the flags a batch cannot take, before anything is
// written; it reports whether the call makes or adds to a batch.
func (b *batchEnqueue) check(fs *pflag.FlagSet) (bool, error) {
	newOne := b.cb.set(fs, "batch-")
	if !newOne && !fs.Changed("batch") {
		return false, nil
	}
	if fs.Changed("batch") && newOne {
		return false, usagef("", "enqueue: --batch adds to an open batch; the callback flags make a new one: give one or the other")
	}
	if fs.Changed("batch") && !work.ValidBatchID(b.id) {
		return false, usagef("a batch id looks like b1a2b3c4d5e6f7, as 'batch open' printed it", "enqueue: --batch %q is not a batch id", b.id)
	}
	if newOne && !fs.Changed("batch-callback") {
		return false, usagef("add --batch-callback PAYLOAD", "enqueue: --batch-callback-queue, --batch-name and --on-success-only need --batch-callback")
	}
	for _, f := range []string{"in", "at", "unique-key", "unique-for", "after"} {
		if fs.Changed(f) {
			return false, usagef("", "enqueue: --%s cannot go with a batch: its jobs are enqueued to run now, unblocked, with no unique key", f)
		}
	}
	return true, nil
}

// send enqueues the payloads as one batch's members and reports each job.
func (b *batchEnqueue) send(ctx context.Context, e *env, fs *pflag.FlagSet, rdb redis.UniversalClient, cfg *config.Config, payloads [][]byte, opts []work.Option, report func(id, batch string)) error {
	var bopts []work.BatchOption
	if !fs.Changed("batch") {
		var err error
		if bopts, err = b.cb.options(fs, "batch-", cfg.MaxPayload); err != nil {
			return err
		}
	}
	msgs := make([]work.Message, len(payloads))
	for i, p := range payloads {
		msgs[i] = work.Message{Payload: p, Options: opts}
	}
	var bt *work.Batch
	var err error
	if fs.Changed("batch") {
		bt, err = work.OpenBatch(ctx, rdb, cfg.Queue, b.id)
	} else {
		bt, err = work.NewBatch(ctx, rdb, cfg.Queue, bopts...)
	}
	if err != nil {
		return batchUsageErr(err)
	}
	if !fs.Changed("batch") {
		fmt.Fprintf(e.Stderr, "batch %s\n", bt.ID())
	}
	var ids []string
	if fs.Changed("batch") {
		ids, err = bt.Add(ctx, msgs...)
	} else {
		ids, err = bt.AddAndClose(ctx, msgs...)
	}
	for _, id := range ids {
		report(id, bt.ID())
	}
	if err != nil {
		return batchUsageErr(fmt.Errorf("enqueue: %d jobs added to batch %s before: %w", len(ids), bt.ID(), err))
	}
	return nil
}
