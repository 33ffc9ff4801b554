package cli

import (
	"encoding/json"
	"fmt"
	"github.com/baton-run/baton/holder"
	"math"
	"text/tabwriter"
	"time"

	"github.com/baton-run/baton/internal/config"
	"github.com/baton-run/baton/scale"
)

// scaleSimReport is simulate --arrivals' output.
type scaleSimReport struct {
	Arrivals    string       `json:"arrivals"`
	JobTime     string       `json:"job_time"`
	Concurrency int          `json:"concurrency"`
	MinSlots    int          `json:"min_slots"`
	Slots       int          `json:"slots"`
	Autoscale   scaleSimMode `json:"autoscale"`
	Off         scaleSimMode `json:"off"`
}

// scaleSimMode is one mode's figures; durations are from time 0.
type scaleSimMode struct {
	Jobs          int     `json:"jobs"`
	Drained       string  `json:"drained"` // "-" when not within the horizon
	BackToK       string  `json:"back_to_min_slots"`
	HolderSeconds float64 `json:"holder_seconds"`
	Window        string  `json:"window"`
	MostHolders   int     `json:"most_holders"`
	ScaleUps      int     `json:"scale_up_rounds"`
	Started       int     `json:"candidates_started"`
	Left          int     `json:"left_idle"`
	MaxWait       string  `json:"longest_wait"`
}

// simulateScale runs simulate --arrivals: the same pattern with and
// without autoscaling, over the same window.
func simulateScale(e *env, cfg *config.Config, o *simulateOpts, horizon time.Duration) error {
	as, err := scale.ParseArrivals(o.arrivals)
	if err != nil {
		return usagef("e.g. --arrivals 20000@10s,100/s@1m-5m", "simulate: --arrivals: %v", err)
	}
	if o.jobTime <= 0 {
		return usagef("", "simulate: --job-time %s: must be positive", o.jobTime)
	}
	if horizon > 24*time.Hour {
		horizon = 24 * time.Hour // 10ms steps: a day is plenty for a burst
	}
	c := scale.SimConfig{Policy: holder.ScalePolicy(cfg), Arrivals: as, JobTime: o.jobTime, Concurrency: cfg.Concurrency,
		Startup: o.startup, Lifetime: cfg.Lifetime.D(), Jitter: cfg.Jitter.D(), Horizon: horizon, Seed: o.seed}
	on, err := scale.Simulate(c, true)
	if err != nil {
		return usagef("", "%v", err)
	}
	off, err := scale.Simulate(c, false)
	if err != nil {
		return usagef("", "%v", err)
	}
	// The same window for both: after its End each mode has k holders.
	window := max(on.End, off.End)
	for _, r := range []*scale.SimResult{&on, &off} {
		r.HolderSeconds += float64(cfg.MinSlots) * (window - r.End).Seconds()
	}
	rep := scaleSimReport{Arrivals: o.arrivals, JobTime: o.jobTime.String(), Concurrency: cfg.Concurrency, MinSlots: cfg.MinSlots, Slots: cfg.Slots,
		Autoscale: simMode(on, window), Off: simMode(off, window)}
	if !holder.ScalePolicy(cfg).Enabled() {
		fmt.Fprintln(e.Stderr, "baton: simulate: min_slots = slots: nothing scales; try --min-slots 1")
	}
	if o.asJSON {
		enc := json.NewEncoder(e.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	fmt.Fprintf(e.Stdout, "arrivals %s, jobs of %s, concurrency %d; min_slots %d, slots %d\n\n", rep.Arrivals, rep.JobTime, rep.Concurrency, rep.MinSlots, rep.Slots)
	tw := tabwriter.NewWriter(e.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\tAUTOSCALE\tOFF (min_slots holders)")
	row := func(name string, f func(scaleSimMode) any) {
		fmt.Fprintf(tw, "%s\t%v\t%v\n", name, f(rep.Autoscale), f(rep.Off))
	}
	row("jobs", func(m scaleSimMode) any { return m.Jobs })
	row("last job done at", func(m scaleSimMode) any { return m.Drained })
	row("back to min_slots at", func(m scaleSimMode) any { return m.BackToK })
	row("longest wait", func(m scaleSimMode) any { return m.MaxWait })
	row("holder-seconds (0 to "+rep.Autoscale.Window+")", func(m scaleSimMode) any { return fmt.Sprintf("%.0f", m.HolderSeconds) })
	row("most holders", func(m scaleSimMode) any { return m.MostHolders })
	row("scale-up rounds", func(m scaleSimMode) any { return m.ScaleUps })
	row("candidates started", func(m scaleSimMode) any { return m.Started })
	row("left idle", func(m scaleSimMode) any { return m.Left })
	return tw.Flush()
}

func simMode(r scale.SimResult, window time.Duration) scaleSimMode {
	d := func(v time.Duration) string {
		if v < 0 {
			return "-"
		}
		return v.Round(10 * time.Millisecond).String()
	}
	return scaleSimMode{Jobs: r.Jobs, Drained: d(r.Drained), BackToK: d(r.Settled), HolderSeconds: math.Round(r.HolderSeconds*10) / 10, Window: d(window),
		MostHolders: r.MostHolders, ScaleUps: r.ScaleUps, Started: r.Started, Left: r.Left, MaxWait: d(r.MaxWait)}
}
