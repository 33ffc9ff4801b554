package chaos

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/lock"
	"github.com/baton-run/baton/work"
	"github.com/redis/go-redis/v9"
)

var (
	fleetJobsFlag     = flag.Int("chaos.fleet-jobs", 1500, "jobs in the fleet chaos run (make chaos-fleet: 20000)")
	fleetPausesFlag   = flag.Bool("chaos.fleet-pauses", true, "also SIGSTOP run-lease holders past lease_ttl, then SIGCONT them")
	fleetRestartsFlag = flag.Int("chaos.fleet-restarts", 1, "restart Redis without persistence this many times, evenly through the run")
)

// fleetPause is how long the monkey stops a holder: past lease_ttl (1.5s),
// so its lease expires and goes to another holder.
const fleetPause = 2500 * time.Millisecond

const (
	asFleet     = "BATON_CHAOS_FLEET"        // with asBaton: the fleet handler, which records each run
	fleetEvents = "BATON_CHAOS_FLEET_EVENTS" // the file of job records: one line per job start ("s") and end ("e")
	fleetQueue  = "fleet"
	fleetSlots  = 4 // slots = standby_slots, fleet-wide
)

// fleetHosts are the simulated hosts: each its own lock dir and BATON_HOST.
var fleetHosts = []string{"h1", "h2", "h3"}

// fleetHandler is the fleet run's job: it records its start and its end
// with the wall clock (one machine: one clock), its host, its slot, its
// holder's fencing token and pid, and runs 5-25 ms in between. It honours
// ctx, so a holder that fences itself ends it: such a run has no end record.
// The records go to a file (one O_APPEND write per line), not to Redis: a
// restart without persistence would lose them.
func fleetHandler() work.Handler {
	f, err := os.OpenFile(os.Getenv(fleetEvents), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		panic(err)
	}
	host, pid := os.Getenv("BATON_HOST"), strconv.Itoa(os.Getpid())
	rec := func(kind string, j *work.Job) error {
		_, err := f.WriteString(strings.Join([]string{kind,
			strconv.FormatInt(time.Now().UnixNano(), 10), host, j.Slot, strconv.FormatInt(j.Fence, 10), pid, string(j.Payload)}, " ") + "\n")
		return err
	}
	return work.HandlerFunc(func(ctx context.Context, j *work.Job) error {
		if err := rec("s", j); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(5+rand.IntN(20)) * time.Millisecond):
		}
		return rec("e", j)
	})
}

