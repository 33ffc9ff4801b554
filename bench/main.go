// Command bench measures baton where users feel it — jobs per second, pickup,
// promotion, recovery, the cost of a losing candidate, a holder's memory —
// side by side with asynq and with bare loops that bound what Redis Streams
// and fork/exec allow, in one run on one throwaway redis-server.
//
// Run it with `make bench` (or `go run .` in this directory). It prints a
// Markdown table of medians with min and max over several runs, then the
// targets of issue 5; -json prints one JSON object instead, -quick is a smoke
// check with small counts and one run, -docs FILE rewrites the marked block
// of docs/benchmarks.md with the table and the machine. It talks only to the
// redis-server it started on 127.0.0.1 and to the processes it started, and
// every loop is bounded by a count and a timeout.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"
)

// runConfig is how much is measured.
type runConfig struct {
	Runs             int    `json:"runs"`                    // runs per figure; the table shows their median, min and max
	Jobs             int    `json:"jobs"`                    // jobs per throughput run, the same for every contender
	ExecJobs         int    `json:"exec_jobs"`               // jobs per exec and fork run
	PickupSamples    int    `json:"pickup_samples"`          // jobs per pickup run
	PromotionSamples int    `json:"promotion_samples"`       // hand-overs per promotion run
	RecoverySamples  int    `json:"recovery_samples"`        // kills per recovery run
	LoserSamples     int    `json:"loser_samples"`           // losing candidates per loser run
	FleetSamples     int    `json:"fleet_samples"`           // hand-overs, and losing candidates, per fleet run
	HolderJobs       int    `json:"holder_jobs"`             // jobs before holder_rss is read
	PeriodicTicks    int    `json:"periodic_ticks"`          // ticks of "@every 1s" behind the periodic lateness figures
	PollInterval     string `json:"poll_interval,omitempty"` // set by -poll-interval; else baton's default
	Quick            bool   `json:"quick"`
}

var groups = []string{"throughput", "enqueue", "producers", "exec", "pickup", "promotion", "recovery", "loser", "holder", "workers", "clients", "chains", "workflows"}

// onlyGroups run with -only alone, never in the full table: fleet takes
// about 5 minutes a run (200 hand-overs of a 1–1.5 s lifetime each),
// control about 2 (20 pauses of 2 s, 100 cancels), periodic about 8 (a
// minute of ticks, then its other figures), keys a few (50,000 jobs).
var onlyGroups = []string{"fleet", "control", "periodic", "keys"}

func main() {
	var (
		asJSON = flag.Bool("json", false, "print one JSON object instead of tables")
		quick  = flag.Bool("quick", false, "smoke check: small counts, one run")
		runs   = flag.Int("runs", 5, "runs per figure")
		only   = flag.String("only", "", "comma-separated groups to run: "+strings.Join(groups, ",")+"; with -only alone: "+strings.Join(onlyGroups, ","))
		docs   = flag.String("docs", "", "rewrite the bench block of this Markdown file with the results")
		poll   = flag.String("poll-interval", "", "poll_interval for promotion and recovery (default: baton's)")
		prof   = flag.String("cpuprofile", "", "write a CPU profile of this process (library-mode groups) to this file")
		scale  = flag.Bool("scale", false, "the scaling benchmark only (make bench-scale): a burst with and without autoscaling, and a steady load")
		ticks  = flag.Int("periodic-ticks", 60, "ticks of @every 1s behind the periodic lateness figures (300: the full run of issue 25, 5 minutes)")
		sc     = scaleConfig{}
	)
	flag.IntVar(&sc.Jobs, "scale-jobs", 20000, "with -scale: jobs in the burst")
	flag.DurationVar(&sc.JobTime, "scale-job-time", 5*time.Millisecond, "with -scale: each job's handler time")
	flag.IntVar(&sc.Repeats, "scale-repeats", 3, "with -scale: autoscaled bursts (the burst without runs once)")
	flag.DurationVar(&sc.Steady, "scale-steady", 5*time.Minute, "with -scale: length of the steady-load run (0: skip)")
	flag.IntVar(&sc.Rate, "scale-rate", 100, "with -scale: steady load in jobs per second")
	flag.StringVar(&sc.Celery, "scale-celery", "", "with -scale: a python3 that has celery and redis, to burst onto celery --autoscale=4,1 too")
	flag.Parse()
	if *scale {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		if err := scaleMain(ctx, sc, os.Stdout); err != nil {
			fmt.Fprintf(os.Stderr, "bench: %v\n", err)
			os.Exit(1)
		}
		return
	}
	cfg := runConfig{Runs: *runs, Jobs: 20000, ExecJobs: 1000, PickupSamples: 300,
		PromotionSamples: 10, RecoverySamples: 3, LoserSamples: 20, FleetSamples: 200, HolderJobs: 100000, PeriodicTicks: *ticks}
	if *quick {
		cfg = runConfig{Runs: 1, Jobs: 2000, ExecJobs: 100, PickupSamples: 50,
			PromotionSamples: 2, RecoverySamples: 1, LoserSamples: 5, FleetSamples: 3, HolderJobs: 100000, PeriodicTicks: min(*ticks, 10), Quick: true}
	}
	sel := groups
	if *only != "" {
		sel = strings.Split(*only, ",")
		for _, g := range sel {
			if !slices.Contains(groups, g) && !slices.Contains(onlyGroups, g) {
				fmt.Fprintf(os.Stderr, "bench: unknown group %q (groups: %s)\n", g, strings.Join(slices.Concat(groups, onlyGroups), ","))
				os.Exit(2)
			}
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *prof != "" {
		f, err := os.Create(*prof)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: cpu profile: %v\n", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	if err := run(ctx, cfg, sel, *asJSON, *docs, *poll); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg runConfig, sel []string, asJSON bool, docs, poll string) error {
	if docs != "" && !cfg.Quick {
		if err := checkDocs(docs); err != nil {
			return err
		}
	}
	srv, err := startRedis()
	if err != nil {
		return err
	}
	defer srv.Close()
	m := describe(srv.Version)
	progress("machine: %s", m)
	b := &bench{cfg: cfg, srv: srv, res: newResults()}
	if poll != "" {
		b.poll = []string{"--poll-interval", poll}
		cfg.PollInterval = poll
	}
	defer b.close()
	if err := b.measure(ctx, sel); err != nil {
		return err
	}
	if asJSON {
		err = b.res.writeJSON(os.Stdout, m, cfg)
	} else {
		fmt.Printf("Machine: %s\n\n", m)
		b.res.writeTable(os.Stdout)
	}
	switch {
	case err != nil || docs == "":
	case cfg.Quick || len(sel) < len(groups):
		progress("docs: %s left as it is (a -quick or -only run is not the full table)", docs)
	default:
		err = writeDocs(docs, m, cfg, b.res)
	}
	return err
}

// progress reports on stderr, so stdout stays the table or the JSON.
func progress(format string, a ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", a...)
}
