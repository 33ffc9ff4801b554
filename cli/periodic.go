package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/baton-run/baton/internal/config"
	"github.com/baton-run/baton/internal/cronfire"
	qstatus "github.com/baton-run/baton/internal/status"
	"github.com/baton-run/baton/periodic"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/pflag"
)

const periodicUsage = `Usage: baton periodic [flags]
       baton periodic forget-host HOST... [flags]

List the queue's [[periodic]] entries, from the config, with what Redis
says of them: each entry's schedule, time zone, next tick (on Redis'
clock), the last tick claimed, the last job enqueued with its tick, the
ticks missed (claimed too late for catch_up) and those skipped by
overlap = "skip". The
list only reads. Every holder of the queue enqueues the entries' jobs, once per
tick fleet-wide (docs/periodic.md).

forget-host HOST... forgets hosts taken out of service: their last cron
firing (or status and baton_cron_last_fire_timestamp_seconds call them
silent for ever) and their entries' fingerprint. A host whose cron still
starts baton comes back at its next firing. Exit 1 when a host was not
recorded (a typo?): the others are forgotten all the same.

{{flags}}
Example:
  # /etc/baton/reports.toml
  #   [[periodic]]
  #   name = "nightly"
  #   schedule = "CRON_TZ=Europe/Berlin 30 2 * * *"
  #   payload = "{\"report\": \"sales\"}"
  baton periodic --config /etc/baton/reports.toml
  baton periodic --config /etc/baton/reports.toml --json | jq -r '.[].last_job'
  baton periodic --config /etc/baton/reports.toml forget-host web-old-3
`

// periodicVerbs are periodic's verbs, its first argument (none: list).
var periodicVerbs = []string{"forget-host"}

func periodicFlags() (*pflag.FlagSet, *jsonOpts) {
	fs := flagSet("periodic")
	return fs, new(jsonOpts).bind(fs, config.Bind(fs, append([]string{"queue"}, redisKeys...)...), "print one JSON array")
}

func runPeriodic(ctx context.Context, e *env, args []string) error {
	fs, o := periodicFlags()
	if err := parse(e, fs, periodicUsage, args); err != nil {
		return err
	}
	switch {
	case fs.NArg() == 0:
	case fs.Arg(0) == "forget-host" && fs.NArg() > 1:
	case fs.Arg(0) == "forget-host":
		return usagef("e.g. baton periodic forget-host web-old-3", "periodic forget-host: which host? name one or more")
	default:
		return usagef("run 'baton periodic --help'", "periodic: unexpected argument %q", fs.Arg(0))
	}
	cfg, rdb, err := loadAndConnect(ctx, e, o.cf, 2)
	if err != nil {
		return err
	}
	defer rdb.Close()
	if fs.NArg() > 0 {
		return forgetHosts(ctx, e, cfg, rdb, fs.Args()[1:])
	}
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

// forgetHosts is periodic forget-host: it forgets hosts' cron firings and
// entries' fingerprints, and says what each host's last firing was.
func forgetHosts(ctx context.Context, e *env, cfg *config.Config, rdb redis.Cmdable, hosts []string) error {
	fires, err := cronfire.Read(ctx, rdb, cfg.Queue, qstatus.CronSilentAfter(cfg))
	if err != nil {
		return err
	}
	gone, err := cronfire.Forget(ctx, rdb, cfg.Queue, hosts...)
	if err != nil {
		return err
	}
	if _, err := periodic.ForgetHosts(ctx, rdb, cfg.Queue, hosts...); err != nil {
		return err
	}
	var known, unknown []string
	for _, f := range fires {
		known = append(known, f.Host)
	}
	for _, h := range hosts {
		if !slices.Contains(gone, h) {
			unknown = append(unknown, h)
			continue
		}
		last := ""
		for _, f := range fires {
			if f.Host == h {
				last = fmt.Sprintf(" (cron last started baton there at %s, %s ago)", f.Last.Format(time.RFC3339), time.Since(f.Last).Round(time.Second))
			}
		}
		fmt.Fprintf(e.Stdout, "forgot host %s in queue %s%s; it comes back if cron starts baton there again\n", h, cfg.Queue, last)
	}
	if len(unknown) > 0 {
		list := "none"
		if len(known) > 0 {
			list = strings.Join(known, ", ")
		}
		return fmt.Errorf("periodic forget-host: queue %s has no cron firing of host %s (a typo?); hosts recorded: %s", cfg.Queue, strings.Join(unknown, ", "), list)
	}
	return nil
}
