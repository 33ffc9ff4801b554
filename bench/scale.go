package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/baton-run/baton/work"
)

// The scaling benchmark (make bench-scale, issue 13): a burst of 5 ms jobs
// worked by min_slots = 1 of slots = 4 with autoscaling, against one holder
// (autoscaling off: cron keeps the one slot), and a steady load one holder
// serves, to count scale-ups that should not happen.

// scaleConfig is what bench-scale measures.
type scaleConfig struct {
	Jobs    int           // jobs in the burst
	JobTime time.Duration // each job's handler time
	Repeats int           // autoscaled bursts; the off burst runs once
	Steady  time.Duration // length of the steady-load run; 0 skips it
	Rate    int           // steady load, jobs per second
	Celery  string        // python3 with celery and redis: also burst onto celery --autoscale=4,1 ("": skip)
}

// celeryResult is celery/burst.py's output; times in seconds.
type celeryResult struct {
	Enqueue      float64  `json:"enqueue_s"`
	AllBusy      *float64 `json:"all_busy_s"`
	Drain        float64  `json:"drain_s"`
	Back         float64  `json:"back_s"`
	ProcSeconds  float64  `json:"process_seconds"`
	TailProcSecs float64  `json:"tail_process_seconds"`
}

// celeryBurst runs celery/burst.py against srv: the same burst onto a Celery
// worker started with --autoscale=4,1.
func celeryBurst(ctx context.Context, srv *redisServer, c scaleConfig) (*celeryResult, error) {
	cmd := exec.CommandContext(ctx, c.Celery, "celery/burst.py", strconv.Itoa(c.Jobs), "4", "1")
	cmd.Env = append(os.Environ(), "BENCH_BROKER="+srv.URL(), "BENCH_JOB_TIME="+strconv.FormatFloat(c.JobTime.Seconds(), 'f', -1, 64))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("celery burst: %w", err)
	}
	var r celeryResult
	if err := json.Unmarshal(out, &r); err != nil {
		return nil, fmt.Errorf("celery burst: %w: %s", err, out)
	}
	return &r, nil
}

// burstResult is one burst.
type burstResult struct {
	allBusy       time.Duration // burst start to the 4th holder's first job (0: never)
	drain         time.Duration // burst start to no job waiting or pending
	backToOne     time.Duration // queue empty to one run slot held (0: not measured)
	holderSeconds float64       // run slots held, integrated from burst start to drained
	tailSeconds   float64       // and from drained until back to one holder
	scaleUps      int           // "scale up" log lines
}