// TestChaosFleet is fleet mode under fire: 3 simulated hosts on one machine,
// each starting a candidate every second like cron, share slots =
// standby_slots = 4 Redis leases (lease_ttl 1.5s) while a monkey kill -9s
// run-lease holders at random, and stops some (SIGSTOP) past their lease
// TTL before it lets them go on (SIGCONT), and Redis restarts without
// persistence (-chaos.fleet-restarts, once by default): every lease, the
// fence counter and the queue are gone, and the test enqueues again every
// job without an end record, as an operator would from the jobs' source.
// It checks, from leases sampled in Redis and
// from the jobs' own records: never more than 4 valid run leases, each slot's
// fencing token only grows, never more than 4 jobs at once but where a dead
// or fenced holder explains the overlap, no job lost, and a job run twice
// only when a holder that ran it was killed or fenced, or it was enqueued
// again after a restart; and no tenure granted after a restart runs a job
// before every tenure of the lost leases has stopped (but stopped holders,
// whose writes are fenced). A short run is part of go test; make
// chaos-fleet runs 20,000 jobs.
func TestChaosFleet(t *testing.T) {
	jobs := *fleetJobsFlag
	srv := redistest.Start(t)
	rdb := srv.Client()
	ctx := context.Background()
	if _, err := lock.MarkFresh(ctx, rdb, fleetQueue); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	logf := runLog(t, dir)
	events := filepath.Join(dir, "events")
	ids := make([]any, jobs)
	for i := range ids {
		ids[i] = "job-" + strconv.Itoa(i)
	}
	enqueue(t, rdb, fleetQueue, ids)

	mark := runMark + "=" + strconv.FormatInt(time.Now().UnixNano(), 36)
	hf := &hostFleet{t: t, log: logf, procs: map[int]*hostProc{}}
	common := []string{"run", "--queue", fleetQueue, "--lock-backend", "redis",
		"--slots", strconv.Itoa(fleetSlots), "--standby-slots", strconv.Itoa(fleetSlots),
		"--lease-ttl", "1500ms", "--lease-renew", "250ms",
		"--lifetime", "2s", "--jitter", "2s", "--standby-wait", "20s", "--poll-interval", "100ms",
		"--concurrency", "1", "--shutdown-grace", "1s", "--max-attempts", "1000",
		"--job-timeout", "2s", "--visibility-timeout", "10s",
		"--log-format", "json", "--log-level", cmp.Or(os.Getenv("CHAOS_LOG_LEVEL"), "info")}
	leases, err := lock.NewLeaseSet(rdb, fleetQueue, lock.RoleRun, fleetSlots, lock.LeaseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer hf.killAll()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var kills, pauses atomic.Int64
	runLeases := strings.TrimSuffix(lock.LeaseKey(fleetQueue, lock.RoleRun, 0), "0") + "*" // every run lease key
	samples := &leaseSamples{last: map[string]int64{}, keyOf: map[int64]string{}}
	for _, h := range fleetHosts { // cron on each host: one candidate a second, phases apart
		env := append(os.Environ(), asBaton+"=1", asFleet+"=1", fleetEvents+"="+events, "BATON_REDIS_URL="+srv.URL(), "BATON_HOST="+h, mark)
		args := append([]string{common[0], "--lock-dir", filepath.Join(dir, "locks-"+h), "--host", h}, common[1:]...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(rand.IntN(1000)) * time.Millisecond)
			hf.fire(env, args)
			every(stop, time.Second, func() { hf.fire(env, args) })
		}()
	}
	wg.Add(2)
	go func() { // the monkey: every 500ms, one time in three kill -9 a random run-lease holder, one in ten stop one
		defer wg.Done()
		every(stop, 500*time.Millisecond, func() {
			switch roll := rand.IntN(30); {
			case roll < 10 && hf.strike(leases, false):
				kills.Add(1)
			case roll >= 27 && *fleetPausesFlag && hf.strike(leases, true):
				pauses.Add(1)
			}
		})
	}()
	go func() { // the leases, sampled from Redis every 10ms
		defer wg.Done()
		every(stop, 10*time.Millisecond, func() {
			if v, err := validLeases.Run(ctx, rdb, nil, runLeases).Slice(); err == nil {
				samples.add(v)
			}
		})
	}()

	start := time.Now()
	deadline := start.Add(time.Duration(jobs/20+90) * time.Second)
	var stream, pending int64
	rs := &fleetRestarts{requeued: map[string]bool{}}
	for {
		time.Sleep(200 * time.Millisecond)
		recorded := len(readEvents(t, events))
		if kills.Load() == 0 && recorded > jobs/2 && hf.strike(leases, false) {
			kills.Add(1) // every run kills at least one holder mid-stream
		}
		if *fleetPausesFlag && pauses.Load() == 0 && recorded > jobs/3 && hf.strike(leases, true) {
			pauses.Add(1) // and stops one
		}
		if n := len(rs.at); n < *fleetRestartsFlag && recorded > 2*jobs*(n+1)/(*fleetRestartsFlag+1) {
			// Without persistence: the leases, the fence counter, the
			// stream and its group are gone. Every job without an end
			// record goes in again.
			rs.at = append(rs.at, time.Now().UnixNano()) // before: every token of the new server is above it in µs
			srv.Restart()
			ended := map[string]bool{}
			for _, l := range readEvents(t, events) {
				if x := strings.Fields(l); len(x) == 7 && x[0] == "e" {
					ended[x[6]] = true
				}
			}
			var again []any
			for _, id := range ids {
				if !ended[id.(string)] {
					again = append(again, id)
					rs.requeued[id.(string)] = true
				}
			}
			enqueue(t, rdb, fleetQueue, again)
			t.Logf("redis restarted without persistence after %v: %d jobs enqueued again", time.Since(start).Round(time.Millisecond), len(again))
		}
		stream = rdb.XLen(ctx, work.KeysFor(fleetQueue).Stream).Val()
		pending = 0
		if p := rdb.XPending(ctx, work.KeysFor(fleetQueue).Stream, work.Group).Val(); p != nil {
			pending = p.Count
		}
		if stream == 0 && pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			close(stop)
			wg.Wait()
			t.Fatalf("not drained after %v: %d entries in the stream, %d pending (log %s)", time.Since(start), stream, pending, logf.Name())
		}
	}
	elapsed := time.Since(start)
	close(stop)
	wg.Wait()
	hf.killAll()
	if escaped := leftOver(mark); len(escaped) > 0 {
		t.Errorf("%d processes left running after the run: %v", len(escaped), escaped)
	}

	// What Redis holds: every entry acknowledged, nothing retried or dead.
	if n := rdb.ZCard(ctx, work.KeysFor(fleetQueue).Retry).Val(); n != 0 {
		t.Errorf("%d jobs in the retry schedule, want 0 (jobs never fail)", n)
	}
	if n := rdb.XLen(ctx, work.KeysFor(fleetQueue).Dead).Val(); n != 0 {
		t.Errorf("%d dead letters, want 0", n)
	}
	if samples.most > fleetSlots {
		t.Errorf("%d valid run leases at once (sampled from Redis), want at most %d", samples.most, fleetSlots)
	}
	for _, e := range samples.errs {
		t.Error(e)
	}

	v := judgeFleet(t, readEvents(t, events), hf, jobs, rs)
	fenced, pausedFenced := 0, 0
	for _, p := range hf.procs { // a stopped holder that did not exit 1 was still stopped when the run ended
		if p.exit > 0 {
			fenced++
			if p.paused {
				pausedFenced++
			}
		}
	}
	t.Logf("fleet chaos: %d jobs on %d hosts in %v; %d candidates, %d holders kill -9'd, %d stopped for %v (%d of them then exited 1); "+
		"%d exited non-zero (fenced themselves or were fenced); "+
		"%d tenures (tokens) ran jobs, %d run leases sampled from Redis (%d samples): at most %d valid at once, tokens per slot only grew; "+
		"at most %d jobs at once (%d counting the runs of dead or fenced holders); jobs per host %v; "+
		"%d Redis restarts without persistence (%d distinct jobs enqueued again), no tenure granted after one ran before the last tenure of the lost leases stopped; "+
		"lost %d; %d jobs run more than once (%d extra runs), every one explained by a killed or fenced holder or a restart: %v",
		jobs, len(fleetHosts), elapsed.Round(time.Millisecond), len(hf.procs), kills.Load(), pauses.Load(), fleetPause, pausedFenced, fenced,
		v.tenures, len(samples.keyOf), samples.n, samples.most,
		v.peakLive, v.peakAll, v.perHost, len(rs.at), len(rs.requeued), v.lost, v.dupJobs, v.extraRuns, v.unexplained == 0)
}

