package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/baton-run/baton/internal/config"
	"github.com/baton-run/baton/internal/sim"
	"github.com/baton-run/baton/standby"
	"github.com/spf13/pflag"
)

const simulateUsage = `Usage: baton simulate [--config F] [--horizon 30d] [--crash-rate R] [--seed N] [--json] [--svg FILE] [flags]

Simulate a config under cron, event by event, and measure how available it
really is: cron firings per the real schedule (the config's schedule key, or
--crontab as for check), candidates that start within --startup of a firing
and take a run slot, else a standby slot, else exit; jittered lifetimes and
drains; standbys that wake within --wake of a freed run slot, the one that
has waited longest taking it, and give up after standby_wait (with
--poll-only they notice it at their next poll, every poll_interval ±10%, as
when the lock dir cannot be watched); random crashes and hangs. Nothing runs
at time zero; the warm-up (⌈slots/spawn⌉ firings plus 1s) is not measured.
A handover (a waiting standby taking a freed slot) counts as covered.
Deterministic for a seed; 30 days take milliseconds.

--svg draws the slot timeline of a window after the warm-up: runs, standbys,
promotions, crashes and gaps.

With --arrivals, simulate models scaling instead (docs/scaling.md): jobs of
--job-time arrive in bursts ("20000@10s") or at rates ("100/s",
"100/s@1m-5m"), min_slots holders always run (cron and the standbys keep
them; the default mode proves that), and holders above them come and go
as the holders' own scale.Decide starts and stops them. It reports the time
to drain and the holder-seconds spent, with autoscaling and without
(min_slots holders only).

{{flags}}
Example:
  baton simulate --config /etc/baton/thumbs.toml --horizon 30d --crash-rate 0.5
  baton simulate --slots 4 --spawn 4 --svg timeline.svg --svg-window 20m
  baton simulate --slots 4 --min-slots 1 --arrivals 20000@10s --job-time 5ms
`

// simReport is simulate's output.
type simReport struct {
	Queue     string   `json:"queue"`
	Schedule  []string `json:"schedule"`
	Horizon   string   `json:"horizon"`
	Warmup    string   `json:"warmup"`
	Seed      uint64   `json:"seed"`
	Wake      string   `json:"wake"`      // a standby's wake-up after a run slot frees, at most
	PollOnly  bool     `json:"poll_only"` // standbys only poll: no inotify
	CrashRate float64  `json:"crash_rate"`
	HangRate  float64  `json:"hang_rate"`
	Slots     int      `json:"slots"`
	Check     string   `json:"check"` // PASS, WARN or FAIL: check's verdict on the same config

	Full         float64 `json:"full"`        // share of time with ≥ k holders (handovers counted)
	FullStrict   float64 `json:"full_strict"` // ≥ k working holders, handovers not counted
	Any          float64 `json:"any"`         // ≥ 1 holder
	LongestBelow string  `json:"longest_below_k"`
	Gaps         int     `json:"gaps"`
	GapTime      string  `json:"gap_time"`
	HandoverMax  string  `json:"handover_max"`

	Firings    int `json:"firings"`
	Candidates int `json:"candidates"`
	Direct     int `json:"took_run_slot"`
	Steals     int `json:"took_run_slot_while_standby_waited"`
	Standbys   int `json:"took_standby_slot"`
	Nothing    int `json:"found_nothing"`
	Promotions int `json:"promotions"`
	Timeouts   int `json:"standby_timeouts"`
	Crashes    int `json:"crashes"`
	Hangs      int `json:"hangs"`

	RunSlots []sim.SlotStats `json:"run_slots"`
	Buckets  []bucket        `json:"holders_over_time"`
}

type bucket struct {
	From string  `json:"from"`
	To   string  `json:"to"`
	Min  int     `json:"min"`
	Mean float64 `json:"mean"`
}

