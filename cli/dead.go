package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/baton-run/baton/internal/config"
	"github.com/baton-run/baton/internal/progress"
	"github.com/baton-run/baton/work"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/pflag"
)

const deadUsage = `Usage: baton dead list [--json] [--limit N]
       baton dead show [--json] ID
       baton dead requeue ID... | --all
       baton dead purge ID... | --all

Dead letters are jobs that will not run again: they failed max_attempts
times (failed, timeout), killed their holder every time (crashed), could
not run at all (too_large, malformed), or were cancelled (baton cancel).
A job enqueued --after one that died is dead too (dependency_failed):
requeue the one it waits for first, or both with --all (oldest first).
list shows them oldest first without their payloads; show prints one with
its payload; requeue puts jobs back in the queue with their attempts
starting over; purge deletes them. On a terminal, requeue and purge of
many show a progress line on stderr and a summary (--quiet: neither).

{{flags}}
Example:
  baton dead list --config /etc/baton/thumbs.toml
  baton dead show --config /etc/baton/thumbs.toml 1795277752922-0
  baton dead requeue --config /etc/baton/thumbs.toml --all
`

// deadVerbs are what dead does, its first argument.
var deadVerbs = []string{"list", "show", "requeue", "purge"}

// deadOpts are dead's flags.
type deadOpts struct {
	jsonOpts
	all, quiet bool
	limit      int64
}

// deadFlags builds dead's flag set.
func deadFlags() (*pflag.FlagSet, *deadOpts) {
	fs := flagSet("dead")
	o := new(deadOpts)
	o.bind(fs, config.Bind(fs, config.Connection), "print JSON (list, show)")
	fs.BoolVar(&o.all, "all", false, "every dead letter (requeue, purge)")
	fs.Int64Var(&o.limit, "limit", 0, "show at most this many (list; 0: all)")
	fs.BoolVarP(&o.quiet, "quiet", "q", false, "no progress line (requeue, purge: shown on a terminal for many)")
	return fs, o
}

func runDead(ctx context.Context, e *env, args []string) error {
	fs, o := deadFlags()
	cf, asJSON, all, limit := o.cf, &o.asJSON, &o.all, &o.limit
	if err := parse(e, fs, deadUsage, args); err != nil {
		return err
	}
	rest := fs.Args()
	if len(rest) == 0 {
		return usagef("run 'baton dead --help'", "dead: say list, show, requeue or purge")
	}
	verb, ids := rest[0], rest[1:]
	switch verb {
	case "list":
		if len(ids) > 0 || *all {
			return usagef("", "dead list takes no ids")
		}
	case "show":
		if len(ids) != 1 {
			return usagef("", "dead show takes one id")
		}
	case "requeue", "purge":
		if (len(ids) == 0) == !*all {
			return usagef("name dead-letter ids, or --all", "dead %s: give ids or --all, not both or neither", verb)
		}
	default:
		return usagef("run 'baton dead --help'", "dead: unknown action %q", verb)
	}
	cfg, rdb, err := loadAndConnect(ctx, e, cf, 2)
	if err != nil {
		return err
	}
	defer rdb.Close()
	d := &deadCmd{e: e, rdb: rdb, q: cfg.Queue, json: *asJSON, quiet: o.quiet}
	switch verb {
	case "list":
		return d.list(ctx, *limit)
	case "show":
		return d.show(ctx, ids[0])
	case "requeue":
		return d.requeue(ctx, ids, *all)
	default:
		return d.purge(ctx, ids, *all)
	}
}

type deadCmd struct {
	e     *env
	rdb   redis.UniversalClient
	q     string
	json  bool
	quiet bool
}

// meter starts the progress line of requeue or purge (on a terminal,
// without --quiet): of the ids given, or of every dead letter there is.
func (d *deadCmd) meter(ctx context.Context, verb string, ids []string, all bool) *progress.Meter {
	total := int64(len(ids))
	if all {
		total, _ = d.rdb.XLen(ctx, work.KeysFor(d.q).Dead).Result()
	}
	return progress.Start(rawStderr(d.e), !d.quiet, progress.Options{Label: "dead " + verb, Noun: "dead letters", Total: total})
}