// readEvents is the job records written so far (fleetHandler).
func readEvents(t testing.TB, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

// fleetRestarts are the Redis restarts without persistence of a fleet run:
// when (unix ns), and the jobs enqueued again after one.
type fleetRestarts struct {
	at       []int64
	requeued map[string]bool
}

// every calls fn every d until stop is closed.
func every(stop <-chan struct{}, d time.Duration, fn func()) {
	tick := time.NewTicker(d)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
			fn()
		}
	}
}

// hostProc is one baton process the fleet's cron started.
type hostProc struct {
	cmd    *exec.Cmd
	exit   int       // exit code once exited (-1: killed by a signal)
	exited bool      // Wait has returned
	gone   time.Time // when it was killed or seen to exit; zero while running
	killed bool      // kill -9'd by the monkey
	paused bool      // stopped by the monkey past lease_ttl (and let go on after fleetPause)
}

// hostFleet is every host's cron stand-in: the processes it started, by pid,
// with how each ended. mu guards procs and each hostProc.
type hostFleet struct {
	t     *testing.T
	log   *os.File
	mu    sync.Mutex
	procs map[int]*hostProc
}

func (f *hostFleet) fire(env, args []string) {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = env
	cmd.Stderr = f.log
	if err := cmd.Start(); err != nil {
		f.t.Errorf("start candidate: %v", err)
		return
	}
	p := &hostProc{cmd: cmd}
	f.mu.Lock()
	f.procs[cmd.Process.Pid] = p
	f.mu.Unlock()
	go func() {
		_ = cmd.Wait()
		f.mu.Lock()
		defer f.mu.Unlock()
		p.exit, p.exited = cmd.ProcessState.ExitCode(), true
		if p.gone.IsZero() {
			p.gone = time.Now()
		}
	}()
}

