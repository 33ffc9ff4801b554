package main

import (
	"context"
	"fmt"
	"time"
)

// promotion measures hand-overs on one run slot with one standby slot. Each
// holder lives 1–1.5 s (the jitter puts retirements at random points of the
// standby's poll cycle) and works jobs of 1 ms; before it retires a fresh
// candidate takes the standby slot. A sample is the gap in service:
// from the retiring holder's last job end to the promoted standby's first
// job start, both stamped by the jobs themselves (CLOCK_REALTIME).
func (b *bench) promotion(ctx context.Context) error {
	bins, err := b.binaries(ctx)
	if err != nil {
		return err
	}
	for r := 1; r <= b.cfg.Runs; r++ {
		gaps, err := promotionRun(ctx, b.srv, bins, b.cfg.PromotionSamples, b.poll)
		if err != nil {
			return fmt.Errorf("promotion, run %d: %w", r, err)
		}
		p50, p99 := percentile(gaps, 50), percentile(gaps, 99)
		b.res.add("promotion_p50_ms", "ms", p50)
		b.res.add("promotion_p99_ms", "ms", p99)
		progress("run %d/%d  promotion      p50 %s ms, p99 %s ms (%d hand-overs)", r, b.cfg.Runs, num(p50), num(p99), len(gaps))
	}
	return nil
}

// promotionRun measures samples hand-overs; with hosts, in a fleet of those
// simulated hosts (lock_backend redis), candidates alternating between them.
func promotionRun(ctx context.Context, srv *redisServer, bins *binaries, samples int, poll []string, hosts ...string) ([]float64, error) {
	s, err := newScene(srv, "promo")
	if err != nil {
		return nil, err
	}
	defer s.close()
	rdb := srv.Client(1)
	defer rdb.Close()
	// About 1,000 jobs per lifetime are taken; keep the queue from running dry.
	if err := fill(ctx, rdb, s.queue, 0); err != nil {
		return nil, err
	}
	if len(hosts) > 0 { // after fill's FLUSHALL, which takes the fresh mark with it
		s.fleet(hosts...)
	}
	if err := addJobs(ctx, rdb, s.queue, (samples+2)*2000, "mark sleep=1ms"); err != nil {
		return nil, err
	}
	args := s.args(append([]string{"--slots", "1", "--standby-slots", "1", "--lifetime", "1s", "--jitter", "500ms",
		"--standby-wait", "1m", "--shutdown-grace", "5s"}, poll...)...)
	m := &marks{path: s.marks}
	cur, err := s.start(bins.batonbench, args)
	if err != nil {
		return nil, err
	}
	if _, err := m.first(10*time.Second, "first holder starts a job", started(cur.Process.Pid)); err != nil {
		return nil, fmt.Errorf("%w\n%s", err, s.logTail(0))
	}
	var gaps []float64
	for i := 0; i < samples; i++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		next, err := s.start(bins.batonbench, args)
		if err != nil {
			return nil, err
		}
		pid := next.Process.Pid
		if err := waitFor(5*time.Second, "candidate takes the standby slot", func() bool { return s.holderPID("standby", 0) == pid }); err != nil {
			return nil, fmt.Errorf("%w\n%s", err, s.logTail(len(s.procs)-1))
		}
		first, err := m.first(10*time.Second, "standby is promoted and starts a job", started(pid))
		if err != nil {
			return nil, fmt.Errorf("%w\n%s", err, s.logTail(len(s.procs)-1))
		}
		last, ok := m.last("E", cur.Process.Pid)
		if !ok {
			return nil, fmt.Errorf("holder %d finished no job", cur.Process.Pid)
		}
		gaps = append(gaps, float64(first.At.Sub(last.At))/float64(time.Millisecond))
		if err := stop(cur); err != nil {
			return nil, fmt.Errorf("retiring holder: %v", err)
		}
		cur = next
	}
	if err := stop(cur); err != nil {
		return nil, fmt.Errorf("last holder: %v", err)
	}
	return gaps, nil
}

// started matches the first job start by pid.
func started(pid int) func(mark) bool {
	return func(k mark) bool { return k.Kind == "S" && k.PID == pid }
}