func (d *deadCmd) list(ctx context.Context, limit int64) error {
	dls, err := work.ListDead(ctx, d.rdb, d.q, "", limit)
	if err != nil {
		return fmt.Errorf("list dead letters: %w", err)
	}
	if d.json {
		for i := range dls {
			dls[i].Payload = nil // list never prints payloads; show does
		}
		return writeJSON(d.e, dls)
	}
	if len(dls) == 0 {
		fmt.Fprintf(d.e.Stdout, "no dead letters in queue %s\n", d.q)
		return nil
	}
	tw := tabwriter.NewWriter(d.e.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tREASON\tATTEMPTS\tFAILED\tBYTES\tERROR")
	for _, dl := range dls {
		size := "-"
		if dl.Payload != nil {
			size = strconv.Itoa(len(dl.Payload))
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", dl.JobID, dl.Reason, dl.Attempts,
			dl.FailedAt.Local().Format(time.DateTime), size, firstLine(dl.Error, 60))
	}
	return tw.Flush()
}

func (d *deadCmd) show(ctx context.Context, id string) error {
	dl, err := work.GetDead(ctx, d.rdb, d.q, id)
	if err != nil {
		return err
	}
	if d.json {
		return writeJSON(d.e, dl)
	}
	w := d.e.Stdout
	fmt.Fprintf(w, "job:       %s\nreason:    %s\nattempts:  %d\n", dl.JobID, dl.Reason, dl.Attempts)
	fmt.Fprintf(w, "enqueued:  %s\n", dl.Enqueued().Local().Format(time.DateTime))
	fmt.Fprintf(w, "failed:    %s (last entry %s, dead letter %s)\n", dl.FailedAt.Local().Format(time.DateTime), dl.Entry, dl.ID)
	fmt.Fprintf(w, "error:     %s\n", strings.ReplaceAll(dl.Error, "\n", "\n           "))
	if dl.Payload == nil {
		fmt.Fprintln(w, "payload:   none (malformed entry)")
		return nil
	}
	fmt.Fprintf(w, "payload:   %d bytes\n%s\n", len(dl.Payload), dl.Payload)
	return nil
}

func (d *deadCmd) requeue(ctx context.Context, ids []string, all bool) error {
	m := d.meter(ctx, "requeue", ids, all)
	defer m.Finish()
	out := m.Writer(d.e.Stdout)
	n := 0
	each := func(id string) error {
		job, err := work.RequeueDead(ctx, d.rdb, d.q, id)
		m.Add(1)
		if err != nil {
			return err
		}
		n++
		fmt.Fprintf(out, "requeued %s\n", job)
		return nil
	}
	err := d.forEach(ctx, ids, all, each)
	if all && err == nil {
		fmt.Fprintf(out, "requeued %d jobs\n", n)
	}
	return err
}

// purgeChunk is how many ids one PurgeDead call takes, so that a purge of
// many ids shows its progress.
const purgeChunk = 100

func (d *deadCmd) purge(ctx context.Context, ids []string, all bool) error {
	var n int64
	var err error
	if all {
		n, err = work.PurgeAllDead(ctx, d.rdb, d.q) // one step: no progress to show
	} else {
		n, err = d.purgeIDs(ctx, ids)
	}
	if err != nil {
		return fmt.Errorf("purge dead letters: %w", err)
	}
	fmt.Fprintf(d.e.Stdout, "purged %d dead letters\n", n)
	if !all && n < int64(len(ids)) {
		return fmt.Errorf("%d of the ids named no dead letter", int64(len(ids))-n)
	}
	return nil
}

// purgeIDs purges ids in chunks, with a progress line. Every id is
// checked first, so a malformed one purges nothing, as one PurgeDead call.
func (d *deadCmd) purgeIDs(ctx context.Context, ids []string) (int64, error) {
	for _, id := range ids {
		if id == "" || !work.IsJobID(id) && strings.Trim(id, "0123456789") != "" {
			return 0, fmt.Errorf("%q is not a dead-letter id (they look like 1700000000000-0): %w", id, work.ErrNoDeadLetter)
		}
	}
	m := d.meter(ctx, "purge", ids, false)
	defer m.Finish()
	var n int64
	for start := 0; start < len(ids); start += purgeChunk {
		chunk := ids[start:min(start+purgeChunk, len(ids))]
		k, err := work.PurgeDead(ctx, d.rdb, d.q, chunk...)
		if err != nil {
			return n, fmt.Errorf("%w (%d purged before)", err, n)
		}
		n += k
		m.Add(len(chunk))
	}
	return n, nil
}

// forEach calls fn for each id, or for every dead letter with all. It goes
// on past an id it cannot use, says so, and returns the first error.
func (d *deadCmd) forEach(ctx context.Context, ids []string, all bool, fn func(string) error) error {
	if all {
		var first error
		for after := ""; ; {
			dls, err := work.ListDead(ctx, d.rdb, d.q, after, 100)
			if err != nil {
				return err
			}
			if len(dls) == 0 {
				return first
			}
			for _, dl := range dls {
				if err := fn(dl.ID); errors.Is(err, work.ErrNoPayload) {
					fmt.Fprintf(d.e.Stderr, "baton: skipped %v\n", err)
				} else if err != nil && first == nil {
					first = err
				}
			}
			after = dls[len(dls)-1].ID
		}
	}
	var first error
	for _, id := range ids {
		if err := fn(id); err != nil && first == nil {
			first = err
		}
	}
	return first
}

func writeJSON(e *env, v any) error {
	enc := json.NewEncoder(e.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func firstLine(s string, n int) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " …"
	}
	if len(s) > n {
		s = s[:n] + "…"
	}
	return s
}
