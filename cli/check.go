package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/baton-run/baton/holder"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/baton-run/baton/internal/config"
	"github.com/baton-run/baton/lock"
	"github.com/baton-run/baton/standby"
	"github.com/spf13/pflag"
)

const checkUsage = `Usage: baton check [--config F] [--crontab FILE] [--hosts H] [--json] [--online] [flags]

Prove, before installing a config, that cron keeps k holders running: a
standby must outwait any holder and cron must start candidates faster than
holders retire (S > L > C for one slot, S/k > L/k > C for k slots), with the
extra conditions the run/standby protocol needs. Prints the quantities, each
relation with its values, margin and PASS, WARN or FAIL, and one fix with
numbers for each that does not pass. See docs/coverage.md.

The config is read as 'baton run' reads it. The schedule is the config's
schedule key (five crontab fields, or "@every D" for a systemd timer: C = D),
or, with --crontab, the schedules of the lines of a crontab or
/etc/cron.d file ('-': standard input) that run 'baton run' with this
--config (several lines add their candidates up). The flags on such a line
override the file, as they do for run; flags given to check override both,
to try a change. A line that names baton without its path warns: cron's PATH
is /usr/bin:/bin. check never takes a slot and creates no file.

The config's [[periodic]] entries are checked too (docs/periodic.md): a
name unique in the queue, the schedule and its CRON_TZ= zone, catch_up
(latest, none, all), catch_up_max (1-10000), overlap (allow, skip), the
job options; a bad one exits 2 naming the entry, the key and its line, e.g.
  config thumbs.toml:14: periodic "nightly": catch_up: "some": want latest, none or all
With overlap = "allow", a job timeout not below the schedule's shortest
gap between ticks is a warning (periodic-<name>): two ticks' jobs may run
at once.

In fleet mode (lock_backend = "redis") --hosts H says that H hosts each run
the entry: the relations count all their candidates, and more are
checked: the lease timings' order, a standby that outwaits a holder's hard
deadline plus lease_ttl, losing a whole host (the other H-1 must still start
candidates faster than holders retire) and, with max_per_host, room for k
holders on H-1 hosts and for k holders and their standbys on H hosts. See
docs/fleet.md.

{{flags}}
Exit codes:
  0  every relation holds (warnings allowed)
  1  a relation fails: expect gaps in coverage
  2  the config, its schedule, a [[periodic]] entry or the crontab is invalid

Example:
  baton check --config /etc/baton/thumbs.toml --crontab /etc/cron.d/baton
  crontab -l | baton check --config /etc/baton/thumbs.toml --crontab -
  baton check --config /etc/baton/thumbs.toml --hosts 3
  # /etc/baton/reports.toml, with a periodic entry checked as well:
  #   schedule = "@every 30s"      # a systemd timer's OnCalendar=*:*:0/30
  #   [[periodic]]
  #   name = "nightly"
  #   schedule = "CRON_TZ=Europe/Berlin 30 2 * * *"
  #   payload = "{\"report\": \"sales\"}"
  #   timeout = "30m"
  #   catch_up = "latest"
  baton check --config /etc/baton/reports.toml
`

// exitRelationFails is check's exit code when a relation fails.
const exitRelationFails = 1

// checkReport is check's output.
type checkReport struct {
	Config     string             `json:"config"`
	Queue      string             `json:"queue"`
	Schedule   []string           `json:"schedule"`
	Source     string             `json:"schedule_source"`
	Quantities []quantity         `json:"quantities"`
	Relations  []standby.Relation `json:"relations"`
	// Scaling says, when min_slots < slots, that coverage is proven for the
	// k kept slots and that the slots above them follow the backlog.
	Scaling  string `json:"scaling,omitempty"`
	Failed   int    `json:"failed"`
	Warnings int    `json:"warnings"`
	// CombinedFix is one set of changes after which no coverage relation
	// fails; each relation's own fix assumes the others stay as they are.
	CombinedFix []change `json:"combined_fix,omitempty"`
}

// quantity is one row of the quantities table.
type quantity struct {
	Symbol  string `json:"symbol"`
	Meaning string `json:"meaning"`
	Value   string `json:"value"`
}

// checkOpts are check's flags.
type checkOpts struct {
	cf             *config.Flags
	crontab        string
	hosts          int
	asJSON, online bool
}

