package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/baton-run/baton/work"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
)

// The workers group: baton's persistent mode (issue 12) side by side with the
// tools a Python or Node team would otherwise run, on the same Redis, with
// the same no-op handler and the same 64-byte payload:
//
//   - py_persistent_c1: work.Run with work.Persistent running
//     examples/python/baton_worker.py, concurrency 1; rq_simple_c1: rq's
//     SimpleWorker (no fork per job), burst mode; celery_prefork_c1: a Celery
//     worker, prefork pool, concurrency 1, Redis broker.
//   - node_persistent_c1: the same with examples/node/baton-worker.js;
//     bullmq_c1: a BullMQ Worker, concurrency 1.
//   - go_1ms_c1 and persistent_1ms_c1: jobs of 1 ms in process (Go) and in a
//     persistent Python child.
//   - protocol_p50_us, protocol_p99_us: one job frame to a no-op Python child
//     and its result back, without Redis.
//
// Each contender also reports Redis commands per job: the calls counted by
// INFO commandstats (commands run inside Lua scripts included) from just
// after the jobs were enqueued to the end of the run, divided by the jobs.
//
// baton's clock starts when work.Run is called (the child's start is
// included) and stops at the n-th result; rq's, Celery's and BullMQ's start
// at their first job's start and stop at the n-th job's return, over n-1
// jobs, so their own start-up is never counted against them.

// pythonBin is the interpreter of every Python contender: Debian's, the one
// python3-rq and python3-celery are installed for.
const pythonBin = "/usr/bin/python3"

// workerTimeout bounds one run of an outside worker.
const workerTimeout = 3 * time.Minute

func (b *bench) workers(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "baton-bench-workers-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := writeWorkerFiles(dir); err != nil {
		return err
	}
	examples, err := filepath.Abs(filepath.Join("..", "examples"))
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(examples, "python", "baton_worker.py")); err != nil {
		return errors.New("run the bench from its directory, bench/ (make bench does): the workers group runs ../examples")
	}
	if err := checkPython(); err != nil {
		return err
	}
	nodeModules := bullmqDir()
	withBullMQ := nodeModules != ""
	if !withBullMQ {
		progress("workers: bullmq not installed in %s (scripts/install-bench-deps.sh installs it): bullmq_c1 not measured", bullmqCache())
	}
	n, slow := b.cfg.Jobs, b.cfg.ExecJobs*2 // rq and Celery run a few hundred jobs a second
	py := []string{pythonBin, "-c", "import sys; sys.path.insert(0, " + strconv.Quote(filepath.Join(examples, "python")) +
		"); import baton_worker; baton_worker.serve(lambda payload, job: None)"}
	py1ms := []string{pythonBin, "-c", "import sys, time; sys.path.insert(0, " + strconv.Quote(filepath.Join(examples, "python")) +
		"); import baton_worker; baton_worker.serve(lambda payload, job: time.sleep(0.001))"}
	node := []string{"node", "-e", "require(" + strconv.Quote(filepath.Join(examples, "node", "baton-worker.js")) + ").serve(() => {})"}
	cs := []contender{
		{"py_persistent_c1", "jobs/s", func() (float64, error) { return b.persistentRate(ctx, "py_persistent", py, n) }},
		{"rq_simple_c1", "jobs/s", func() (float64, error) { return b.pyWorkerRate(ctx, dir, "rq", slow) }},
		{"celery_prefork_c1", "jobs/s", func() (float64, error) { return b.pyWorkerRate(ctx, dir, "celery", slow) }},
		{"node_persistent_c1", "jobs/s", func() (float64, error) { return b.persistentRate(ctx, "node_persistent", node, n) }},
	}
	if withBullMQ {
		cs = append(cs, contender{"bullmq_c1", "jobs/s", func() (float64, error) { return b.bullmqRate(ctx, dir, nodeModules, n/4) }})
	}
	cs = append(cs,
		contender{"go_1ms_c1", "jobs/s", func() (float64, error) { return sleepRate(ctx, b.srv, b.cfg.ExecJobs) }},
		contender{"persistent_1ms_c1", "jobs/s", func() (float64, error) {
			return b.persistentRate(ctx, "", py1ms, b.cfg.ExecJobs)
		}},
		contender{"protocol_p50_us", "µs", func() (float64, error) { return b.roundTrip(ctx, py, n/4) }},
	)
	return b.rounds(ctx, cs)
}