// strike kill -9s (or, with pause, stops for fleetPause) the holder of a
// random valid run lease, if the fleet started it and has not struck it
// yet: true when it did.
func (f *hostFleet) strike(s lock.Set, pause bool) bool {
	recs, err := s.Records()
	if err != nil {
		return false
	}
	var held []lock.Record
	for _, r := range recs {
		if r.Held {
			held = append(held, r)
		}
	}
	if len(held) == 0 {
		return false
	}
	r := held[rand.IntN(len(held))]
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.procs[r.PID]
	switch {
	case p == nil || !p.gone.IsZero() || p.paused:
		return false
	case pause:
		if p.cmd.Process.Signal(syscall.SIGSTOP) != nil {
			return false
		}
		p.paused = true
		time.AfterFunc(fleetPause, func() { _ = p.cmd.Process.Signal(syscall.SIGCONT) }) // a no-op once it was waited for
		return true
	case p.cmd.Process.Signal(syscall.SIGKILL) != nil:
		return false
	}
	p.killed, p.gone = true, time.Now()
	return true
}

// killAll kills every process the fleet started and waits for them.
func (f *hostFleet) killAll() {
	f.mu.Lock()
	for _, p := range f.procs {
		if p.gone.IsZero() {
			_ = p.cmd.Process.Kill()
		}
	}
	f.mu.Unlock()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		f.mu.Lock()
		n := 0
		for _, p := range f.procs {
			if !p.exited {
				n++
			}
		}
		f.mu.Unlock()
		if n == 0 {
			return
		}
	}
}

// proc is the process pid as the fleet saw it end (nil: not the fleet's).
func (f *hostFleet) proc(pid int) *hostProc {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.procs[pid]
}

// validLeases reads every run lease of the queue at one instant of Redis'
// clock, apart from lock's own scripts: whatever key matches, not only
// the slots lock knows of (it reads the lease hash's expires and token
// fields, as lock/lease_scripts.go writes them).
//
// KEYS: none (a test on one server). ARGV[1]: the pattern of the run lease
// keys. Returns: the key and token of each lease whose expiry (ms, Redis'
// clock) has not passed, flat.
var validLeases = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
for _, k in ipairs(redis.call('KEYS', ARGV[1])) do
  if redis.call('TYPE', k).ok == 'hash' then
    local l = redis.call('HMGET', k, 'expires', 'token')
    if l[1] and tonumber(l[1]) > now then
      table.insert(out, k)
      table.insert(out, l[2] or '0')
    end
  end