// checkFlags builds check's flag set.
func checkFlags() (*pflag.FlagSet, *checkOpts) {
	fs := flagSet("check")
	o := &checkOpts{cf: config.Bind(fs, checkKeys...)}
	fs.StringVar(&o.crontab, "crontab", "", "crontab or /etc/cron.d `file` ('-': stdin) whose 'baton run' lines give the schedule and flags")
	fs.BoolVar(&o.asJSON, "json", false, "print one JSON object")
	fs.BoolVar(&o.online, "online", false, "also check Redis: reachable, version ≥ 6.2, consumer group present")
	fs.IntVar(&o.hosts, "hosts", 0, "hosts that each run the entry (lock_backend redis; default 1)")
	return fs, o
}

func runCheck(ctx context.Context, e *env, args []string) error {
	fs, o := checkFlags()
	cf := o.cf
	if err := parse(e, fs, checkUsage, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("run 'baton check --help'", "check: unexpected argument %q", fs.Arg(0))
	}
	p, err := loadPlan(e, fs, cf, o.crontab)
	if err != nil {
		return err
	}
	cfg := p.cfg
	switch {
	case fs.Changed("hosts") && (o.hosts < 1 || o.hosts > 1000):
		return usagef("", "check: --hosts %d: must be between 1 and 1000", o.hosts)
	case o.hosts > 0 && cfg.LockBackend != "redis":
		return usagef(`set lock_backend = "redis" (or --lock-backend redis) to share the slots across hosts; with flock files check each host alone`,
			"check: --hosts %d: needs lock_backend \"redis\", not %q: flock slots are per host", o.hosts, cfg.LockBackend)
	}
	q := quantities(cfg, p.sched)
	q.Hosts = o.hosts
	rep := checkReport{
		Config: cf.Path(), Queue: cfg.Queue, Schedule: p.sched.Specs(), Source: p.source,
		Quantities: quantityTable(q),
		Relations:  standby.Check(q),
	}
	if cfg.MinSlots < cfg.Slots {
		rep.Scaling = fmt.Sprintf("coverage is proven for k = min_slots = %d of slots = %d: cron and the standbys keep %s covered; "+
			"the %d above are filled by scaling up when the backlog grows and left after idle_exit %s without a job (docs/scaling.md)",
			cfg.MinSlots, cfg.Slots, slotRange(cfg.MinSlots), cfg.Slots-cfg.MinSlots, standby.FormatDuration(cfg.IdleExit.D()))
	}
	if standby.Failed(rep.Relations) {
		rep.CombinedFix, _ = combinedFix(q)
	}
	rep.Relations = append(rep.Relations, p.extra...)
	rep.Relations = append(rep.Relations, checkLockDir(cfg.LockDir), checkRecordedSlots(cfg.LockDir, cfg.Queue, cfg.Slots))
	rep.Relations = append(rep.Relations, checkPeriodic(cfg)...)
	if o.online {
		rep.Relations = append(rep.Relations, checkOnline(ctx, cfg)...)
	}
	for _, r := range rep.Relations {
		switch r.Status {
		case standby.Fail:
			rep.Failed++
		case standby.Warn:
			rep.Warnings++
		}
	}
	if o.asJSON {
		enc := json.NewEncoder(e.Stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		writeCheck(e.Stdout, &rep)
	}
	if rep.Failed > 0 {
		return &exitError{code: exitRelationFails, err: fmt.Errorf("check: %d of %d relations fail", rep.Failed, len(rep.Relations))}
	}
	return nil
}

// plan is the config and the schedule that check and simulate judge.
type plan struct {
	cfg    *config.Config
	sched  *standby.Schedule
	source string             // where the schedule comes from
	extra  []standby.Relation // warnings about the crontab lines
}

// loadPlan loads the config bound to cf and the schedule that starts its
// candidates: the config's schedule key or, with a crontab ("-": standard
// input), the schedules of its lines that run 'baton run' with this
// --config. The flags on such a line override the file, as they do for
// run; the config flags given to check or simulate (fs) override both.
func loadPlan(e *env, fs *pflag.FlagSet, cf *config.Flags, crontab string) (*plan, error) {
	if crontab == "" {
		cfg, err := cf.Load(e.Getenv)
		if err != nil {
			return nil, err
		}
		s, err := standby.ParseSchedule(cfg.Schedule)
		if err != nil {
			return nil, &config.Error{Key: "schedule", Msg: err.Error()}
		}
		return &plan{cfg: cfg, sched: s, source: "config key schedule"}, nil
	}
	lines, err := crontabLines(crontab, e.Stdin, cf.Path())
	if err != nil {
		return nil, err
	}
	specs := make([]string, len(lines))
	for i, l := range lines {
		specs[i] = l.Spec
	}
	p := &plan{source: fmt.Sprintf("crontab %s (%d line%s)", crontab, len(lines), plural(len(lines)))}
	if p.sched, err = standby.ParseSchedule(specs...); err != nil {
		return nil, usagef("fix the schedule in "+crontab, "crontab %s: %v", crontab, err)
	}
	if p.cfg, err = lineConfig(e, fs, cf.Path(), crontab, lines[0]); err != nil {
		return nil, err
	}
	for _, l := range lines[1:] {
		if !slices.Equal(l.Args, lines[0].Args) {
			p.extra = append(p.extra, standby.Relation{
				Name: "crontab-flags", Formula: "same flags on every line", Margin: "-", Status: standby.Warn,
				Values: fmt.Sprintf("line %d: %s; line %d: %s", lines[0].Num, argsText(lines[0].Args), l.Num, argsText(l.Args)),
				Why:    fmt.Sprintf("the lines run the same config with different flags; check used line %d's", lines[0].Num),
				Fix:    "give every line the same flags, or move them into the config file",
			})
		}
	}
	for _, l := range lines {
		if l.Bare {
			p.extra = append(p.extra, standby.Relation{
				Name: "crontab-path", Formula: "baton by its full path", Values: fmt.Sprintf("line %d: baton", l.Num), Margin: "-",
				Status: standby.Warn,
				Why:    "cron runs commands with PATH=" + cronPath + ", where a bare 'baton' is not found unless it is installed there",
				Fix:    "write the full path, e.g. /usr/local/bin/baton run ... ('command -v baton' prints it), or set PATH= at the top of the crontab",
			})
		}
	}
	return p, nil
}

// lineConfig loads the config as 'baton run' on crontab line l would, with
// the config flags given to check (fs) applied last.
func lineConfig(e *env, fs *pflag.FlagSet, configPath, crontab string, l cronLine) (*config.Config, error) {
	rfs, rcf := runFlags()
	var args []string
	if configPath != "" {
		args = append(args, "--config", configPath)
	}
	args = append(args, l.Args...)
	fs.Visit(func(f *pflag.Flag) {
		if _, isKey := f.Annotations[config.GroupAnnotation]; isKey {
			args = append(args, "--"+f.Name+"="+f.Value.String())
		}
	})
	where := fmt.Sprintf("crontab %s line %d", crontab, l.Num)
	if err := rfs.Parse(args); err != nil {
		return nil, usagef("fix the flags of 'baton run' on that line", "%s: %v", where, err)
	}
	cfg, err := rcf.Load(e.Getenv)
	var ce *config.Error
	if errors.As(err, &ce) && strings.HasPrefix(ce.Source, "flag ") && !fs.Changed(strings.ReplaceAll(ce.Key, "_", "-")) {
		ce.Source = where + ": " + ce.Source
	}
	return cfg, err
}

// slotRange names run slots 0 to k-1.
func slotRange(k int) string {
	if k == 1 {
		return "run-0"
	}
	return fmt.Sprintf("run-0 to run-%d", k-1)
}

func argsText(args []string) string {
	if len(args) == 0 {
		return "no flags"
	}
	return strings.Join(args, " ")
}

// quantities derives the coverage quantities from a loaded config.
func quantities(c *config.Config, s *standby.Schedule) standby.Quantities {
	q := standby.Quantities{
		C: s.Gap(), Spawn: c.Spawn, Lines: s.MinLines(), PeakLines: s.PeakLines(),
		Slots: c.MinSlots, StandbySlots: c.StandbySlots,
		Lifetime: c.Lifetime.D(), Jitter: c.Jitter.D(), StandbyWait: c.StandbyWait.D(),
		Poll: c.PollInterval.D(), Grace: c.ShutdownGrace.D(), HardMargin: holder.HardMargin,
		JobTimeout: c.JobTimeout.D(), Visibility: c.VisibilityTimeout.D(), MaxJobs: c.MaxJobs,
	}
	if c.LockBackend == "redis" {
		q.LeaseTTL, q.RenewDeadline, q.LeaseRenew = c.LeaseTTL.D(), lock.DeadlineFor(c.LeaseTTL.D()), c.LeaseRenew.D()
		q.MaxPerHost = c.MaxPerHost
	}
	return q
}

func quantityTable(q standby.Quantities) []quantity {
	d := standby.FormatDuration
	lines := max(q.Lines, 1)
	m := fmt.Sprintf("fewest candidates per firing (spawn %d × %d line%s)", q.Spawn, lines, plural(lines))
	if q.Fleet() {
		m = fmt.Sprintf("fewest candidates per firing, fleet-wide (spawn %d × %d line%s × %d host%s)", q.Spawn, lines, plural(lines), q.H(), plural(q.H()))
	}
	t := []quantity{
		{"C", "longest gap between cron firings", d(q.C)},
		{"m", m, fmt.Sprint(q.M())},
		{"k", "run slots to keep covered (min_slots, default slots)", fmt.Sprint(q.Slots)},
		{"N_s", "standby slots (standby_slots)", fmt.Sprint(q.StandbySlots)},
		{"L_min", "shortest lifetime (lifetime)", d(q.LMin())},
		{"L_max", "longest lifetime (lifetime + jitter)", d(q.LMax())},
		{"H", "hard deadline (L_max + shutdown_grace + " + d(q.HardMargin) + ")", d(q.Deadline())},
		{"S", "standby wait (standby_wait)", d(q.StandbyWait)},
		{"P", "standby poll (poll_interval, ±10%)", d(q.Poll)},
		{"E", "start-up allowance: firing to slot", d(q.E())},
		{"V", "visibility_timeout", d(q.Visibility)},
	}
	if q.Fleet() {
		t = append(t,
			quantity{"N_h", "hosts running the entry (--hosts)", fmt.Sprint(q.H())},
			quantity{"T", "lease_ttl", d(q.LeaseTTL)},
			quantity{"D", "renew deadline (2/3 of lease_ttl)", d(q.RenewDeadline)},
			quantity{"R", "lease_renew", d(q.LeaseRenew)})
		if q.MaxPerHost > 0 {
			t = append(t, quantity{"M_h", "max_per_host", fmt.Sprint(q.MaxPerHost)})
		}
	}
	return t
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func writeCheck(w io.Writer, rep *checkReport) {
	cfgName := rep.Config
	if cfgName == "" {
		cfgName = "(defaults and flags)"
	}
	fmt.Fprintf(w, "queue %q, config %s\nschedule %s, from %s\n\n", rep.Queue, cfgName, quoteAll(rep.Schedule), rep.Source)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SYMBOL\tQUANTITY\tVALUE")
	for _, q := range rep.Quantities {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", q.Symbol, q.Meaning, q.Value)
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RELATION\tFORMULA\tVALUES\tMARGIN\tRESULT")
	for _, r := range rep.Relations {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Name, r.Formula, r.Values, r.Margin, r.Status)
	}
	tw.Flush()
	for _, r := range rep.Relations {
		if r.Status == standby.Pass {
			continue
		}
		fmt.Fprintf(w, "\n%s %s: %s\n  fix: %s\n", r.Status, r.Name, r.Why, r.Fix)
	}
	fmt.Fprintln(w)
	if rep.Scaling != "" {
		fmt.Fprintf(w, "Scaling: %s.\n\n", rep.Scaling)
	}
	switch {
	case rep.Failed > 0:
		fmt.Fprintf(w, "%d relation%s fail: expect gaps in coverage.\n", rep.Failed, plural(rep.Failed))
		if len(rep.CombinedFix) > 0 {
			toml, flags := fixText(rep.CombinedFix)
			fmt.Fprintf(w, "\nEach fix above assumes the rest stays as it is. Together, with every relation holding:\n  %s\n"+
				"  (to try it: baton check ... %s)\n", toml, flags)
		}
	case rep.Warnings > 0:
		fmt.Fprintf(w, "Every relation holds, with %d warning%s.\n", rep.Warnings, plural(rep.Warnings))
	default:
		fmt.Fprintln(w, "Every relation holds: k holders at all times once cron has filled the slots.")
	}
}

func quoteAll(specs []string) string {
	q := make([]string, len(specs))
	for i, s := range specs {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, " + ")
}