// persistentRate is work.Run with a persistent child running argv over n
// jobs, at concurrency 1. With a name, it also records name_cmds_per_job.
func (b *bench) persistentRate(ctx context.Context, name string, argv []string, n int) (float64, error) {
	p := &work.Persistent{Argv: argv, Logger: zerolog.Nop()}
	defer p.Close(context.Background())
	c := newCounter(n)
	h := work.HandlerFunc(func(ctx context.Context, j *work.Job) error {
		err := p.Handle(ctx, j)
		if err == nil {
			c.hit()
		}
		return err
	})
	rdb := b.srv.Client(1)
	defer rdb.Close()
	var calls int64
	rate, err := batonRate(ctx, b.srv, 1, n, h, c, func() error {
		var err error
		calls, err = resetCommands(ctx, rdb)
		return err
	})
	if err != nil || name == "" {
		return rate, err
	}
	after, err := countCommands(ctx, rdb)
	if err != nil {
		return 0, err
	}
	b.res.add(name+"_cmds_per_job", "commands", float64(after-calls)/float64(n))
	return rate, nil
}

// sleepRate is library mode with an in-process Go handler of 1 ms.
func sleepRate(ctx context.Context, srv *redisServer, n int) (float64, error) {
	c := newCounter(n)
	h := work.HandlerFunc(func(context.Context, *work.Job) error { time.Sleep(time.Millisecond); c.hit(); return nil })
	return batonRate(ctx, srv, 1, n, h, c, nil)
}

// roundTrip measures n protocol round trips to a warm no-op child, without
// Redis, and records their p99; it returns their p50, in µs.
func (b *bench) roundTrip(ctx context.Context, argv []string, n int) (float64, error) {
	p := &work.Persistent{Argv: argv, Logger: zerolog.Nop()}
	defer p.Close(context.Background())
	j := &work.Job{ID: "1700000000000-0", Attempt: 1, Queue: "bench", Payload: payload}
	if err := p.Handle(ctx, j); err != nil { // the child's start is not a round trip
		return 0, err
	}
	took := make([]float64, 0, n)
	for i := 0; i < n; i++ {
		start := time.Now()
		if err := p.Handle(ctx, j); err != nil {
			return 0, err
		}
		took = append(took, float64(time.Since(start))/float64(time.Microsecond))
	}
	slices.Sort(took)
	b.res.add("protocol_p99_us", "µs", took[len(took)*99/100])
	return took[len(took)/2], nil
}

// pyWorkerRate enqueues n jobs with tool ("rq" or "celery"), untimed, then
// runs its worker until the n-th job returns. It records tool's commands per
// job and returns its jobs per second.
func (b *bench) pyWorkerRate(ctx context.Context, dir, tool string, n int) (float64, error) {
	env := []string{"PYTHONPATH=" + dir, "BENCH_REDIS_URL=" + b.srv.URL(), "BENCH_N=" + strconv.Itoa(n),
		"BENCH_PAYLOAD=" + string(payload)}
	enqueue := []string{pythonBin, filepath.Join(dir, tool+"_enqueue.py")}
	var worker []string
	switch tool {
	case "rq":
		worker = []string{pythonBin, filepath.Join(dir, "rq_work.py")}
	case "celery":
		worker = []string{pythonBin, "-m", "celery", "-A", "celerybench", "worker", "--pool", "prefork",
			"--concurrency", "1", "--loglevel", "WARNING", "--without-gossip", "--without-mingle", "--without-heartbeat"}
	}
	rate, perJob, err := b.outsideWorker(ctx, dir, env, enqueue, worker, n, tool == "celery")
	if err != nil {
		return 0, fmt.Errorf("%s: %w", tool, err)
	}
	name := map[string]string{"rq": "rq_simple", "celery": "celery_prefork"}[tool]
	b.res.add(name+"_cmds_per_job", "commands", perJob)
	return rate, nil
}

// bullmqRate is pyWorkerRate for BullMQ, from the node_modules in mods.
func (b *bench) bullmqRate(ctx context.Context, dir, mods string, n int) (float64, error) {
	env := []string{"NODE_PATH=" + mods, "BENCH_REDIS_URL=" + b.srv.URL(), "BENCH_N=" + strconv.Itoa(n),
		"BENCH_PAYLOAD=" + string(payload)}
	script := filepath.Join(dir, "bullmq.js")
	rate, perJob, err := b.outsideWorker(ctx, dir, env, []string{"node", script, "enqueue"}, []string{"node", script, "work"}, n, false)
	if err != nil {
		return 0, fmt.Errorf("bullmq: %w", err)
	}
	b.res.add("bullmq_cmds_per_job", "commands", perJob)
	return rate, nil
}

