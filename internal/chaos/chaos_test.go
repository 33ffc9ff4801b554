// Package chaos runs baton under fire: a cron stand-in starting real baton
// processes every second, a chaos monkey that kill -9s, SIGTERMs and freezes
// (SIGSTOP) holders and standbys, a Redis restart, failing, hanging and
// poison jobs. It checks that no job is lost, that only poison jobs are
// dead-lettered, that every frozen holder is healed (killed by a candidate
// or standby once past its hard deadline), and that no process is left.
//
// A short run is part of `go test ./...`; `make chaos` runs the full one
// (20,000 jobs, 10 runs in a row), `make chaos-persistent` the same with
// persistent children (TestChaosPersistent). TestChaosFleet (fleet_test.go)
// is fleet mode under fire: 3 simulated hosts sharing Redis leases while
// holders are kill -9'd or stopped; `make chaos-fleet` runs it with 20,000
// jobs.
package chaos

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/baton-run/baton/cli"
	"github.com/baton-run/baton/history"
	"github.com/baton-run/baton/holder"
	"github.com/baton-run/baton/internal/proc"
	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/lock"
	"github.com/baton-run/baton/work"
	"github.com/redis/go-redis/v9"
)

var (
	jobsFlag   = flag.Int("chaos.jobs", 1000, "jobs per run")
	runsFlag   = flag.Int("chaos.runs", 1, "runs in a row")
	spawnFlag  = flag.Int("chaos.spawn", 1, "candidates per cron firing")
	monkeyFlag = flag.Bool("chaos.monkey", true, "kill -9, SIGTERM and SIGSTOP holders and standbys")
)

// runMark is in the environment of every process a run starts: what still
// carries it after the run has escaped.
const runMark = "BATON_CHAOS_RUN"

const (
	asBaton      = "BATON_CHAOS_AS_BATON"
	asPersistent = "BATON_CHAOS_PERSISTENT" // with asBaton: run --persistent, children are this binary
	chaosRedis   = "BATON_CHAOS_REDIS"      // the Redis URL for children (baton keeps its own from them)
	queue        = "chaos"
	slots        = 4
	runsKey      = "chaos:runs" // hash: job payload → completed runs
	byKey        = "chaos:by"   // list: "payload pid ppid unix-ms" per completed run
	oddKey       = "chaos:odd"  // hash: what the persistent children did wrong, by kind → times
	selfKillKey  = "chaos:self" // set: pids a poison job killed (a holder, or a persistent child)
)

// Poison jobs: they always fail, or always kill their own holder.
var poison = map[string]string{
	"poison-fail-1": work.ReasonFailed, "poison-fail-2": work.ReasonFailed,
	"poison-crash-1": work.ReasonCrashed, "poison-crash-2": work.ReasonCrashed,
}

func TestMain(m *testing.M) {
	switch {
	case os.Getenv("BATON_PROTOCOL") != "":
		os.Exit(worker()) // a persistent holder's child
	case os.Getenv(asBaton) == "1" && os.Getenv(asWorkflows) == "1":
		os.Exit(cli.Main(context.Background(), os.Args[1:], cli.Options{Handler: workflowsHandler()}))
	case os.Getenv(asBaton) == "1" && os.Getenv(asPeriodic) == "1":
		os.Exit(cli.Main(context.Background(), os.Args[1:], cli.Options{Handler: periodicHandler()}))
	case os.Getenv(asBaton) == "1" && os.Getenv(asFleet) == "1":
		os.Exit(cli.Main(context.Background(), os.Args[1:], cli.Options{Handler: fleetHandler()}))
	case os.Getenv(asBaton) == "1" && os.Getenv(asPersistent) == "1":
		os.Exit(cli.Main(context.Background(), os.Args[1:], cli.Options{}))
	case os.Getenv(asBaton) == "1":
		os.Exit(cli.Main(context.Background(), os.Args[1:], cli.Options{Handler: handler()}))
	}
	os.Exit(m.Run())
}

