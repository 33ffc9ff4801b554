package main

import (
	"context"
	"fmt"
	"time"

	"github.com/baton-run/baton/work"
)

// holder runs batonbench (cli.Main with a no-op handler, default settings)
// over HolderJobs jobs enqueued beforehand, waits until every one is
// acknowledged, reads its peak RSS (VmHWM) and drains it with SIGTERM.
func (b *bench) holder(ctx context.Context) error {
	bins, err := b.binaries(ctx)
	if err != nil {
		return err
	}
	for r := 1; r <= b.cfg.Runs; r++ {
		v, err := holderRun(ctx, b.srv, bins, b.cfg.HolderJobs)
		if err != nil {
			return fmt.Errorf("holder, run %d: %w", r, err)
		}
		b.res.add("holder_rss_kb", "KiB", v)
		progress("run %d/%d  holder_rss_kb  %s KiB after %d jobs", r, b.cfg.Runs, num(v), b.cfg.HolderJobs)
	}
	return nil
}

func holderRun(ctx context.Context, srv *redisServer, bins *binaries, n int) (float64, error) {
	s, err := newScene(srv, "holder")
	if err != nil {
		return 0, err
	}
	defer s.close()
	rdb := srv.Client(1)
	defer rdb.Close()
	if err := fill(ctx, rdb, s.queue, n); err != nil {
		return 0, err
	}
	h, err := s.start(bins.batonbench, s.args("--slots", "1", "--standby-slots", "0", "--lifetime", "10m"))
	if err != nil {
		return 0, err
	}
	stream := work.KeysFor(s.queue).Stream
	for end := time.Now().Add(runTimeout); ; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			return 0, fmt.Errorf("%d jobs not done in %s\n%s", n, runTimeout, s.logTail(0))
		}
		if h.ProcessState != nil || ctx.Err() != nil {
			return 0, fmt.Errorf("holder stopped early\n%s", s.logTail(0))
		}
		left, err := rdb.XLen(ctx, stream).Result()
		if err != nil {
			return 0, err
		}
		if left == 0 {
			break
		}
	}
	if err := drained(ctx, rdb, s.queue); err != nil {
		return 0, err
	}
	kb, err := vmHWM(h.Process.Pid)
	if err != nil {
		return 0, err
	}
	if err := stop(h); err != nil {
		return 0, fmt.Errorf("holder: %v\n%s", err, s.logTail(0))
	}
	return kb, nil
}
