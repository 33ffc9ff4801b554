package cli

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/baton-run/baton/internal/config"
	"github.com/baton-run/baton/work"
	"github.com/spf13/pflag"
)

const queuesUsage = `Usage: baton queues [flags]

List every queue in the Redis database with its jobs: waiting, pending,
scheduled, retrying, dead and done, and who paused it, when and why (baton
pause), so a mistyped queue name is obvious.
It only reads (SCAN, never KEYS).

{{flags}}
Example:
  baton queues
  baton queues --json | jq -r '.[].queue'
`

// queueRow is one queue in queues output.
type queueRow struct {
	Queue string `json:"queue"`
	*work.Counts
}

// queuesFlags builds queues's flag set.
func queuesFlags() (*pflag.FlagSet, *jsonOpts) {
	fs := flagSet("queues")
	return fs, new(jsonOpts).bind(fs, config.Bind(fs, redisKeys...), "print one JSON array")
}

func runQueues(ctx context.Context, e *env, args []string) error {
	fs, o := queuesFlags()
	cf, asJSON := o.cf, &o.asJSON
	if err := parse(e, fs, queuesUsage, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("run 'baton queues --help'", "queues: unexpected argument %q", fs.Arg(0))
	}
	_, rdb, err := loadAndConnect(ctx, e, cf, 2)
	if err != nil {
		return err
	}
	defer rdb.Close()
	names, err := work.Queues(ctx, rdb)
	if err != nil {
		return fmt.Errorf("list queues: %w", err)
	}
	rows := make([]queueRow, 0, len(names))
	for _, q := range names {
		c, err := work.ReadCounts(ctx, rdb, q)
		if err != nil {
			return err
		}
		rows = append(rows, queueRow{q, c})
	}
	if *asJSON {
		return writeJSON(e, rows)
	}
	if len(rows) == 0 {
		fmt.Fprintln(e.Stdout, "no queues in this Redis database")
		return nil
	}
	tw := tabwriter.NewWriter(e.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tWAITING\tPENDING\tSCHEDULED\tRETRYING\tDEAD\tDONE\tPAUSED")
	for _, r := range rows {
		p := "-"
		if r.Paused != nil {
			p = r.Paused.String()
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", r.Queue, r.Waiting, r.Pending, r.Scheduled, r.Retrying, r.Dead, r.Done, p)
	}
	return tw.Flush()
}