// handler is the chaos job: it records each completion in Redis, fails ~10%
// of first attempts, hangs ~0.5% of first attempts (ignoring its context, so
// only the hard deadline ends it), and plays the poison ids.
func handler() work.Handler {
	opt, _ := redis.ParseURL(os.Getenv("BATON_REDIS_URL"))
	rdb := redis.NewClient(opt)
	return work.HandlerFunc(func(ctx context.Context, j *work.Job) error {
		return chaosJob(rdb, j.Payload, j.Attempt)
	})
}

// chaosJob is one job, in a holder (handler) or in a persistent child
// (worker), where a crash kills the child and a hang lasts until job_timeout.
// A completed run is counted, and recorded with who ran it (pid, and the
// parent: a child's holder) and when, to explain duplicates.
func chaosJob(rdb *redis.Client, payload []byte, attempt int) error {
	p := string(payload)
	switch poison[p] {
	case work.ReasonFailed:
		return errors.New("poison: always fails")
	case work.ReasonCrashed:
		rdb.SAdd(context.Background(), selfKillKey, os.Getpid())
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	roll := rollOf(payload)
	if attempt == 1 && roll < 100 {
		return errors.New("transient failure")
	}
	if attempt == 1 && roll >= 100 && roll < 105 {
		time.Sleep(time.Hour) // hung: deaf to ctx (select{} would be a deadlock in a child)
	}
	time.Sleep(time.Duration(1+roll%3) * time.Millisecond)
	ran := fmt.Sprintf("%s %d %d %d", p, os.Getpid(), os.Getppid(), time.Now().UnixMilli())
	_, err := rdb.TxPipelined(context.Background(), func(tx redis.Pipeliner) error {
		tx.HIncrBy(context.Background(), runsKey, p, 1)
		tx.RPush(context.Background(), byKey, ran)
		return nil
	})
	return err
}

// rollOf is a payload's fixed die roll in [0, 1000): what its first attempt does.
func rollOf(payload []byte) uint32 {
	h := fnv.New32a()
	h.Write(payload)
	return h.Sum32() % 1000
}

func TestChaos(t *testing.T) {
	for run := 1; run <= *runsFlag; run++ {
		t.Run(fmt.Sprintf("run %d of %d", run, *runsFlag), func(t *testing.T) { chaosRun(t, *jobsFlag, false) })
	}
}

// TestChaosPersistent is the same run in persistent mode: each holder feeds
// long-lived children (this binary, speaking the worker protocol), recycled
// every 200 jobs or so, and the monkey kill -9s children as well as holders.
// The children misbehave too: about one job in 50 is its child's last (it
// exits 0 between jobs), and half the first attempts that fail are answered
// twice (error, then a late ok). Neither may lose a job, dead-letter an
// innocent one or run one twice: every duplicate must be explained by a kill.
func TestChaosPersistent(t *testing.T) {
	for run := 1; run <= *runsFlag; run++ {
		t.Run(fmt.Sprintf("run %d of %d", run, *runsFlag), func(t *testing.T) { chaosRun(t, *jobsFlag, true) })
	}
}

// fleet is the cron stand-in's processes.
type fleet struct {
	t      *testing.T
	env    []string
	args   []string
	log    *os.File
	mu     sync.Mutex
	cmds   []*exec.Cmd
	exits1 atomic.Int64 // holders that exited 1 (hard deadline)
	hit    *touched     // the processes that were killed, stopped or cut short
}

func (f *fleet) fire() {
	cmd := exec.Command(os.Args[0], f.args...)
	cmd.Env = f.env
	cmd.Stderr = f.log
	if err := cmd.Start(); err != nil {
		f.t.Errorf("start candidate: %v", err)
		return
	}
	f.mu.Lock()
	f.cmds = append(f.cmds, cmd)
	f.mu.Unlock()
	go func() {
		if err := cmd.Wait(); err != nil && cmd.ProcessState.ExitCode() == 1 {
			f.exits1.Add(1)
			f.hit.add(cmd.Process.Pid) // its jobs were cut short
		}
	}()
}

// touched is the set of pids that were kill -9'd (by the monkey or by a
// poison job), SIGTERMed, frozen or left by their hard deadline: a job they ran may run again (at-least-once),
// and that is the only excuse for a duplicate.
type touched struct {
	mu sync.Mutex
	m  map[int]bool
}

func (s *touched) add(pid int) { s.mu.Lock(); s.m[pid] = true; s.mu.Unlock() }
func (s *touched) has(pid int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[pid]
}

// killedByBaton adds to hit the children baton's own log says it killed
// (job timeout, silence, the end of a grace) and the holders that left by
// their hard deadline (spawned ones too, which fire does not wait for).
func killedByBaton(t *testing.T, log string, hit *touched) {
	t.Helper()
	b, err := os.ReadFile(log)
	if err != nil {
		t.Errorf("read the run's log: %v", err)
		return
	}
	for _, re := range []*regexp.Regexp{killedChild, hardDeadline} {
		for _, m := range re.FindAllSubmatch(b, -1) {
			pid, _ := strconv.Atoi(string(m[1]))
			hit.add(pid)
		}
	}
}

var (
	killedChild  = regexp.MustCompile(`child (\d+) killed`)
	hardDeadline = regexp.MustCompile(`"pid":(\d+)[^\n]*"message":"hard deadline:`)
)

// crashedRun is a run that failed because its persistent child died or broke
// the protocol (the error of a retry or a dead letter).
var crashedRun = regexp.MustCompile(`"error":"child (\d+)(?: died mid-job|: worker protocol error)[^"]*"`)

// blamed counts the runs that failed as crashed although nobody killed
// their child: a job blamed for its child's death between jobs, or for an
// answer its child gave twice.
func blamed(t *testing.T, log string, hit *touched) int {
	t.Helper()
	b, err := os.ReadFile(log)
	if err != nil {
		t.Errorf("read the run's log: %v", err)
		return 0
	}
	n := 0
	for _, m := range crashedRun.FindAllSubmatch(b, -1) {
		pid, _ := strconv.Atoi(string(m[1]))
		if !hit.has(pid) {
			if n++; n <= 5 {
				t.Logf("crashed run not explained by a kill: %s", m[0])
			}
		}
	}
	return n
}

// explain counts the extra runs of each job and those of them explained by
// a kill: a run by a process in hit (or whose parent, its holder, is), or
// one that ended near the Redis restart (a lost reply). Every duplicate
// needs one explained run.
func explain(t *testing.T, rdb *redis.Client, runs map[string]string, hit *touched, restart [2]time.Time) (duplicates, unexplained int) {
	t.Helper()
	by := map[string][]string{}
	all, err := rdb.LRange(context.Background(), byKey, 0, -1).Result()
	if err != nil {
		t.Errorf("read who ran what: %v", err)
	}
	for _, r := range all {
		f := strings.Fields(r)
		if len(f) == 4 {
			by[f[0]] = append(by[f[0]], r)
		}
	}
	from, to := restart[0].Add(-5*time.Second).UnixMilli(), restart[1].Add(5*time.Second).UnixMilli()
	for id, v := range runs {
		n, _ := strconv.Atoi(v)
		if n < 2 {
			continue
		}
		duplicates += n - 1
		excused := 0
		for _, r := range by[id] {
			f := strings.Fields(r)
			pid, _ := strconv.Atoi(f[1])
			ppid, _ := strconv.Atoi(f[2])
			ms, _ := strconv.ParseInt(f[3], 10, 64)
			if hit.has(pid) || hit.has(ppid) || (ms >= from && ms <= to) {
				excused++
			}
		}
		if excused < n-1 {
			unexplained += n - 1 - excused
			t.Logf("job %s ran %d times, %d of them explained: %v", id, n, excused, by[id])
		}
	}
	return duplicates, unexplained
}

// killAll kills the candidates cron started and every process holding a
// slot (spawned candidates are detached: not ours to wait for), until no
// slot has been held for a while.
func (f *fleet) killAll(sets ...*lock.FileSet) {
	f.mu.Lock()
	for _, c := range f.cmds {
		_ = c.Process.Kill()
	}
	f.mu.Unlock()
	quiet := 0
	for end := time.Now().Add(10 * time.Second); quiet < 5 && time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		quiet++
		for _, s := range sets {
			recs, _ := s.Records()
			for _, r := range recs {
				if r.Held {
					_ = syscall.Kill(r.PID, syscall.SIGKILL)
					quiet = 0
				}
			}
		}
	}
}

