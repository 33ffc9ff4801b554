package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"syscall"
	"time"
)

// recovery kills a holder with SIGKILL while its job runs, with a standby
// waiting, and measures from just before kill(2) to the moment the same job
// starts again in the promoted standby (the slot's consumer replays its own
// pending entries first). Both stamps use CLOCK_REALTIME. Every kill is one
// value of the figure.
func (b *bench) recovery(ctx context.Context) error {
	bins, err := b.binaries(ctx)
	if err != nil {
		return err
	}
	for r := 1; r <= b.cfg.Runs; r++ {
		for i := 0; i < b.cfg.RecoverySamples; i++ {
			v, err := recoveryRun(ctx, b.srv, bins, b.poll)
			if err != nil {
				return fmt.Errorf("recovery, run %d: %w", r, err)
			}
			b.res.add("recovery_ms", "ms", v)
			progress("run %d/%d  recovery_ms    %s ms", r, b.cfg.Runs, num(v))
		}
	}
	return nil
}

func recoveryRun(ctx context.Context, srv *redisServer, bins *binaries, poll []string) (float64, error) {
	s, err := newScene(srv, "recovery")
	if err != nil {
		return 0, err
	}
	defer s.close()
	rdb := srv.Client(1)
	defer rdb.Close()
	if err := fill(ctx, rdb, s.queue, 0); err != nil {
		return 0, err
	}
	if err := addJobs(ctx, rdb, s.queue, 1, "mark hang"); err != nil {
		return 0, err
	}
	args := s.args(append([]string{"--slots", "1", "--standby-slots", "1", "--lifetime", "1m", "--standby-wait", "1m"}, poll...)...)
	m := &marks{path: s.marks}
	victim, err := s.start(bins.batonbench, args)
	if err != nil {
		return 0, err
	}
	job, err := m.first(10*time.Second, "holder starts the job", started(victim.Process.Pid))
	if err != nil {
		return 0, fmt.Errorf("%w\n%s", err, s.logTail(0))
	}
	sb, err := s.start(bins.batonbench, args)
	if err != nil {
		return 0, err
	}
	pid := sb.Process.Pid
	if err := waitFor(5*time.Second, "candidate takes the standby slot", func() bool { return s.holderPID("standby", 0) == pid }); err != nil {
		return 0, fmt.Errorf("%w\n%s", err, s.logTail(1))
	}
	// Let the standby finish connecting, then kill at a random moment of its
	// poll cycle (up to 1 s of default 500 ms polls), not in step with it.
	time.Sleep(100*time.Millisecond + rand.N(time.Second))
	killed := time.Now()
	if err := victim.Process.Signal(syscall.SIGKILL); err != nil {
		return 0, err
	}
	again, err := m.first(10*time.Second, "job starts again", func(k mark) bool {
		return k.Kind == "S" && k.PID == pid && k.Job == job.Job
	})
	if err != nil {
		return 0, fmt.Errorf("%w\n%s", err, s.logTail(1))
	}
	_ = victim.Wait()
	if err := stop(sb); err != nil {
		return 0, fmt.Errorf("promoted standby: %v", err)
	}
	return float64(again.At.Sub(killed)) / float64(time.Millisecond), nil
}