// simulateOpts are simulate's flags.
type simulateOpts struct {
	jsonOpts
	crontab, horizon, svgPath        string
	crashRate, hangRate              float64
	seed                             uint64
	startup, wake, warmup, svgWindow time.Duration
	pollOnly                         bool
	arrivals                         string
	jobTime                          time.Duration
}

// simulateFlags builds simulate's flag set.
func simulateFlags() (*pflag.FlagSet, *simulateOpts) {
	fs := flagSet("simulate")
	o := new(simulateOpts)
	cf := config.Bind(fs, append(coverageKeys, "concurrency")...)
	fs.StringVar(&o.crontab, "crontab", "", "crontab or /etc/cron.d `file` ('-': stdin) whose 'baton run' lines give the schedule and flags")
	fs.StringVar(&o.horizon, "horizon", "30d", "simulated time: a duration, with d for days")
	fs.Float64Var(&o.crashRate, "crash-rate", 0, "crashes per holder-hour")
	fs.Float64Var(&o.hangRate, "hang-rate", 0, "hangs per holder-hour (a hung holder keeps its slot until its hard deadline)")
	fs.Uint64Var(&o.seed, "seed", 1, "random seed")
	fs.DurationVar(&o.startup, "startup", sim.DefaultLatency, "a candidate starts uniformly within this long of its firing")
	fs.DurationVar(&o.wake, "wake", sim.DefaultWake, "a standby tries a freed run slot uniformly within this long")
	fs.BoolVar(&o.pollOnly, "poll-only", false, "standbys only poll, as when the lock dir cannot be watched (no inotify)")
	fs.DurationVar(&o.warmup, "warmup", 0, "unmeasured start (0: ⌈slots/spawn⌉ firings + 1s)")
	o.bind(fs, cf, "print one JSON object")
	fs.StringVar(&o.svgPath, "svg", "", "write the slot timeline to this SVG `file`")
	fs.DurationVar(&o.svgWindow, "svg-window", 30*time.Minute, "length of the --svg timeline, from the end of the warm-up")
	fs.StringVar(&o.arrivals, "arrivals", "", "model scaling: jobs arriving in bursts and at rates, e.g. 20000@10s,100/s@1m-5m")
	fs.DurationVar(&o.jobTime, "job-time", 5*time.Millisecond, "with --arrivals: each job's handler time")
	return fs, o
}

func runSimulate(ctx context.Context, e *env, args []string) error {
	fs, o := simulateFlags()
	cf, crontab, horizon, crashRate, hangRate, seed := o.cf, &o.crontab, &o.horizon, &o.crashRate, &o.hangRate, &o.seed
	startup, wake, pollOnly, warmup, asJSON := &o.startup, &o.wake, &o.pollOnly, &o.warmup, &o.asJSON
	svgPath, svgWindow := &o.svgPath, &o.svgWindow
	if err := parse(e, fs, simulateUsage, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("run 'baton simulate --help'", "simulate: unexpected argument %q", fs.Arg(0))
	}
	hz, err := parseHorizon(*horizon)
	if err != nil {
		return usagef("e.g. --horizon 30d or --horizon 12h", "simulate: --horizon %q: %v", *horizon, err)
	}
	for name, v := range map[string]float64{"--crash-rate": *crashRate, "--hang-rate": *hangRate} {
		if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			return usagef("", "simulate: %s %v: must be a rate ≥ 0 per holder-hour", name, v)
		}
	}
	if *startup <= 0 || *wake <= 0 || *svgWindow <= 0 {
		return usagef("", "simulate: --startup, --wake and --svg-window must be positive")
	}
	p, err := loadPlan(e, fs, cf, *crontab)
	if err != nil {
		return err
	}
	if o.arrivals != "" || fs.Changed("job-time") {
		return simulateScale(e, p.cfg, o, hz)
	}
	cfg, sched := p.cfg, p.sched
	q := quantities(cfg, sched)
	c := sim.Config{Schedule: sched, Q: q, Horizon: hz, Warmup: *warmup, Latency: *startup,
		Wake: *wake, PollOnly: *pollOnly, CrashRate: *crashRate, HangRate: *hangRate, Seed: *seed}
	if *svgPath != "" {
		c.Trace = *svgWindow
	}
	res, err := sim.Run(c)
	if err != nil {
		return usagef("lengthen --horizon", "%v", err)
	}
	if *svgPath != "" {
		if err := writeSVGFile(*svgPath, res.Timeline, svgTitle(cfg, sched, *seed, *crashRate, *hangRate)); err != nil {
			return err
		}
	}
	rep := simulateReport(cfg, sched, q, c, res)
	if *asJSON {
		enc := json.NewEncoder(e.Stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		return enc.Encode(rep)
	}
	writeSimulate(e.Stdout, rep)
	return nil
}

