package main

import (
	"context"
	"fmt"
	"os"
)

// bench holds one run of the whole suite.
type bench struct {
	cfg  runConfig
	srv  *redisServer
	res  *results
	bins *binaries // built on first use by the process-level groups
	poll []string  // extra `baton run` flags for promotion and recovery
}

// contender is one figure's measurement: one call, one value.
type contender struct {
	name, unit string
	measure    func() (float64, error)
}

func (b *bench) measure(ctx context.Context, sel []string) error {
	for _, g := range sel {
		var err error
		switch g {
		case "throughput":
			err = b.rounds(ctx, b.throughput(ctx))
		case "enqueue":
			// enqueue_plain and its bar in turns, over 5 × Jobs jobs
			// each: 100 chunks apiece, for a steady median.
			err = b.pairRuns("enqueue_plain", label{"enqueue_plain", "jobs/s"}, label{"xadd_batch", "jobs/s"},
				func() (float64, float64, error) { return plainVsXadd(ctx, b.srv, 5*b.cfg.Jobs) })
			if err == nil {
				err = b.rounds(ctx, b.enqueue(ctx))
			}
		case "producers":
			err = b.producers(ctx)
		case "exec":
			err = b.exec(ctx)
		case "pickup":
			err = b.pickup(ctx)
		case "promotion":
			err = b.promotion(ctx)
		case "recovery":
			err = b.recovery(ctx)
		case "loser":
			err = b.loser(ctx)
		case "holder":
			err = b.holder(ctx)
		case "workers":
			err = b.workers(ctx)
		case "clients":
			err = b.clients(ctx)
		case "workflows":
			err = b.workflows(ctx)
		case "fleet":
			err = b.fleet(ctx)
		case "control":
			err = b.control(ctx)
		case "periodic":
			err = b.periodic(ctx)
		case "chains":
			err = b.chains(ctx)
		case "keys":
			err = b.keys(ctx)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// rounds runs every contender once per round, interleaved, so that a noisy
// moment of a shared machine hits all of them alike rather than one.
func (b *bench) rounds(ctx context.Context, cs []contender) error {
	for r := 1; r <= b.cfg.Runs; r++ {
		for _, c := range cs {
			if err := ctx.Err(); err != nil {
				return err
			}
			v, err := c.measure()
			if err != nil {
				return fmt.Errorf("%s, run %d: %w", c.name, r, err)
			}
			b.res.add(c.name, c.unit, v)
			progress("run %d/%d  %-14s %12s %s", r, b.cfg.Runs, c.name, num(v), c.unit)
		}
	}
	return nil
}

func (b *bench) throughput(ctx context.Context) []contender {
	n := b.cfg.Jobs
	return []contender{
		{"noop_c1", "jobs/s", func() (float64, error) { return noopRate(ctx, b.srv, 1, n) }},
		{"asynq_c1", "jobs/s", func() (float64, error) { return asynqRate(ctx, b.srv, 1, n) }},
		{"raw_batch_c1", "jobs/s", func() (float64, error) { return rawBatchRate(ctx, b.srv, n) }},
		{"noop_c10", "jobs/s", func() (float64, error) { return noopRate(ctx, b.srv, 10, n) }},
		{"asynq_c10", "jobs/s", func() (float64, error) { return asynqRate(ctx, b.srv, 10, n) }},
	}
}

// exec measures exec mode and its ceiling together, in turns (execVsFork).
func (b *bench) exec(ctx context.Context) error {
	for r := 1; r <= b.cfg.Runs; r++ {
		for _, conc := range []int{1, 2} {
			e, f, err := execVsFork(ctx, b.srv, conc, b.cfg.ExecJobs)
			if err != nil {
				return fmt.Errorf("exec_c%d, run %d: %w", conc, r, err)
			}
			b.res.add(fmt.Sprintf("exec_c%d", conc), "jobs/s", e)
			b.res.add(fmt.Sprintf("fork_c%d", conc), "jobs/s", f)
			progress("run %d/%d  exec_c%d %s jobs/s, fork_c%d %s jobs/s (%.2f)", r, b.cfg.Runs, conc, num(e), conc, num(f), e/f)
		}
	}
	return nil
}

func (b *bench) pickup(ctx context.Context) error {
	return b.pairRuns("pickup", label{"pickup_p50_ms", "ms"}, label{"pickup_p99_ms", "ms"},
		func() (float64, float64, error) { return pickup(ctx, b.srv, b.cfg.PickupSamples) })
}

// label is a figure's name and unit.
type label struct{ name, unit string }

// pairRuns records two figures that f measures together, once per run;
// what names the measurement in errors.
func (b *bench) pairRuns(what string, x, y label, f func() (float64, float64, error)) error {
	for r := 1; r <= b.cfg.Runs; r++ {
		vx, vy, err := f()
		if err != nil {
			return fmt.Errorf("%s, run %d: %w", what, r, err)
		}
		b.res.add(x.name, x.unit, vx)
		b.res.add(y.name, y.unit, vy)
		progress("run %d/%d  %s %s %s, %s %s %s", r, b.cfg.Runs, x.name, num(vx), x.unit, y.name, num(vy), y.unit)
	}
	return nil
}

// close removes the binaries built for the process-level groups.
func (b *bench) close() {
	if b.bins != nil {
		_ = os.RemoveAll(b.bins.dir)
	}
}