func scaleMain(ctx context.Context, c scaleConfig, w io.Writer) error {
	srv, err := startRedis()
	if err != nil {
		return err
	}
	defer srv.Close()
	progress("building baton and batonbench")
	bins, err := build(ctx)
	if err != nil {
		return err
	}
	defer os.RemoveAll(bins.dir)
	var on []burstResult
	for i := 0; i < c.Repeats; i++ {
		progress("burst %d/%d: %d jobs of %s, min_slots 1, slots 4", i+1, c.Repeats, c.Jobs, c.JobTime)
		r, err := burst(ctx, srv, bins, c, true, fmt.Sprintf("on%d", i))
		if err != nil {
			return err
		}
		progress("  all 4 busy %s, drained %s, back to 1 holder %s after, %.0f holder-s", r.allBusy, r.drain, r.backToOne, r.holderSeconds)
		on = append(on, r)
	}
	progress("burst without autoscaling: %d jobs, slots 1", c.Jobs)
	off, err := burst(ctx, srv, bins, c, false, "off")
	if err != nil {
		return err
	}
	progress("  drained %s, %.0f holder-s", off.drain, off.holderSeconds)
	var cel *celeryResult
	if c.Celery != "" {
		progress("celery --autoscale=4,1: %d tasks of %s", c.Jobs, c.JobTime)
		if cel, err = celeryBurst(ctx, srv, c); err != nil {
			return err
		}
		busy := "never"
		if cel.AllBusy != nil {
			busy = fmt.Sprintf("%.2fs", *cel.AllBusy)
		}
		progress("  enqueued %.1fs, 4 processes %s, drained %.1fs, back to 1 process %.1fs after, %.0f + %.0f process-s",
			cel.Enqueue, busy, cel.Drain, cel.Back, cel.ProcSeconds, cel.TailProcSecs)
	}
	steadyUps, steadyHolders := -1, 0
	if c.Steady > 0 {
		progress("steady load: %d jobs/s of %s for %s", c.Rate, c.JobTime, c.Steady)
		if steadyUps, steadyHolders, err = steady(ctx, srv, bins, c); err != nil {
			return err
		}
	}
	med := func(f func(burstResult) time.Duration) time.Duration {
		v := make([]time.Duration, len(on))
		for i, r := range on {
			v[i] = f(r)
		}
		sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
		return v[len(v)/2]
	}
	hs, ts := make([]float64, len(on)), make([]float64, len(on))
	for i, r := range on {
		hs[i], ts[i] = r.holderSeconds, r.tailSeconds
	}
	sort.Float64s(hs)
	sort.Float64s(ts)
	fmt.Fprintf(w, "%s\n\n", describe(srv.Version))
	fmt.Fprintf(w, "| figure | autoscale (min_slots 1, slots 4), p50 of %d | off (1 holder) | target |\n| --- | --- | --- | --- |\n", c.Repeats)
	fmt.Fprintf(w, "| all 4 slots busy after the burst | %s | - | ≤ 3s |\n", med(func(r burstResult) time.Duration { return r.allBusy }).Round(10*time.Millisecond))
	d := med(func(r burstResult) time.Duration { return r.drain })
	fmt.Fprintf(w, "| %d jobs of %s drained | %s | %s | ≥ 3× faster (%.1f×) |\n", c.Jobs, c.JobTime, d.Round(100*time.Millisecond), off.drain.Round(100*time.Millisecond), off.drain.Seconds()/d.Seconds())
	fmt.Fprintf(w, "| holder-seconds until drained | %.0f | %.0f | - |\n", hs[len(hs)/2], off.holderSeconds)
	fmt.Fprintf(w, "| holder-seconds from drained to 1 holder (the idle_exit tail) | %.0f | 0 | - |\n", ts[len(ts)/2])
	fmt.Fprintf(w, "| back to 1 holder after the queue empties | %s | - | ≤ idle_exit + 5s = 35s |\n", med(func(r burstResult) time.Duration { return r.backToOne }).Round(100*time.Millisecond))
	if steadyUps >= 0 {
		fmt.Fprintf(w, "| scale-ups under a steady %d jobs/s for %s | %d (most holders seen: %d) | - | 0 |\n", c.Rate, c.Steady, steadyUps, steadyHolders)
	}
	if cel != nil {
		busy := "never"
		if cel.AllBusy != nil {
			busy = fmt.Sprintf("%.2fs", *cel.AllBusy)
		}
		fmt.Fprintf(w, "\nThe same burst onto Celery %s (`celery worker --autoscale=4,1`, prefork, Redis broker, one run; enqueueing took %.1fs of it):\n\n", celeryVersion(c.Celery), cel.Enqueue)
		fmt.Fprintf(w, "| figure | celery --autoscale=4,1 |\n| --- | --- |\n| 4 pool processes | %s |\n| drained | %.1fs |\n| process-seconds until drained | %.0f |\n| back to 1 process after | %.1fs |\n| process-seconds of that tail | %.0f |\n",
			busy, cel.Drain, cel.ProcSeconds, cel.Back, cel.TailProcSecs)
	}
	fmt.Fprintln(w, "\nEach run, autoscale: every burst run, in order")
	for i, r := range on {
		fmt.Fprintf(w, "- run %d: all busy %s, drained %s, back to 1 holder %s after, %.0f + %.0f holder-s, %d scale-up rounds\n", i+1,
			r.allBusy.Round(10*time.Millisecond), r.drain.Round(100*time.Millisecond), r.backToOne.Round(100*time.Millisecond), r.holderSeconds, r.tailSeconds, r.scaleUps)
	}
	return nil
}