// outsideWorker empties the server, runs enqueue, resets Redis's command
// counts, runs worker until it wrote the out file (the n-th job returned),
// stops it when it does not stop itself (SIGTERM to its group, then
// SIGKILL), and returns its rate over n-1 jobs (first start to n-th return)
// and its Redis commands per job.
func (b *bench) outsideWorker(ctx context.Context, dir string, env, enqueue, worker []string, n int, stopIt bool) (rate, perJob float64, err error) {
	rdb := b.srv.Client(1)
	defer rdb.Close()
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		return 0, 0, err
	}
	out := filepath.Join(dir, "out")
	_ = os.Remove(out)
	env = append(append(os.Environ(), env...), "BENCH_OUT="+out)
	cmd := exec.CommandContext(ctx, enqueue[0], enqueue[1:]...)
	cmd.Env, cmd.Dir = env, dir
	if msg, err := cmd.CombinedOutput(); err != nil {
		return 0, 0, fmt.Errorf("enqueue: %v: %s", err, tail(msg))
	}
	before, err := resetCommands(ctx, rdb)
	if err != nil {
		return 0, 0, err
	}
	logPath := filepath.Join(dir, "worker.log")
	log, err := os.Create(logPath)
	if err != nil {
		return 0, 0, err
	}
	defer log.Close()
	w := exec.Command(worker[0], worker[1:]...)
	w.Env, w.Dir, w.Stdout, w.Stderr = env, dir, log, log
	w.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := w.Start(); err != nil {
		return 0, 0, err
	}
	exited := make(chan error, 1)
	go func() { exited <- w.Wait() }()
	defer func() { _ = syscall.Kill(-w.Process.Pid, syscall.SIGKILL) }()
	// Poll the out file every 20 ms, not faster: the worker times itself,
	// and the bench must not take CPU from it meanwhile.
	var took []byte
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for end := time.Now().Add(workerTimeout); err == nil; {
		if took, _ = os.ReadFile(out); len(took) > 0 && took[len(took)-1] == '\n' {
			break
		}
		select {
		case werr := <-exited:
			// A worker that stops itself (BullMQ's) may write the out file
			// and exit between two looks at it: look once more.
			exited <- werr // for the wait below
			if took, _ = os.ReadFile(out); len(took) > 0 && took[len(took)-1] == '\n' {
				continue // the loop's look ends it
			}
			err = fmt.Errorf("worker exited before its n-th job: %v", werr)
		case <-ctx.Done():
			err = ctx.Err()
		case now := <-tick.C:
			if now.After(end) {
				err = fmt.Errorf("the worker's n-th job: not within %s", workerTimeout)
			}
		}
	}
	if err != nil {
		return 0, 0, fmt.Errorf("%v; log: %s", err, tail(readTail(logPath)))
	}
	if stopIt {
		_ = syscall.Kill(-w.Process.Pid, syscall.SIGTERM)
	}
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		// Its timing is in hand: a worker stuck in its warm shutdown (seen
		// with Celery's prefork pool) is killed, not a reason to lose the run.
		progress("%s did not exit in 30s after SIGTERM: killed", worker[0])
		_ = syscall.Kill(-w.Process.Pid, syscall.SIGKILL)
		<-exited
	}
	secs, err := strconv.ParseFloat(strings.TrimSpace(string(took)), 64)
	if err != nil || secs <= 0 {
		return 0, 0, fmt.Errorf("bad timing %q from the worker", took)
	}
	after, err := countCommands(ctx, rdb)
	if err != nil {
		return 0, 0, err
	}
	return float64(n-1) / secs, float64(after-before) / float64(n), nil
}

// resetCommands zeroes Redis's command statistics (CONFIG RESETSTAT) and
// returns the count that a later countCommands must subtract.
func resetCommands(ctx context.Context, rdb *redis.Client) (int64, error) {
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		return 0, err
	}
	return countCommands(ctx, rdb)
}

// countCommands sums the calls of every command in INFO commandstats, but
// for INFO and CONFIG, the bench's own.
func countCommands(ctx context.Context, rdb *redis.Client) (int64, error) {
	s, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, err
	}
	var total int64
	for _, line := range strings.Split(s, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") || name == "cmdstat_info" || strings.HasPrefix(name, "cmdstat_config") {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		v, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("INFO commandstats: %q", line)
		}
		total += v
	}
	return total, nil
}

// checkPython fails with a hint when rq or Celery cannot be imported.
func checkPython() error {
	msg, err := exec.Command(pythonBin, "-c", "import rq, celery, redis").CombinedOutput()
	if err != nil {
		return fmt.Errorf("the workers group needs Debian's python3-rq and python3-celery (scripts/install-bench-deps.sh, run by make bench, installs them): %s", tail(msg))
	}
	return nil
}

// bullmqCache is where scripts/install-bench-deps.sh installs bullmq.
func bullmqCache() string {
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, _ := os.UserHomeDir()
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "baton-bench", "node_modules")
}

// bullmqDir is bullmqCache when bullmq is installed there, else "".
func bullmqDir() string {
	d := bullmqCache()
	for _, pkg := range []string{"bullmq", "ioredis"} {
		if _, err := os.Stat(filepath.Join(d, pkg, "package.json")); err != nil {
			return ""
		}
	}
	return d
}

func readTail(path string) []byte { b, _ := os.ReadFile(path); return b }

// tail is the end of a process's output, for an error message.
func tail(b []byte) string {
	if len(b) > 600 {
		b = b[len(b)-600:]
	}
	return strings.TrimSpace(string(b))
}