// parseHorizon reads a Go duration that may start with whole days: "30d",
// "1d12h", "90m".
func parseHorizon(s string) (time.Duration, error) {
	var days time.Duration
	if i := strings.IndexByte(s, 'd'); i > 0 {
		n, err := strconv.Atoi(s[:i])
		if err != nil || n < 0 || n > 36500 {
			return 0, fmt.Errorf("want whole days such as 30d, up to 36500d")
		}
		days, s = time.Duration(n)*24*time.Hour, s[i+1:]
		if s == "" {
			s = "0s"
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil || days > 0 && d < 0 {
		return 0, fmt.Errorf("want a duration such as 30d, 12h or 90m")
	}
	if d+days <= 0 {
		return 0, fmt.Errorf("must be positive")
	}
	return d + days, nil
}

func writeSVGFile(path string, tl *sim.Timeline, title string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write timeline: %w", err)
	}
	if err := tl.WriteSVG(f, title); err != nil {
		_ = f.Close()
		return fmt.Errorf("write timeline %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write timeline %s: %w", path, err)
	}
	return nil
}

func svgTitle(cfg *config.Config, s *standby.Schedule, seed uint64, crash, hang float64) string {
	d := standby.FormatDuration
	t := fmt.Sprintf("baton simulate: slots %d, standby_slots %d, spawn %d, schedule %s\n", cfg.Slots, cfg.StandbySlots, cfg.Spawn, quoteAll(s.Specs()))
	t += fmt.Sprintf("lifetime %s + jitter %s, standby_wait %s, poll_interval %s, seed %d",
		d(cfg.Lifetime.D()), d(cfg.Jitter.D()), d(cfg.StandbyWait.D()), d(cfg.PollInterval.D()), seed)
	if crash > 0 || hang > 0 {
		t += fmt.Sprintf(", %g crashes and %g hangs per holder-hour", crash, hang)
	}
	return t
}

func simulateReport(cfg *config.Config, s *standby.Schedule, q standby.Quantities, c sim.Config, r *sim.Result) *simReport {
	d := standby.FormatDuration
	verdict := standby.Pass
	for _, rel := range standby.Check(q) {
		verdict = max(verdict, rel.Status)
	}
	rep := &simReport{
		Queue: cfg.Queue, Schedule: s.Specs(), Horizon: d(r.Horizon), Warmup: d(r.Warmup), Seed: c.Seed,
		Wake: d(c.Wake), PollOnly: c.PollOnly,
		CrashRate: c.CrashRate, HangRate: c.HangRate, Slots: cfg.Slots, Check: verdict.String(),
		Full: r.Full, FullStrict: r.FullStrict, Any: r.Any,
		LongestBelow: d(r.LongestBelow.Round(time.Millisecond)), Gaps: r.Gaps, GapTime: d(r.GapTime.Round(time.Millisecond)),
		HandoverMax: d(r.HandoverMax.Round(time.Millisecond)),
		Firings:     r.Firings, Candidates: r.Candidates, Direct: r.Direct, Steals: r.Steals, Standbys: r.Standbys,
		Nothing: r.Nothing, Promotions: r.Promotions, Timeouts: r.Timeouts, Crashes: r.Crashes, Hangs: r.Hangs,
		RunSlots: r.Slots,
	}
	for _, b := range r.Buckets {
		rep.Buckets = append(rep.Buckets, bucket{From: d(b.From.Round(time.Second)), To: d(b.To.Round(time.Second)), Min: b.Min, Mean: b.Mean})
	}
	return rep
}

func writeSimulate(w io.Writer, r *simReport) {
	pct := func(f float64) string { return fmt.Sprintf("%.4f%%", 100*f) }
	fmt.Fprintf(w, "queue %q, schedule %s, %s simulated, seed %d, %g crashes and %g hangs per holder-hour\n",
		r.Queue, quoteAll(r.Schedule), days(r.Horizon), r.Seed, r.CrashRate, r.HangRate)
	wakes := "standbys wake within " + r.Wake + " of a freed run slot"
	if r.PollOnly {
		wakes = "standbys only poll"
	}
	fmt.Fprintf(w, "measured after a warm-up of %s; %s; check says %s for this config\n\n", r.Warmup, wakes, r.Check)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "time with ≥ %d holder%s\t%s\t(a handover to a waiting standby counts as held)\n", r.Slots, plural(r.Slots), pct(r.Full))
	fmt.Fprintf(tw, "time with ≥ %d working holder%s\t%s\t(handovers not counted)\n", r.Slots, plural(r.Slots), pct(r.FullStrict))
	fmt.Fprintf(tw, "time with ≥ 1 holder\t%s\t\n", pct(r.Any))
	fmt.Fprintf(tw, "longest stretch below %d\t%s\t\n", r.Slots, r.LongestBelow)
	fmt.Fprintf(tw, "stretches below %d\t%d\t(%s in all)\n", r.Slots, r.Gaps, r.GapTime)
	fmt.Fprintf(tw, "longest handover\t%s\t\n", r.HandoverMax)
	fmt.Fprintf(tw, "\t\t\n")
	fmt.Fprintf(tw, "cron firings\t%d\t\n", r.Firings)
	fmt.Fprintf(tw, "candidates\t%d\t\n", r.Candidates)
	fmt.Fprintf(tw, "  took a run slot\t%d\t(%d while a standby waited for it)\n", r.Direct, r.Steals)
	fmt.Fprintf(tw, "  took a standby slot\t%d\t\n", r.Standbys)
	fmt.Fprintf(tw, "  found nothing\t%d\t\n", r.Nothing)
	fmt.Fprintf(tw, "promotions\t%d\t\n", r.Promotions)
	fmt.Fprintf(tw, "standby time-outs\t%d\t\n", r.Timeouts)
	fmt.Fprintf(tw, "crashes\t%d\t\n", r.Crashes)
	fmt.Fprintf(tw, "hangs\t%d\t\n", r.Hangs)
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN SLOT\tHELD\tHOLDERS")
	for i, s := range r.RunSlots {
		fmt.Fprintf(tw, "run.%d\t%s\t%d\n", i, pct(s.Held), s.Holders)
	}
	tw.Flush()
	if len(r.Buckets) > 0 {
		fmt.Fprintf(w, "\nfewest holders in each 1/%d of the measured time (%s each):\n  ", len(r.Buckets), bucketWidth(r.Buckets))
		for _, b := range r.Buckets {
			fmt.Fprint(w, digit(b.Min))
		}
		fmt.Fprintln(w)
	}
}

// days writes a horizon of whole days as "30d".
func days(h string) string {
	d, err := time.ParseDuration(h)
	if err != nil || d < 48*time.Hour || d%(24*time.Hour) != 0 {
		return h
	}
	return fmt.Sprintf("%dd", d/(24*time.Hour))
}

func bucketWidth(bs []bucket) string {
	from, _ := time.ParseDuration(bs[0].From)
	to, _ := time.ParseDuration(bs[0].To)
	return standby.FormatDuration(to - from)
}

// digit shows a holder count in one character: 0-9, then +.
func digit(n int) string {
	if n > 9 {
		return "+"
	}
	return strconv.Itoa(n)
}