end
return out`)

// leaseSamples are the valid run leases read from Redis all along: the most
// at once, and each lease key's tokens, which must only grow and never
// appear on two keys. Owned by the sampling goroutine until it stops.
type leaseSamples struct {
	n, most int
	last    map[string]int64 // lease key → the last token seen on it
	keyOf   map[int64]string // token → the lease key it was seen on
	errs    []string
}

// add takes one validLeases reply.
func (s *leaseSamples) add(v []any) {
	s.n++
	s.most = max(s.most, len(v)/2)
	for i := 0; i+1 < len(v); i += 2 {
		key, _ := v[i].(string)
		tok, _ := v[i+1].(string)
		token, _ := strconv.ParseInt(tok, 10, 64)
		if token < s.last[key] && len(s.errs) < 10 {
			s.errs = append(s.errs, fmt.Sprintf("%s: token %d after %d: tokens must only grow", key, token, s.last[key]))
		}
		s.last[key] = max(s.last[key], token)
		if o, ok := s.keyOf[token]; !ok {
			s.keyOf[token] = key
		} else if o != key && len(s.errs) < 10 {
			s.errs = append(s.errs, fmt.Sprintf("token %d on %s and %s", token, o, key))
		}
	}
}

// fleetVerdict is what the jobs' own records say.
type fleetVerdict struct {
	tenures, peakLive, peakAll, lost, dupJobs, extraRuns, unexplained int
	perHost                                                           map[string]int
}

// jobRun is one run of a job, from its start and end records.
type jobRun struct {
	start, end int64 // unix ns; end 0: no end record
	host, slot string
	fence      int64
	pid        int
	job        string
}

// judgeFleet checks the jobs' start and end records (see fleetHandler).
// A run without an end record ended with its holder (kill -9, self-fence):
// it counts as running until the holder was seen gone. A holder is excused
// (dead or fenced) when the monkey killed it, stopped it past its lease TTL
// (its lease went to another holder meanwhile, so its late writes are
// fenced), or it exited with a code above 0: baton exits 1 when it fences
// itself or finds its writes fenced (the final kill of what is left, after
// the run, excuses nothing). With rs, a job enqueued again after a Redis
// restart is excused for its runs that began before the restart, and no
// tenure granted after a restart (its token, seeded from Redis' clock in µs,
// is above the restart's time) may start a job before every run of a
// tenure from before it has ended (the end of a run without an end record:
// its holder seen gone), but a stopped holder's, whose writes are fenced.
func judgeFleet(t testing.TB, events []string, f *hostFleet, jobs int, rs *fleetRestarts) fleetVerdict {
	t.Helper()
	runs := map[string]*jobRun{} // by pid, token and job: one run
	var order []*jobRun
	for _, l := range events {
		x := strings.Fields(l)
		if len(x) != 7 {
			t.Fatalf("job record %q: want 7 fields", l)
		}
		at, _ := strconv.ParseInt(x[1], 10, 64)
		fence, _ := strconv.ParseInt(x[4], 10, 64)
		pid, _ := strconv.Atoi(x[5])
		key := x[5] + "/" + x[4] + "/" + x[6]
		switch x[0] {
		case "s":
			r := &jobRun{start: at, host: x[2], slot: x[3], fence: fence, pid: pid, job: x[6]}
			runs[key] = r
			order = append(order, r)
			if fence == 0 || !strings.HasPrefix(r.slot, "fleet/run-") {
				t.Errorf("job record %q: want a fencing token and consumer fleet/run-i", l)
			}
		case "e":
			if r := runs[key]; r != nil {
				r.end = at
			}
		}
	}
	excused := func(r *jobRun) bool {
		p := f.proc(r.pid)
		return p != nil && (p.killed || p.paused || p.exit > 0)
	}
	// restarted: r began before a restart that lost the job, which went in
	// again.
	restarted := func(r *jobRun) bool {
		if rs == nil || !rs.requeued[r.job] {
			return false
		}
		for _, at := range rs.at {
			if r.start < at {
				return true
			}
		}
		return false
	}
	endOf := func(r *jobRun) int64 { // a run without an end lasts until its holder was seen gone
		if r.end != 0 {
			return r.end
		}
		if p := f.proc(r.pid); p != nil && !p.gone.IsZero() {
			return p.gone.UnixNano()
		}
		return time.Now().UnixNano()
	}
	v := fleetVerdict{perHost: map[string]int{}}

	// Each job: at least one finished run; every run but the finished one
	// belongs to a killed or fenced holder.
	byJob := map[string][]*jobRun{}
	tenures := map[int64]bool{}
	for _, r := range order {
		byJob[r.job] = append(byJob[r.job], r)
		tenures[r.fence] = true
		v.perHost[r.host]++
	}
	v.tenures = len(tenures)
	for i := 0; i < jobs; i++ {
		runs := byJob["job-"+strconv.Itoa(i)]
		done := 0
		for _, r := range runs {
			if r.end != 0 {
				done++
			}
		}
		if done == 0 {
			v.lost++
			continue
		}
		if len(runs) > 1 {
			v.dupJobs++
			v.extraRuns += len(runs) - 1
			// One run acknowledged the job; every other one's holder must
			// have died or been fenced before it could.
			var healthy []string
			for _, r := range runs {
				if !excused(r) && !restarted(r) {
					healthy = append(healthy, fmt.Sprintf("pid %d (host %s, token %d)", r.pid, r.host, r.fence))
				}
			}
			if len(healthy) > 1 {
				v.unexplained++
				if v.unexplained <= 5 {
					t.Errorf("job %s ran %d times, by holders neither killed nor fenced: %v", runs[0].job, len(runs), healthy)
				}
			}
		}
	}
	if v.lost > 0 {
		t.Errorf("%d jobs never finished a run: lost", v.lost)
	}

	// Jobs at once, from the records: a run without an end lasts until its
	// holder was seen gone. Overlaps past fleetSlots must come from runs of
	// excused holders.
	type ev struct {
		at    int64
		delta int
		live  bool
	}
	var evs []ev
	for _, r := range order {
		live := !excused(r)
		evs = append(evs, ev{r.start, 1, live}, ev{endOf(r), -1, live})
	}
	sort.Slice(evs, func(i, j int) bool {
		return evs[i].at < evs[j].at || evs[i].at == evs[j].at && evs[i].delta < evs[j].delta
	})
	all, live := 0, 0
	for _, e := range evs {
		all += e.delta
		if e.live {
			live += e.delta
		}
		v.peakAll, v.peakLive = max(v.peakAll, all), max(v.peakLive, live)
	}
	if v.peakLive > fleetSlots {
		t.Errorf("%d jobs of live, unfenced holders ran at once, want at most %d", v.peakLive, fleetSlots)
	}

	// After each restart: the lost leases' tenures stop before a new one
	// runs a job.
	for _, at := range func() []int64 {
		if rs == nil {
			return nil
		}
		return rs.at
	}() {
		var lastOld, firstNew *jobRun
		for _, r := range order {
			p := f.proc(r.pid)
			switch {
			case r.fence >= at/1000:
				if firstNew == nil || r.start < firstNew.start {
					firstNew = r
				}
			case p == nil || !p.paused:
				if lastOld == nil || endOf(r) > endOf(lastOld) {
					lastOld = r
				}
			}
		}
		if lastOld != nil && firstNew != nil && firstNew.start < endOf(lastOld) {
			t.Errorf("restart at %s: token %d (granted after it) started a job %s before pid %d (token %d, granted before it) ended its job",
				time.Unix(0, at).Format("15:04:05.000"), firstNew.fence, time.Duration(endOf(lastOld)-firstNew.start), lastOld.pid, lastOld.fence)
		}
	}

	// Tokens per slot: ordered by token, a slot's tenures start their first
	// job in the same order, but where the older tenure's holder was killed
	// or fenced (it ran on, stale).
	first := map[int64]*jobRun{}
	for _, r := range order {
		if first[r.fence] == nil {
			first[r.fence] = r
		}
	}
	bySlot := map[string][]*jobRun{}
	for _, r := range first {
		bySlot[r.slot] = append(bySlot[r.slot], r)
	}
	for slot, rs := range bySlot {
		sort.Slice(rs, func(i, j int) bool { return rs[i].fence < rs[j].fence })
		for i := 1; i < len(rs); i++ {
			if rs[i].start < rs[i-1].start && !excused(rs[i-1]) {
				t.Errorf("%s: token %d started its first job before token %d, whose holder was neither killed nor fenced", slot, rs[i].fence, rs[i-1].fence)
			}
		}
	}
	return v
}

// TestLeaseSamplesCatch: the fleet run's sampler counts every valid lease
// key, even one lock does not know of, skips expired ones, and reports a
// token that went back on a key or shows up on two keys.
func TestLeaseSamplesCatch(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	pattern := strings.TrimSuffix(lock.LeaseKey(fleetQueue, lock.RoleRun, 0), "0") + "*"
	later := strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)
	set := func(i int, token, expires string) {
		t.Helper()
		if err := rdb.HSet(ctx, lock.LeaseKey(fleetQueue, lock.RoleRun, i), "token", token, "expires", expires).Err(); err != nil {
			t.Fatal(err)
		}
	}
	s := &leaseSamples{last: map[string]int64{}, keyOf: map[int64]string{}}
	sample := func() {
		t.Helper()
		v, err := validLeases.Run(ctx, rdb, nil, pattern).Slice()
		if err != nil {
			t.Fatal(err)
		}
		s.add(v)
	}
	for i := range fleetSlots + 1 { // one more than the fleet has: a stray fifth
		set(i, strconv.Itoa(10+i), later)
	}
	set(fleetSlots+1, "99", "1") // expired long ago
	sample()
	if s.most != fleetSlots+1 || len(s.errs) != 0 {
		t.Fatalf("most %d, errs %v: want %d valid leases, no error", s.most, s.errs, fleetSlots+1)
	}
	set(0, "9", later)  // a token below the one seen before on run:0
	set(1, "12", later) // run:2's token on run:1
	sample()
	if len(s.errs) != 2 || !strings.Contains(s.errs[0]+s.errs[1], "must only grow") || !strings.Contains(s.errs[0]+s.errs[1], "token 12 on") {
		t.Fatalf("errs %q: want a token that went back and one on two keys", s.errs)
	}
}

// recorder is a testing.TB that keeps the errors it is given.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, a ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, a...))
}

// TestJudgeFleetCatches: the jobs' records judge as they should. Five jobs
// at once on live holders, a job finished by two live holders, and a job
// never finished are errors; an overlap or a second run explained by a
// killed or fenced holder is not.
func TestJudgeFleetCatches(t *testing.T) {
	f := &hostFleet{procs: map[int]*hostProc{}}
	for pid := 1; pid <= 7; pid++ {
		f.procs[pid] = &hostProc{exited: true, gone: time.Unix(0, 1000)}
	}
	f.procs[6].killed = true // kill -9'd mid-job
	f.procs[7].exit = 1      // fenced itself
	rec := func(kind string, at, pid int, slot, job string) string {
		return fmt.Sprintf("%s %d h%d fleet/run-%s %d %d %s", kind, at, pid, slot, 10*pid, pid, job)
	}
	run := func(pid int, slot, job string, from, to int) []string {
		return []string{rec("s", from, pid, slot, job), rec("e", to, pid, slot, job)}
	}
	var ok []string // 4 at once, plus a killed holder's and a fenced one's runs over them
	for pid := 1; pid <= 4; pid++ {
		ok = append(ok, run(pid, strconv.Itoa(pid-1), "job-"+strconv.Itoa(pid-1), 10, 20)...)
	}
	ok = append(ok, rec("s", 12, 6, "0", "job-4"))   // killed before its end: job-4 runs again
	ok = append(ok, run(7, "1", "job-4", 13, 19)...) // the fenced holder finished it, unacknowledged
	ok = append(ok, run(5, "2", "job-4", 30, 40)...) // and a live holder ran it for good
	ok = append(ok, run(1, "0", "job-5", 50, 60)...)
	r := &recorder{TB: t}
	v := judgeFleet(r, ok, f, 6, nil)
	if len(r.errs) != 0 || v.lost != 0 || v.dupJobs != 1 || v.extraRuns != 2 || v.peakAll != 6 || v.peakLive != 4 {
		t.Fatalf("explained records: errs %q, verdict %+v", r.errs, v)
	}

	bad := append([]string(nil), ok...)
	bad = append(bad, run(5, "3", "job-0", 11, 15)...) // a fifth live job at once, and job-0 twice on live holders
	r = &recorder{TB: t}
	v = judgeFleet(r, bad, f, 7, nil) // job-6 never ran: lost
	all := strings.Join(r.errs, "\n")
	for _, want := range []string{"5 jobs of live, unfenced holders ran at once", "job job-0 ran 2 times", "1 jobs never finished a run: lost"} {
		if !strings.Contains(all, want) {
			t.Errorf("errors %q lack %q", all, want)
		}
	}
	if v.lost != 1 || v.unexplained != 1 {
		t.Errorf("verdict %+v: want 1 lost, 1 unexplained", v)
	}
}

// TestJudgeFleetRestart: after a restart, a job run before it by a holder
// that then left with exit 0 and enqueued again is no unexplained
// duplicate; a tenure granted after the restart that starts a job while a
// tenure from before it still runs one is an error.
func TestJudgeFleetRestart(t *testing.T) {
	f := &hostFleet{procs: map[int]*hostProc{
		1: {exited: true, gone: time.Unix(0, 100_500)}, // its lease lost in the restart; left with exit 0
		2: {exited: true, gone: time.Unix(0, 200_000)},
	}}
	rs := &fleetRestarts{at: []int64{100_000}, requeued: map[string]bool{"job-1": true}} // new tokens: from 100
	rec := func(kind string, at, pid, token int, job string) string {
		return fmt.Sprintf("%s %d h%d fleet/run-0 %d %d %s", kind, at, pid, token, pid, job)
	}
	ok := []string{
		rec("s", 90_000, 1, 10, "job-0"), rec("e", 91_000, 1, 10, "job-0"),
		rec("s", 99_000, 1, 10, "job-1"), rec("e", 100_400, 1, 10, "job-1"), // ended, its ack lost with Redis
		rec("s", 101_000, 2, 150, "job-1"), rec("e", 102_000, 2, 150, "job-1"),
	}
	r := &recorder{TB: t}
	if v := judgeFleet(r, ok, f, 2, rs); len(r.errs) != 0 || v.lost != 0 || v.dupJobs != 1 || v.unexplained != 0 {
		t.Fatalf("explained records: errs %q, verdict %+v", r.errs, v)
	}
	bad := append(append([]string(nil), ok[:4]...), rec("s", 100_200, 2, 150, "job-1"), rec("e", 102_000, 2, 150, "job-1"))
	r = &recorder{TB: t}
	judgeFleet(r, bad, f, 2, rs)
	if all := strings.Join(r.errs, "\n"); len(r.errs) != 1 || !strings.Contains(all, "token 150 (granted after it) started a job 200ns before pid 1") {
		t.Fatalf("errors %q: want one, token 150 starting a job before pid 1's ended", all)
	}
}