// burst starts a holder as cron would (and again every minute), waits until
// it holds run-0, enqueues the burst and measures.
func burst(ctx context.Context, srv *redisServer, bins *binaries, c scaleConfig, auto bool, queue string) (burstResult, error) {
	var r burstResult
	s, err := newScene(srv, queue)
	if err != nil {
		return r, err
	}
	defer s.close()
	defer killHolders(s, 4)
	slots := []string{"--slots", "4", "--min-slots", "1"}
	if !auto {
		slots = []string{"--slots", "1"}
	}
	args := s.args(append(slots, "--lifetime", "10m", "--jitter", "0s", "--log-level", "info", "--log-format", "json")...)
	stopCron := cron(s, bins.batonbench, args)
	defer stopCron()
	if err := waitFor(10*time.Second, "a holder in run-0", func() bool { return s.holderPID("run", 0) != 0 }); err != nil {
		return r, err
	}
	rdb := srv.Client(0)
	defer rdb.Close()
	payload := []byte("mark sleep=" + c.JobTime.String())
	t0 := time.Now()
	msgs := make([]work.Message, 0, 1000)
	for done := 0; done < c.Jobs; done += len(msgs) {
		msgs = msgs[:0]
		for i := done; i < min(done+1000, c.Jobs); i++ {
			msgs = append(msgs, work.Message{Payload: payload})
		}
		if _, err := work.EnqueueMany(ctx, rdb, queue, msgs); err != nil {
			return r, err
		}
	}
	m := &marks{path: s.marks}
	pids := map[int]bool{}
	var held float64
	last := t0
	for {
		if err := ctx.Err(); err != nil {
			return r, err
		}
		time.Sleep(50 * time.Millisecond)
		now := time.Now()
		h := heldRun(s, 4)
		held += float64(h) * now.Sub(last).Seconds()
		last = now
		for _, k := range m.poll() {
			if k.Kind == "S" && !pids[k.PID] {
				pids[k.PID] = true
				if len(pids) == 4 && auto {
					r.allBusy = k.At.Sub(t0)
				}
			}
		}
		cn, err := work.ReadCounts(ctx, rdb, queue)
		if err != nil {
			return r, err
		}
		if cn.Waiting+cn.Pending == 0 && cn.Done >= int64(c.Jobs) {
			r.drain = now.Sub(t0)
			break
		}
		if now.Sub(t0) > 30*time.Minute {
			return r, fmt.Errorf("burst %s: not drained in 30m (%d done)", queue, cn.Done)
		}
	}
	r.holderSeconds = held
	if auto {
		empty := time.Now()
		last = empty
		if err := waitFor(2*time.Minute, "back to one holder", func() bool {
			now := time.Now()
			h := heldRun(s, 4)
			r.tailSeconds += float64(h) * now.Sub(last).Seconds()
			last = now
			return h == 1
		}); err != nil {
			return r, err
		}
		r.backToOne = time.Since(empty)
	}
	r.scaleUps = countLogs(s, `"scale up"`)
	return r, nil
}

// steady feeds c.Rate jobs a second for c.Steady to min_slots 1 of 4 and
// returns the scale-up rounds logged and the most run slots seen held.
func steady(ctx context.Context, srv *redisServer, bins *binaries, c scaleConfig) (ups, most int, err error) {
	s, err := newScene(srv, "steady")
	if err != nil {
		return 0, 0, err
	}
	defer s.close()
	defer killHolders(s, 4)
	args := s.args("--slots", "4", "--min-slots", "1", "--lifetime", "10m", "--jitter", "0s", "--log-level", "info", "--log-format", "json")
	stopCron := cron(s, bins.batonbench, args)
	defer stopCron()
	if err := waitFor(10*time.Second, "a holder in run-0", func() bool { return s.holderPID("run", 0) != 0 }); err != nil {
		return 0, 0, err
	}
	rdb := srv.Client(0)
	defer rdb.Close()
	payload := []byte("mark sleep=" + c.JobTime.String())
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	per := max(c.Rate/100, 1)
	end := time.Now().Add(c.Steady)
	for time.Now().Before(end) {
		select {
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		case <-tick.C:
		}
		msgs := make([]work.Message, per)
		for i := range msgs {
			msgs[i] = work.Message{Payload: payload}
		}
		if _, err := work.EnqueueMany(ctx, rdb, "steady", msgs); err != nil {
			return 0, 0, err
		}
		most = max(most, heldRun(s, 4))
	}
	return countLogs(s, `"scale up"`), most, nil
}

// cron starts a candidate now and every minute, as `* * * * *` would.
func cron(s *scene, bin string, args []string) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(time.Minute)
		defer t.Stop()
		for {
			if _, err := s.start(bin, args); err != nil {
				progress("cron: %v", err)
			}
			select {
			case <-quit:
				return
			case <-t.C:
			}
		}
	}()
	return func() { close(quit); <-done }
}

// heldRun counts the scene's held run slots, from their records.
func heldRun(s *scene, n int) (h int) {
	for i := 0; i < n; i++ {
		if s.holderPID("run", i) != 0 {
			h++
		}
	}
	return h
}

// killHolders kills every holder and standby of the scene, those started
// by holders (scale-up candidates, not our children) included.
func killHolders(s *scene, n int) {
	for _, role := range []string{"run", "standby"} {
		for i := 0; i < n; i++ {
			if pid := s.holderPID(role, i); pid != 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
}

// countLogs counts the lines holding what in the scene's process logs
// (scale-up candidates write to their parent's).
func countLogs(s *scene, what string) (n int) {
	logs, _ := filepath.Glob(filepath.Join(s.dir, "proc-*.log"))
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		n += strings.Count(string(b), what)
	}
	return n
}

func celeryVersion(python string) string {
	out, err := exec.Command(python, "-c", "import celery; print(celery.__version__)").Output()
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(out))
}
