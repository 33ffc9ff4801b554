package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/baton-run/baton/internal/config"
	"github.com/baton-run/baton/standby"
)

const checkUsage = `Usage: baton check [--config F] [--crontab FILE] [--json] [--online] [flags]

Prove, before installing a config, that cron keeps k holders running: a
standby must outwait any holder and cron must start candidates faster than
holders retire (S > L > C for one slot, S/k > L/k > C for k slots), with the
extra conditions the run/standby protocol needs. Prints the quantities, each
relation with its values, margin and PASS, WARN or FAIL, and one fix with
numbers for each that does not pass. See docs/coverage.md.

The config is read as 'baton run' reads it. The schedule is the config's
schedule key, or, with --crontab, the schedules of the lines of a crontab or
/etc/cron.d file that run 'baton run' with this --config (several lines add
their candidates up). check never takes a slot and creates no file.

{{flags}}
Exit codes:
  0  every relation holds (warnings allowed)
  1  a relation fails: expect gaps in coverage
  2  the config, its schedule or the crontab is invalid

Example:
  baton check --config /etc/baton/thumbs.toml --crontab /etc/cron.d/baton
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
	Failed     int                `json:"failed"`
	Warnings   int                `json:"warnings"`
}

// quantity is one row of the quantities table.
type quantity struct {
	Symbol  string `json:"symbol"`
	Meaning string `json:"meaning"`
	Value   string `json:"value"`
}

func runCheck(ctx context.Context, e *env, args []string) error {
	fs := flagSet("check")
	cf := config.Bind(fs, checkKeys...)
	crontab := fs.String("crontab", "", "crontab or /etc/cron.d `file` whose 'baton run' lines give the schedule")
	asJSON := fs.Bool("json", false, "print one JSON object")
	online := fs.Bool("online", false, "also check Redis: reachable, version ≥ 6.2, consumer group present")
	if err := parse(e, fs, checkUsage, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("run 'baton check --help'", "check: unexpected argument %q", fs.Arg(0))
	}
	cfg, err := cf.Load(e.Getenv)
	if err != nil {
		return err
	}
	sched, source, extra, err := loadSchedule(cfg, cf.Path(), *crontab)
	if err != nil {
		return err
	}
	q := quantities(cfg, sched)
	rep := checkReport{
		Config: cf.Path(), Queue: cfg.Queue, Schedule: sched.Specs(), Source: source,
		Quantities: quantityTable(q),
		Relations:  standby.Check(q),
	}
	rep.Relations = append(rep.Relations, extra...)
	rep.Relations = append(rep.Relations, checkLockDir(cfg.LockDir), checkRecordedSlots(cfg.LockDir, cfg.Queue, cfg.Slots))
	if *online {
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
	if *asJSON {
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

// loadSchedule returns the schedule that starts the config's candidates:
// the config's schedule key, or the matching lines of a crontab. Extra
// relations warn about crontab lines that override the config with flags.
func loadSchedule(cfg *config.Config, configPath, crontab string) (*standby.Schedule, string, []standby.Relation, error) {
	if crontab == "" {
		s, err := standby.ParseSchedule(cfg.Schedule)
		if err != nil {
			return nil, "", nil, &config.Error{Key: "schedule", Msg: err.Error()}
		}
		return s, "config key schedule", nil, nil
	}
	specs, flagged, err := crontabSchedule(crontab, configPath)
	if err != nil {
		return nil, "", nil, err
	}
	s, err := standby.ParseSchedule(specs...)
	if err != nil {
		return nil, "", nil, usagef("fix the schedule in "+crontab, "crontab %s: %v", crontab, err)
	}
	source := fmt.Sprintf("crontab %s (%d line", crontab, len(specs))
	if len(specs) > 1 {
		source += "s"
	}
	source += ")"
	var extra []standby.Relation
	for _, l := range flagged {
		extra = append(extra, standby.Relation{
			Name: "crontab-flags", Formula: "no overrides", Values: fmt.Sprintf("line %d: %s", l.Num, strings.Join(l.Flags, " ")),
			Margin: "-", Status: standby.Warn,
			Why: "flags on the crontab line override the config file; check saw only the file and its own flags",
			Fix: "move them into the config file, or pass the same flags to check",
		})
	}
	return s, source, extra, nil
}

// quantities derives the coverage quantities from a loaded config.
func quantities(c *config.Config, s *standby.Schedule) standby.Quantities {
	return standby.Quantities{
		C: s.Gap(), Spawn: c.Spawn, Lines: s.MinLines(), PeakLines: s.PeakLines(),
		Slots: c.Slots, StandbySlots: c.StandbySlots,
		Lifetime: c.Lifetime.D(), Jitter: c.Jitter.D(), StandbyWait: c.StandbyWait.D(),
		Poll: c.PollInterval.D(), Grace: c.ShutdownGrace.D(), HardMargin: hardMargin,
		JobTimeout: c.JobTimeout.D(), Visibility: c.VisibilityTimeout.D(), MaxJobs: c.MaxJobs,
	}
}

func quantityTable(q standby.Quantities) []quantity {
	d := standby.FormatDuration
	lines := max(q.Lines, 1)
	return []quantity{
		{"C", "longest gap between cron firings", d(q.C)},
		{"m", fmt.Sprintf("fewest candidates per firing (spawn %d × %d line%s)", q.Spawn, lines, plural(lines)), fmt.Sprint(q.M())},
		{"k", "run slots to keep covered (slots)", fmt.Sprint(q.Slots)},
		{"N_s", "standby slots (standby_slots)", fmt.Sprint(q.StandbySlots)},
		{"L_min", "shortest lifetime (lifetime)", d(q.LMin())},
		{"L_max", "longest lifetime (lifetime + jitter)", d(q.LMax())},
		{"H", "hard deadline (L_max + shutdown_grace + " + d(q.HardMargin) + ")", d(q.Deadline())},
		{"S", "standby wait (standby_wait)", d(q.StandbyWait)},
		{"P", "standby poll (poll_interval, ±10%)", d(q.Poll)},
		{"E", "start-up allowance: firing to slot", d(q.E())},
		{"V", "visibility_timeout", d(q.Visibility)},
	}
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
	switch {
	case rep.Failed > 0:
		fmt.Fprintf(w, "%d relation%s fail: expect gaps in coverage.\n", rep.Failed, plural(rep.Failed))
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
