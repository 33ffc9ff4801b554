package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// loser starts the real baton binary, exactly as cron would (exec mode,
// default logging), while a holder and a standby hold every slot; each
// candidate's whole-process wall time (fork to reaped, seen from here) is one
// value, and so is each traced candidate's peak RSS (VmHWM at its exit).
func (b *bench) loser(ctx context.Context) error {
	bins, err := b.binaries(ctx)
	if err != nil {
		return err
	}
	for r := 1; r <= b.cfg.Runs; r++ {
		walls, rss, err := loserRun(ctx, b.srv, bins, b.cfg.LoserSamples)
		if err != nil {
			return fmt.Errorf("loser, run %d: %w", r, err)
		}
		for i := range walls {
			b.res.add("loser_wall_ms", "ms", walls[i])
			b.res.add("loser_rss_kb", "KiB", rss[i])
		}
		progress("run %d/%d  loser          wall p50 %s ms, rss p50 %s KiB (%d candidates)",
			r, b.cfg.Runs, num(percentile(walls, 50)), num(percentile(rss, 50)), len(walls))
	}
	return nil
}

// loserRun measures n losing candidates; with hosts, in a fleet of those
// simulated hosts (lock_backend redis), where a loser asks Redis.
func loserRun(ctx context.Context, srv *redisServer, bins *binaries, n int, hosts ...string) (walls, rss []float64, err error) {
	s, err := newScene(srv, "loser")
	if err != nil {
		return nil, nil, err
	}
	defer s.close()
	rdb := srv.Client(1)
	defer rdb.Close()
	if err := fill(ctx, rdb, s.queue, 0); err != nil {
		return nil, nil, err
	}
	if len(hosts) > 0 { // after fill's FLUSHALL, which takes the fresh mark with it
		s.fleet(hosts...)
	}
	args := s.args("--slots", "1", "--standby-slots", "1", "--lifetime", "1m", "--standby-wait", "1m")
	for i, role := range []string{"run", "standby"} {
		c, err := s.start(bins.batonbench, args)
		if err != nil {
			return nil, nil, err
		}
		pid := c.Process.Pid
		if err := waitFor(5*time.Second, role+" slot taken", func() bool { return s.holderPID(role, 0) == pid }); err != nil {
			return nil, nil, fmt.Errorf("%w\n%s", err, s.logTail(i))
		}
	}
	argv := append([]string{bins.baton}, withFlags(append(args, "--", trueCmd), s.hostArgs(len(s.procs)))...)
	for i := 0; i < n; i++ {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		var out bytes.Buffer
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Stdout, cmd.Stderr = &out, &out
		start := time.Now()
		err := cmd.Run()
		wall := time.Since(start)
		if err != nil || out.Len() > 0 {
			return nil, nil, fmt.Errorf("a losing candidate must exit 0 and print nothing: %v: %s", err, out.String())
		}
		walls = append(walls, float64(wall)/float64(time.Millisecond))
	}
	// Memory from separate, traced candidates: the tracing stops cost time.
	out, err := os.Create(filepath.Join(s.dir, "traced.log"))
	if err != nil {
		return nil, nil, err
	}
	defer out.Close()
	for i := 0; i < n; i++ {
		kb, code, err := tracedPeakRSS(argv, out)
		if err != nil || code != 0 {
			return nil, nil, fmt.Errorf("traced losing candidate: exit %d: %v", code, err)
		}
		rss = append(rss, kb)
	}
	if fi, err := out.Stat(); err == nil && fi.Size() > 0 {
		return nil, nil, fmt.Errorf("a losing candidate printed something: see %s", out.Name())
	}
	for _, c := range s.procs {
		if err := stop(c); err != nil {
			return nil, nil, fmt.Errorf("stop holder: %v", err)
		}
	}
	return walls, rss, nil
}
