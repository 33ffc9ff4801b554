package cli

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/baton-run/baton/internal/config"
	"github.com/baton-run/baton/periodic"
	"github.com/spf13/pflag"
)

const periodicUsage = `Usage: baton periodic [flags]

List the queue's [[periodic]] entries, from the config, with what Redis
says of them: each entry's schedule, time zone, next tick (on Redis'
clock), the last tick claimed, the last job enqueued with its tick, the
ticks missed (claimed too late for catch_up) and those skipped by
overlap = "skip". It
only reads. Every holder of the queue enqueues the entries' jobs, once per
tick fleet-wide (docs/periodic.md).

{{flags}}
Example:
  # /etc/baton/reports.toml
  #   [[periodic]]
  #   name = "nightly"
  #   schedule = "CRON_TZ=Europe/Berlin 30 2 * * *"
  #   payload = "{\"report\": \"sales\"}"
  baton periodic --config /etc/baton/reports.toml
  baton periodic --config /etc/baton/reports.toml --json | jq -r '.[].last_job'
`

func periodicFlags() (*pflag.FlagSet, *jsonOpts) {
	fs := flagSet("periodic")
	return fs, new(jsonOpts).bind(fs, config.Bind(fs, append([]string{"queue"}, redisKeys...)...), "print one JSON array")
}

func runPeriodic(ctx context.Context, e *env, args []string) error {
	fs, o := periodicFlags()
	if err := parse(e, fs, periodicUsage, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("run 'baton periodic --help'", "periodic: unexpected argument %q", fs.Arg(0))
	}
	cfg, rdb, err := loadAndConnect(ctx, e, o.cf, 2)
	if err != nil {
		return err
	}
	defer rdb.Close()
	entries, err := cfg.PeriodicEntries() // checked by Load
	if err != nil {
		return err
	}
	rows, err := periodic.List(ctx, rdb, cfg.Queue, entries)
	if err != nil {
		return err
	}
	if o.asJSON {
		return writeJSON(e, rows)
	}
	if len(rows) == 0 {
		fmt.Fprintf(e.Stdout, "no [[periodic]] entries in the config of queue %s\n", cfg.Queue)
		return nil
	}
	when := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.Format(time.RFC3339)
	}
	tw := tabwriter.NewWriter(e.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ENTRY\tSCHEDULE\tZONE\tNEXT TICK\tLAST TICK\tLAST JOB\tITS TICK\tMISSED\tSKIPPED")
	for _, r := range rows {
		job := r.LastJob
		if job == "" {
			job = "-"
		}
		skipped := "-" // overlap allow: never skips
		if r.Overlap == periodic.OverlapSkip {
			skipped = fmt.Sprint(r.Skipped)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", r.Name, r.Schedule, r.TimeZone, when(r.Next), when(r.LastTick), job, when(r.LastJobTick), r.Missed, skipped)
	}
	return tw.Flush()
}
