package main

import (
	"context"
	"fmt"
	"slices"
)

// fleet measures fleet mode (lock_backend redis) on two simulated hosts,
// each its own lock dir and --host, sharing one run and one standby lease:
// the hand-over from a holder retiring on one host to the standby on the
// other (the gap in service, as promotion measures it: the retiring
// holder's last job end to the promoted standby's first job start), and
// the wall time of a losing candidate, which asks Redis (one acquire
// script per slot set: run, then standby).
func (b *bench) fleet(ctx context.Context) error {
	bins, err := b.binaries(ctx)
	if err != nil {
		return err
	}
	hosts := []string{"h1", "h2"}
	for r := 1; r <= b.cfg.Runs; r++ {
		gaps, err := promotionRun(ctx, b.srv, bins, b.cfg.FleetSamples, b.poll, hosts...)
		if err != nil {
			return fmt.Errorf("fleet hand-over, run %d: %w", r, err)
		}
		p50, p99 := percentile(gaps, 50), percentile(gaps, 99)
		b.res.add("fleet_handover_p50_ms", "ms", p50)
		b.res.add("fleet_handover_p99_ms", "ms", p99)
		progress("run %d/%d  fleet hand-over p50 %s ms, p99 %s ms, max %s ms, %d over 50 ms (%d hand-overs, 2 hosts)",
			r, b.cfg.Runs, num(p50), num(p99), num(slices.Max(gaps)), over(gaps, 50), len(gaps))
		walls, _, err := loserRun(ctx, b.srv, bins, b.cfg.FleetSamples, hosts...)
		if err != nil {
			return fmt.Errorf("fleet loser, run %d: %w", r, err)
		}
		p50, p99 = percentile(walls, 50), percentile(walls, 99)
		b.res.add("fleet_loser_p50_ms", "ms", p50)
		b.res.add("fleet_loser_p99_ms", "ms", p99)
		progress("run %d/%d  fleet loser    wall p50 %s ms, p99 %s ms, max %s ms, %d over 50 ms (%d candidates)",
			r, b.cfg.Runs, num(p50), num(p99), num(slices.Max(walls)), over(walls, 50), len(walls))
	}
	return nil
}

// over counts the values above limit.
func over(vs []float64, limit float64) (n int) {
	for _, v := range vs {
		if v > limit {
			n++
		}
	}
	return n
}