func chaosRun(t *testing.T, jobs int, persistent bool) {
	srv := redistest.Start(t, redistest.Appendonly)
	rdb := srv.Client()
	ctx := context.Background()
	dir := t.TempDir()
	locks := filepath.Join(dir, "locks")
	logf := runLog(t, dir)

	// Unique payloads, then the poison ones.
	ids := make([]any, 0, jobs+len(poison))
	for i := 0; i < jobs; i++ {
		ids = append(ids, "job-"+strconv.Itoa(i))
	}
	for p := range poison {
		ids = append(ids, p)
	}
	enqueue(t, rdb, queue, ids)

	mark := runMark + "=" + strconv.FormatInt(time.Now().UnixNano(), 36)
	hit := &touched{m: map[int]bool{}}
	f := &fleet{t: t, log: logf, hit: hit,
		env: append(os.Environ(), asBaton+"=1", "BATON_REDIS_URL="+srv.URL(), chaosRedis+"="+srv.URL(), mark),
		args: []string{"run", "--queue", queue, "--lock-dir", locks, "--slots", strconv.Itoa(slots), "--spawn", strconv.Itoa(*spawnFlag),
			"--lifetime", "2s", "--jitter", "2s", "--standby-wait", "20s", "--poll-interval", "100ms",
			"--concurrency", "2", "--shutdown-grace", "1s", "--max-attempts", "5",
			"--job-timeout", "2s", "--visibility-timeout", "5s",
			"--retry-backoff", "100ms", "--retry-backoff-max", "1s", "--log-format", "json", "--log-level", cmp.Or(os.Getenv("CHAOS_LOG_LEVEL"), "info")},
	}
	if persistent {
		f.env = append(f.env, asPersistent+"=1")
		f.args = append(f.args, "--persistent", "--max-jobs-per-child", "200", "--", os.Args[0])
	}
	runSet, _ := lock.NewFileSet(locks, queue, lock.RoleRun, slots)
	sbSet, _ := lock.NewFileSet(locks, queue, lock.RoleStandby, slots)
	defer f.killAll(runSet, sbSet)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var kills, terms, childKills atomic.Int64
	fr := &freezer{stopped: map[int]frozen{}, hit: hit}
	var below, none time.Duration // time with fewer than k holders, and with none
	seen := map[int]bool{}        // pids that held a run or standby slot
	wg.Add(4)
	go func() { // cron: one candidate a second
		defer wg.Done()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			f.fire()
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	go func() { // the monkey: every 500ms maybe kill -9 or SIGTERM a random slot holder
		defer wg.Done()
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			roll := rand.Float64()
			if persistent && *monkeyFlag && roll >= 0.20 && roll < 0.50 {
				// A persistent holder's child, as its record lists them.
				var kids []int
				recs, _ := runSet.Records()
				for _, r := range recs {
					for _, c := range holder.ActivityOf(r).Children {
						if !fr.isFrozen(r.PID) {
							kids = append(kids, c.PID)
						}
					}
				}
				if len(kids) > 0 {
					kid := kids[rand.IntN(len(kids))]
					hit.add(kid)
					if syscall.Kill(kid, syscall.SIGKILL) == nil {
						childKills.Add(1)
					}
				}
				continue
			}
			if roll >= 0.20 || !*monkeyFlag {
				continue
			}
			var held []lock.Record
			for _, s := range []*lock.FileSet{runSet, sbSet} {
				recs, _ := s.Records()
				for _, r := range recs {
					if r.Held {
						held = append(held, r)
					}
				}
			}
			if len(held) == 0 {
				continue
			}
			r := held[rand.IntN(len(held))]
			if fr.isFrozen(r.PID) {
				continue // baton must heal it, not the monkey
			}
			switch {
			case roll < 0.10:
				hit.add(r.PID)
				_ = syscall.Kill(r.PID, syscall.SIGKILL)
				kills.Add(1)
			case roll < 0.16:
				hit.add(r.PID)
				_ = syscall.Kill(r.PID, syscall.SIGTERM)
				terms.Add(1)
			case r.Role == lock.RoleRun:
				fr.freeze(r)
			}
		}
	}()
	go func() { // the healing watch: when does each frozen holder die?
		defer wg.Done()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				fr.watch()
			}
		}
	}()
	go func() { // coverage: sample the run slots every 20ms
		defer wg.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		last := time.Now()
		for {
			select {
			case <-stop:
				return
			case now := <-tick.C:
				recs, _ := runSet.Records()
				n := 0
				for _, r := range recs {
					if r.Held {
						n++
						seen[r.PID] = true
					}
				}
				sbs, _ := sbSet.Records()
				for _, r := range sbs {
					if r.Held {
						seen[r.PID] = true
					}
				}
				if n < slots {
					below += now.Sub(last)
				}
				if n == 0 {
					none += now.Sub(last)
				}
				last = now
			}
		}
	}()

	start := time.Now()
	restarted := false
	var restart [2]time.Time // when Redis went down, and when it was back
	deadline := start.Add(time.Duration(jobs/20+120) * time.Second)
	var done, dead, retry, stream int64
	for {
		time.Sleep(200 * time.Millisecond)
		if !restarted && rdb.HLen(ctx, runsKey).Val() > int64(jobs)*2/5 {
			restart[0] = time.Now()
			srv.Restart() // SIGKILL and start again on the same AOF
			restart[1] = time.Now()
			restarted = true
			if *monkeyFlag && fr.count() == 0 { // every run freezes a holder at least once
				recs, _ := runSet.Records()
				for _, r := range recs {
					if r.Held && r.Role == lock.RoleRun {
						fr.freeze(r)
						break
					}
				}
			}
			t.Logf("restarted redis-server at %v", time.Since(start).Round(time.Millisecond))
		}
		done = rdb.HLen(ctx, runsKey).Val()
		dead = rdb.XLen(ctx, work.KeysFor(queue).Dead).Val()
		retry = rdb.ZCard(ctx, work.KeysFor(queue).Retry).Val()
		stream = rdb.XLen(ctx, work.KeysFor(queue).Stream).Val()
		if done+dead == int64(len(ids)) && retry == 0 && stream == 0 {
			break
		}
		if time.Now().After(deadline) {
			close(stop)
			wg.Wait()
			t.Fatalf("not settled after %v: %d done, %d dead, %d retrying, %d in the stream (log %s)",
				time.Since(start), done, dead, retry, stream, logf.Name())
		}
	}
	elapsed := time.Since(start)
	// Every frozen holder must be healed (past its hard deadline, a margin
	// and a poll, by a candidate or a standby): cron keeps firing meanwhile.
	for end := time.Now().Add(20 * time.Second); fr.frozenNow() > 0 && time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		fr.watch()
	}
	close(stop)
	wg.Wait()
	// The holders' own record of the time below k (the slot history in
	// Redis) against this observer's, read at the same moment.
	var recorded time.Duration
	if c, err := work.ReadCounts(ctx, rdb, queue); err != nil {
		t.Errorf("read the stats: %v", err)
	} else if cov, err := history.ReadCoverage(ctx, rdb, queue, slots, c.Stats); err != nil {
		t.Errorf("read the coverage: %v", err)
	} else if recorded = cov.BelowK; recorded < below*3/4-2*time.Second || recorded > below*5/4+2*time.Second {
		t.Errorf("the holders recorded %v below k; this observer saw %v", recorded, below)
	}
	healed, slowest := fr.healedCount()
	if n := fr.frozenNow(); n > 0 {
		t.Errorf("%d frozen holders never healed", n)
	}
	f.killAll(runSet, sbSet)
	escaped := leftOver(mark)
	if len(escaped) > 0 {
		t.Errorf("%d processes left running after the run: %v", len(escaped), escaped)
	}

	// Every id completed or dead-lettered: none lost.
	runs := rdb.HGetAll(ctx, runsKey).Val()
	deadMsgs := rdb.XRange(ctx, work.KeysFor(queue).Dead, "-", "+").Val()
	deadBy := map[string]string{}
	for _, m := range deadMsgs {
		deadBy[m.Values["payload"].(string)] = m.Values["reason"].(string)
	}
	lost := 0
	for _, id := range ids {
		id := id.(string)
		n, _ := strconv.Atoi(runs[id])
		_, isDead := deadBy[id]
		if n == 0 && !isDead {
			lost++
		}
	}
	if lost > 0 {
		t.Errorf("%d jobs lost", lost)
	}
	// A job runs twice only when a process running it was killed, frozen or
	// cut short, or Redis lost a reply: never because a child answered
	// twice or died between jobs.
	killedByBaton(t, logf.Name(), hit)
	for _, pid := range rdb.SMembers(ctx, selfKillKey).Val() {
		n, _ := strconv.Atoi(pid)
		hit.add(n)
	}
	duplicates, unexplained := explain(t, rdb, runs, hit, restart)
	if unexplained > 0 {
		t.Errorf("%d of %d duplicate runs not explained by a kill", unexplained, duplicates)
	}
	if n := blamed(t, logf.Name(), hit); n > 0 {
		t.Errorf("%d runs failed as crashed while nobody killed their child", n)
	}
	// The dead letters are exactly the poison ids, with the right reasons.
	// A job that always fails ends as "failed", or as "crashed" when the
	// holder of its last delivery was killed or frozen before it settled:
	// its next delivery is then one past max_attempts, and "delivered
	// max_attempts times without finishing" is what crashed means. A job
	// that kills its holder always ends as "crashed".
	for id, reason := range poison {
		if got := deadBy[id]; got != reason && !(reason == work.ReasonFailed && got == work.ReasonCrashed) {
			t.Errorf("poison %s dead-lettered as %q, want %q", id, got, reason)
		}
	}
	for id, reason := range deadBy {
		if _, ok := poison[id]; !ok {
			t.Errorf("innocent job %s dead-lettered as %s", id, reason)
		}
	}
	if p := rdb.XPending(ctx, work.KeysFor(queue).Stream, work.Group).Val(); p != nil && p.Count != 0 {
		t.Errorf("%d entries left pending", p.Count)
	}
	mode := "in-process handler"
	if persistent {
		odd := rdb.HGetAll(ctx, oddKey).Val()
		mode = fmt.Sprintf("persistent children, %d of them kill -9'd, %s exited between jobs, %s answered a run twice",
			childKills.Load(), cmp.Or(odd["exited between jobs"], "0"), cmp.Or(odd["answered twice"], "0"))
	}
	t.Logf("%s: %d jobs + %d poison in %v: 0 lost=%v, %d duplicates (at-least-once; %d not explained by a kill), %d dead letters; "+
		"%d holders and standbys: %d kill -9, %d SIGTERM, %d frozen (SIGSTOP) and %d healed (slowest %v after its hard deadline), "+
		"%d hard-deadline exits, redis restarted once; below %d holders %v (%.1f%%; the holders recorded %v), no holder %v (%.1f%%); %d processes escaped",
		mode, jobs, len(poison), elapsed.Round(time.Millisecond), lost == 0, duplicates, unexplained, len(deadMsgs),
		len(seen), kills.Load(), terms.Load(), fr.count(), healed, slowest.Round(time.Millisecond), f.exits1.Load(),
		slots, below.Round(time.Millisecond), 100*below.Seconds()/elapsed.Seconds(), recorded.Round(time.Millisecond),
		none.Round(time.Millisecond), 100*none.Seconds()/elapsed.Seconds(), len(escaped))
}

// runLog is the file the run's baton processes write their logs to: in dir,
// or at $CHAOS_KEEP_LOG, kept after the test for a post-mortem. Closed at
// cleanup.
func runLog(t *testing.T, dir string) *os.File {
	t.Helper()
	path := filepath.Join(dir, "baton.log")
	if keep := os.Getenv("CHAOS_KEEP_LOG"); keep != "" {
		path = keep
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

// enqueue adds one job per payload to q's stream, in one pipeline.
func enqueue(t *testing.T, rdb *redis.Client, q string, payloads []any) {
	t.Helper()
	ctx := context.Background()
	if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, id := range payloads {
			p.XAdd(ctx, &redis.XAddArgs{Stream: work.KeysFor(q).Stream, Values: []any{work.PayloadField, id}})
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// freezer is the monkey's SIGSTOPs and what became of them; the monkey and
// the healing watch share it under mu.
type freezer struct {
	hit     *touched
	mu      sync.Mutex
	stopped map[int]frozen // by pid: frozen and not yet seen dead
	healed  int
	slowest time.Duration // the longest a healed holder outlived its hard deadline
	total   int
}

type frozen struct {
	start    uint64    // the process's start time: its identity
	deadline time.Time // its published hard deadline
}

// freeze stops a run-slot holder; baton must notice and kill it.
func (fr *freezer) freeze(r lock.Record) {
	if r.Deadline.IsZero() {
		return
	}
	fr.hit.add(r.PID)
	if syscall.Kill(r.PID, syscall.SIGSTOP) != nil {
		return
	}
	fr.mu.Lock()
	defer fr.mu.Unlock()
	if _, ok := fr.stopped[r.PID]; !ok {
		fr.stopped[r.PID] = frozen{start: r.Start, deadline: r.Deadline}
		fr.total++
	}
}

// watch counts the frozen holders that are gone: healed.
func (fr *freezer) watch() {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	for pid, f := range fr.stopped {
		if !proc.Alive(pid, f.start) {
			delete(fr.stopped, pid)
			fr.healed++
			fr.slowest = max(fr.slowest, time.Since(f.deadline))
		}
	}
}

func (fr *freezer) isFrozen(pid int) bool {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	_, ok := fr.stopped[pid]
	return ok
}

func (fr *freezer) frozenNow() int { fr.mu.Lock(); defer fr.mu.Unlock(); return len(fr.stopped) }
func (fr *freezer) count() int     { fr.mu.Lock(); defer fr.mu.Unlock(); return fr.total }
func (fr *freezer) healedCount() (int, time.Duration) {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	return fr.healed, fr.slowest
}

// leftOver lists the live processes whose environment holds mark, after a
// moment for the last ones to die.
func leftOver(mark string) []int {
	var pids []int
	for try := 0; try < 20; try++ {
		pids = pids[:0]
		all, _ := proc.All()
		for _, p := range all {
			if p.PID != os.Getpid() && envHas(p.PID, mark) {
				pids = append(pids, p.PID)
			}
		}
		if len(pids) == 0 {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return pids
}

func envHas(pid int, kv string) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	return err == nil && proc.EnvHas(b, []byte(kv))
}

// worker is a persistent child speaking the worker protocol (docs/workers.md)
// in Go: the chaos job for every job frame, until stop or EOF.
func worker() int {
	opt, err := redis.ParseURL(os.Getenv(chaosRedis))
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos worker:", err)
		return 2
	}
	rdb := redis.NewClient(opt)
	in := bufio.NewReader(os.NewFile(3, "from baton"))
	out := os.NewFile(4, "to baton")
	send := func(v any) error {
		b, _ := json.Marshal(v)
		_, err := out.Write(append(b, '\n'))
		return err
	}
	if send(map[string]any{"type": "ready", "protocol": 1}) != nil {
		return 1
	}
	for {
		line, err := in.ReadBytes('\n')
		if err != nil {
			return 0 // baton went away
		}
		var h struct {
			Type, ID, Queue string
			Seq             uint64
			Attempt, Size   int
		}
		if err := json.Unmarshal(line, &h); err != nil {
			fmt.Fprintln(os.Stderr, "chaos worker: bad header:", err)
			return 1
		}
		body := make([]byte, h.Size)
		if _, err := io.ReadFull(in, body); err != nil {
			return 1
		}
		switch h.Type {
		case "stop":
			return 0
		case "job":
			res := map[string]any{"type": "result", "id": h.ID, "seq": h.Seq, "status": "ok"}
			err := chaosJob(rdb, body, h.Attempt)
			if err != nil {
				res["status"], res["error"] = "error", err.Error()
			}
			if send(res) != nil {
				return 1
			}
			if err != nil && h.Attempt == 1 && rollOf(body) < 50 {
				// Answers twice: a late ok for the run that failed. It
				// must settle nothing, not even this job's next attempt.
				res["status"] = "ok"
				delete(res, "error")
				rdb.HIncrBy(context.Background(), oddKey, "answered twice", 1)
				if send(res) != nil {
					return 1
				}
			}
			if rand.IntN(50) == 0 {
				// Exits between jobs: the job baton hands it next must
				// run on a fresh child, not be blamed.
				rdb.HIncrBy(context.Background(), oddKey, "exited between jobs", 1)
				return 0
			}
		}
	}
}
