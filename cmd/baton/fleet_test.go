package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/baton-run/baton/lock"
)

// fleetArgs are `baton run` arguments for simulated host h of a fleet: its
// own lock dir and host name, slots as leases in the rig's Redis.
func (r *rig) fleetArgs(h string, extra ...string) []string {
	args := []string{"run", "--lock-dir", filepath.Join(r.dir, "locks-"+h), "--host", h, "--lock-backend", "redis"}
	return append(args, extra...)
}

// leases reads the fleet's run leases from Redis.
func (r *rig) leases(q string, n int) []lock.Record {
	r.t.Helper()
	return r.recordsOf(lock.NewLeaseSet(r.client(), q, lock.RoleRun, n, lock.LeaseOptions{}))
}

// sampleLeases counts q's run leases held (of n), read from Redis every
// 20ms, until stop; stop returns the most seen at once. Safe to call twice.
func (r *rig) sampleLeases(q string, n int) (stop func() int64) {
	var most atomic.Int64
	quit, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if h := int64(heldRecs(r.leases(q, n))); h > most.Load() {
				most.Store(h)
			}
			select {
			case <-quit:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	var once sync.Once
	return func() int64 {
		once.Do(func() { close(quit); <-sampled })
		return most.Load()
	}
}

// jobEvent is a job's start or end, from the job's own record.
type jobEvent struct {
	at    int64 // unix ns
	start bool
}

// mostAtOnce is the most jobs running at once in evs (an end and a start
// at the same instant do not overlap).
func mostAtOnce(evs []jobEvent) int {
	sort.Slice(evs, func(i, j int) bool { return evs[i].at < evs[j].at || evs[i].at == evs[j].at && !evs[i].start })
	running, peak := 0, 0
	for _, e := range evs {
		if e.start {
			running++
		} else {
			running--
		}
		peak = max(peak, running)
	}
	return peak
}

// TestFleetSharesSlots: three simulated hosts (each its own lock dir and
// host name) start candidates like cron against 2 run and 2 standby leases
// in one Redis. At no instant do more than 2 hold a run lease (sampled from
// Redis), nor do more than 2 jobs run at once (from the jobs' own start and
// end records); the queue drains, on more than one host, and every job sees
// its host and its holder's fencing token.
func TestFleetSharesSlots(t *testing.T) {
	t.Parallel()
	const slots, jobs = 2, 40
	r := newRig(t)
	events := filepath.Join(r.dir, "events")
	job := r.script("job.sh", `cat >/dev/null
echo "s $(date +%s%N) $BATON_HOST $BATON_FENCE $BATON_SLOT $$" >> `+events+`
sleep 0.02
echo "e $(date +%s%N) $BATON_HOST $BATON_FENCE $$" >> `+events+"\n")
	common := []string{"--slots", strconv.Itoa(slots), "--lease-ttl", "6s", "--lease-renew", "500ms",
		"--lifetime", "1500ms", "--jitter", "1s", "--standby-wait", "10s", "--poll-interval", "50ms", "--", job}

	stopSampling := r.sampleLeases("default", slots) // all along
	var stops []func()
	for _, h := range []string{"h1", "h2", "h3"} {
		stops = append(stops, r.cron(400*time.Millisecond, r.fleetArgs(h, common...)...))
	}
	payloads := []string{"enqueue", "-q"}
	for i := 0; i < jobs; i++ {
		payloads = append(payloads, "p"+strconv.Itoa(i))
	}
	if _, errOut, code := r.baton(payloads...); code != 0 {
		t.Fatalf("enqueue: %s", errOut)
	}
	for end := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		s := r.status("--lock-backend", "redis", "--slots", strconv.Itoa(slots))
		if s.Jobs.Done == jobs && s.Jobs.Waiting == 0 && s.Jobs.Pending == 0 {
			break
		}
		if time.Now().After(end) {
			stopSampling()
			r.mu.Lock()
			for _, p := range r.procs {
				if done, code := p.exited(); done && code != 0 {
					t.Logf("exit %d: %s", code, p.log())
				}
			}
			r.mu.Unlock()
			t.Fatalf("the queue did not drain in 60s: %+v", *s.Jobs)
		}
	}
	for _, stop := range stops {
		stop()
	}
	time.Sleep(time.Second) // the last candidates set up their signal handlers
	most := stopSampling()
	if most > slots || most < 1 {
		t.Errorf("at most %d run leases held at once (sampled from Redis), want 1..%d", most, slots)
	}

	var evs []jobEvent
	hosts, fences := map[string]int{}, map[string]bool{}
	lines := readLines(t, events)
	ended := map[string]bool{} // pids of jobs that wrote their end
	for _, l := range lines {
		if f := strings.Fields(l); f[0] == "e" {
			ended[f[len(f)-1]] = true
		}
	}
	killed := 0
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) < 5 {
			t.Fatalf("job record %q: BATON_HOST or BATON_FENCE missing", l)
		}
		if f[0] == "s" && !ended[f[len(f)-1]] {
			// Killed mid-job (its holder fenced itself): it never wrote
			// its end. The leases sampled from Redis still cover it.
			killed++
			continue
		}
		at, _ := strconv.ParseInt(f[1], 10, 64)
		evs = append(evs, jobEvent{at, f[0] == "s"})
		if f[0] == "s" {
			hosts[f[2]]++
			fences[f[3]] = true
			if !strings.HasPrefix(f[4], "fleet/run-") {
				t.Errorf("job ran as consumer %q, want fleet/run-i (the slot, not the host)", f[4])
			}
		}
	}
	if peak := mostAtOnce(evs); peak > slots {
		t.Errorf("%d jobs ran at once across the fleet, want at most %d", peak, slots)
	}
	if len(hosts) < 2 {
		t.Errorf("jobs ran on hosts %v: want the slots shared by more than one host", hosts)
	}
	t.Logf("jobs per host %v; %d tenures (fencing tokens); at most %d leases held at once; at most %d jobs at once; %d killed mid-job", hosts, len(fences), most, mostAtOnce(evs), killed)

	r.drainAll(0)
}

// drainAll sends SIGTERM to every baton the rig started, from the from-th
// on, that is still running, and wants each to exit 0.
func (r *rig) drainAll(from int) {
	r.t.Helper()
	r.mu.Lock()
	ps := append([]*process(nil), r.procs[from:]...)
	r.mu.Unlock()
	for _, p := range ps {
		if done, _ := p.exited(); !done {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, p := range ps {
		code := p.wait(r.t, 20*time.Second)
		// Killed by the SIGTERM before it set up its handler (a candidate
		// that had not logged a line yet) or after it let go of it (a
		// holder already leaving at the end of its lifetime).
		early := code == -1 && p.log() == ""
		late := code == -1 && strings.Contains(p.log(), "leaving run slot")
		if code != 0 && !early && !late {
			r.t.Errorf("exit %d: %s", code, p.log())
		}
	}
}

// published counts the leases whose holder has published its record: it is
// connected and working.
func published(rs []lock.Record) (n int) {
	for _, r := range rs {
		if r.Held && !r.NoRecord && !r.Until.IsZero() {
			n++
		}
	}
	return n
}

func heldRecs(rs []lock.Record) (n int) {
	for _, r := range rs {
		if r.Held {
			n++
		}
	}
	return n
}

// TestFleetSelfFence: a host partitioned from Redis (internal/faultproxy)
// for 3 × lease_ttl. Its holder kills its running job and exits by its renew
// deadline, before its lease expires; once the lease expires a holder on
// another host takes the slot and replays both jobs, which the slot (not the
// host) left pending: the one killed, and the one that finished during the
// partition but whose acknowledgement was held in the network. When the
// partition heals, that acknowledgement and any other late write reach
// Redis and are fenced: the entries stay pending for the new holder, which
// acknowledges them; nothing is lost.
func TestFleetSelfFence(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	px := r.proxy()
	events, goFile, release := filepath.Join(r.dir, "events"), filepath.Join(r.dir, "go"), filepath.Join(r.dir, "release")
	// On host cut, x runs until killed and y until the test says go; on
	// host other, y waits for release (a slot replays one entry at a time:
	// x first, the oldest).
	job := r.script("job.sh", `p=$(cat)
echo "start $BATON_HOST $BATON_FENCE $$ $p" >> `+events+`
if [ "$BATON_HOST" = cut ] && [ "$p" = x ]; then sleep 60; fi
while [ "$BATON_HOST" = cut ] && [ ! -e `+goFile+` ]; do sleep 0.02; done
while [ "$BATON_HOST" = other ] && [ "$p" = y ] && [ ! -e `+release+` ]; do sleep 0.02; done
echo "end $BATON_HOST $p" >> `+events+"\n")
	// The holder fences itself 1.6s after its last renewal, its lease
	// expires 0.8s later: room to see it still held on a loaded machine.
	const ttl = 2400 * time.Millisecond
	common := []string{"--slots", "1", "--standby-slots", "0", "--lease-ttl", ttl.String(), "--lease-renew", "200ms",
		"--lifetime", "1m", "--redis-down-exit", "1m", "--concurrency", "2", "--", job}
	cut := r.start(r.fleetArgs("cut", append([]string{"--redis-url", "redis://" + px.Addr + "/0"}, common...)...)...)
	eventually(t, 10*time.Second, "the holder on host cut takes the lease", func() bool { return published(r.leases("default", 1)) == 1 })
	if _, errOut, code := r.baton("enqueue", "x", "y"); code != 0 {
		t.Fatal(errOut)
	}
	var jobPID int
	var cutFence string
	eventually(t, 10*time.Second, "both jobs start on host cut", func() bool {
		l := readLines(t, events)
		if len(l) < 2 {
			return false
		}
		for _, e := range l {
			if f := strings.Fields(e); f[4] == "x" {
				jobPID, _ = strconv.Atoi(f[3])
				cutFence = f[2]
			}
		}
		return true
	})
	px.Partition(true)
	at := time.Now()
	if err := os.WriteFile(goFile, nil, 0o644); err != nil { // y ends; its ack waits in the partition
		t.Fatal(err)
	}
	code := cut.wait(t, 2*ttl)
	fenced := time.Since(at)
	lease := r.leases("default", 1)[0]
	if code != 1 || !strings.Contains(cut.log(), "renew deadline") {
		t.Fatalf("cut-off holder: exit %d, want 1 with the renew deadline in its log:\n%s", code, cut.log())
	}
	if !lease.Held || lease.Host != "cut" {
		t.Fatalf("the lease expired before the holder fenced itself (%s after the cut): %+v", fenced, lease)
	}
	eventually(t, 2*time.Second, "the cut-off holder's job is gone", func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", jobPID))
		return err != nil || strings.Contains(string(b), ") Z ")
	})
	t.Logf("cut-off holder exited %s after the cut, its lease had %s left", fenced, lease.ExpiresIn)

	// Another host takes the slot once the lease expires and replays both
	// jobs: x ends, y waits there for release.
	stop := r.cron(200*time.Millisecond, r.fleetArgs("other", common...)...)
	defer stop()
	eventually(t, 10*time.Second, "host other replays both jobs", func() bool {
		n := 0
		for _, e := range readLines(t, events) {
			if strings.HasPrefix(e, "start other") {
				n++
			}
		}
		return n == 2
	})
	replayed := time.Since(at)
	stop()

	// The partition heals after 3 × TTL: cut's late writes reach Redis.
	mon := monitor(t, r.redis.Addr)
	time.Sleep(time.Until(at.Add(3 * ttl)))
	px.Partition(false)
	healed := time.Now()
	leaseKey := `"` + lock.LeaseKey("default", lock.RoleRun, 0) + `"`
	var late string
	var arrived time.Duration
	eventually(t, 5*time.Second, "host cut's late writes reach Redis", func() bool {
		for _, l := range mon.lines() {
			if strings.Contains(l, `"evalsha"`) && strings.Contains(l, leaseKey) && strings.HasSuffix(l, `"`+cutFence+`"`) {
				late, arrived = l, time.Since(healed)
				return true
			}
		}
		return false
	})
	time.Sleep(300 * time.Millisecond) // what else was held arrives too
	if s := r.status("--lock-backend", "redis", "--slots", "1", "--standby-slots", "0"); s.Jobs.Done != 1 || s.Jobs.Pending != 1 {
		t.Fatalf("after cut's late writes: %+v, want x done and y pending for the new holder: a late write was not fenced", *s.Jobs)
	}
	t.Logf("replayed on host other %s after the cut; partition healed after %s; a late write with token %s arrived within %s and was fenced: %.160s",
		replayed.Round(time.Millisecond), healed.Sub(at).Round(time.Millisecond), cutFence, arrived.Round(time.Millisecond), late)
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "host other acknowledges both jobs", func() bool {
		s := r.status("--lock-backend", "redis", "--slots", "1", "--standby-slots", "0")
		return s.Jobs.Done == 2 && s.Jobs.Pending == 0 && s.Jobs.Waiting == 0
	})
	time.Sleep(500 * time.Millisecond) // the last candidates set up their signal handlers
	r.drainAll(1)
}

// monitored is a MONITOR connection's lines, read by its own goroutine
// until the test ends.
type monitored struct {
	mu sync.Mutex
	l  []string
}

func (m *monitored) lines() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.l...)
}

// monitor streams every command Redis at addr runs from now on.
func monitor(t *testing.T, addr string) *monitored {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := c.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	if l, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(l, "+OK") {
		t.Fatalf("MONITOR: %q %v", l, err)
	}
	m := &monitored{}
	go func() {
		for {
			l, err := br.ReadString('\n')
			if err != nil {
				return
			}
			m.mu.Lock()
			m.l = append(m.l, strings.TrimSpace(l))
			m.mu.Unlock()
		}
	}()
	return m
}

// TestFleetHostLost: every holder on one host is kill -9'd mid-job. Its run
// slots are re-held by standbys on another host, and the jobs it left
// pending are replayed there, within lease_ttl + 1s of the kill.
func TestFleetHostLost(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	events := filepath.Join(r.dir, "events")
	job := r.script("job.sh", `p=$(cat)
echo "start $BATON_HOST $BATON_FENCE $p" >> `+events+`
if [ "$BATON_HOST" = doomed ]; then sleep 60; fi
sleep 0.05
echo "end $BATON_HOST $p" >> `+events+"\n")
	const ttl = 1500 * time.Millisecond
	common := []string{"--slots", "4", "--standby-slots", "4", "--lease-ttl", ttl.String(), "--lease-renew", "250ms",
		"--lifetime", "1m", "--standby-wait", "1m", "--poll-interval", "100ms", "--concurrency", "1", "--", job}
	var doomed []*process
	for i := 0; i < 2; i++ {
		doomed = append(doomed, r.start(r.fleetArgs("doomed", common...)...))
		eventually(t, 10*time.Second, "host doomed holds a run lease", func() bool { return published(r.leases("default", 4)) == i+1 })
	}
	for i := 0; i < 4; i++ { // two holders and two standbys on host other
		r.start(r.fleetArgs("other", common...)...)
		if i < 2 {
			eventually(t, 10*time.Second, "host other holds a run lease", func() bool { return published(r.leases("default", 4)) == 3+i })
		}
	}
	eventually(t, 10*time.Second, "two standbys wait on host other", func() bool {
		return heldRecs(r.recordsOf(lock.NewLeaseSet(r.client(), "default", lock.RoleStandby, 4, lock.LeaseOptions{}))) == 2
	})
	payloads := []string{"enqueue", "-q"}
	for i := 0; i < 10; i++ {
		payloads = append(payloads, "p"+strconv.Itoa(i))
	}
	if _, errOut, code := r.baton(payloads...); code != 0 {
		t.Fatal(errOut)
	}
	stuck := map[string]bool{} // the jobs running on host doomed
	eventually(t, 10*time.Second, "both holders on host doomed run a job", func() bool {
		for _, e := range readLines(t, events) {
			if f := strings.Fields(e); f[0] == "start" && f[1] == "doomed" {
				stuck[f[3]] = true
			}
		}
		return len(stuck) == 2
	})
	var slotsLost []int
	for _, l := range r.leases("default", 4) {
		if l.Host == "doomed" {
			slotsLost = append(slotsLost, l.Slot)
		}
	}
	for _, p := range doomed {
		_ = p.cmd.Process.Kill()
	}
	at := time.Now()
	reheld := map[int]time.Duration{}
	replayed := map[string]time.Duration{}
	for end := at.Add(3 * (ttl + time.Second)); time.Now().Before(end) && (len(reheld) < len(slotsLost) || len(replayed) < len(stuck)); time.Sleep(10 * time.Millisecond) {
		ls := r.leases("default", 4)
		for _, i := range slotsLost {
			if _, ok := reheld[i]; !ok && ls[i].Held && ls[i].Host == "other" {
				reheld[i] = time.Since(at)
			}
		}
		for _, e := range readLines(t, events) {
			if f := strings.Fields(e); f[0] == "start" && f[1] == "other" && stuck[f[3]] {
				if _, ok := replayed[f[3]]; !ok {
					replayed[f[3]] = time.Since(at)
				}
			}
		}
	}
	t.Logf("host doomed kill -9'd with slots %v and jobs %v: slots re-held after %v, jobs replayed after %v (lease_ttl %s)",
		slotsLost, stuck, reheld, replayed, ttl)
	if len(reheld) < len(slotsLost) || len(replayed) < len(stuck) {
		t.Fatalf("after %s: slots re-held %v of %v, jobs replayed %v of %v", 3*(ttl+time.Second), reheld, slotsLost, replayed, stuck)
	}
	for i, d := range reheld {
		if d > ttl+time.Second {
			t.Errorf("run slot %d re-held %s after the kill, want within lease_ttl + 1s = %s", i, d, ttl+time.Second)
		}
	}
	for p, d := range replayed {
		if d > ttl+time.Second {
			t.Errorf("job %s replayed %s after the kill, want within lease_ttl + 1s = %s", p, d, ttl+time.Second)
		}
	}
	eventually(t, 10*time.Second, "every job is done", func() bool {
		s := r.status("--lock-backend", "redis", "--slots", "4", "--standby-slots", "4")
		return s.Jobs.Done == 10 && s.Jobs.Pending == 0 && s.Jobs.Waiting == 0
	})
	r.drainAll(2)
}

// TestFleetPausedHolderIsFenced: a holder stopped (SIGSTOP) mid-job past its
// lease TTL loses the slot to a holder on another host, which runs the job
// again and acknowledges it; resumed, the stopped holder writes nothing (its
// writes are fenced, its renew deadline, judged on the boot clock, has
// already passed, or its next renewal finds the lease taken) and exits 1.
func TestFleetPausedHolderIsFenced(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	events := filepath.Join(r.dir, "events")
	job := r.script("job.sh", `cat >/dev/null
echo "start $BATON_HOST $BATON_FENCE" >> `+events+`
if [ "$BATON_HOST" = paused ]; then sleep 3; fi
echo "end $BATON_HOST $BATON_FENCE" >> `+events+"\n")
	// The holder fences itself 1.6s after its last renewal, its lease
	// expires 0.8s later: room to see it still held on a loaded machine.
	const ttl = 2400 * time.Millisecond
	common := []string{"--slots", "1", "--standby-slots", "0", "--lease-ttl", ttl.String(), "--lease-renew", "200ms", "--lifetime", "1m", "--", job}
	paused := r.start(r.fleetArgs("paused", common...)...)
	eventually(t, 10*time.Second, "the holder on host paused takes the lease", func() bool { return published(r.leases("default", 1)) == 1 })
	if _, errOut, code := r.baton("enqueue", "x"); code != 0 {
		t.Fatal(errOut)
	}
	eventually(t, 10*time.Second, "the job starts on host paused", func() bool { return len(readLines(t, events)) > 0 })
	_ = paused.cmd.Process.Signal(syscall.SIGSTOP)
	stop := r.cron(200*time.Millisecond, r.fleetArgs("other", common...)...)
	defer stop()
	eventually(t, 10*time.Second, "host other runs the job again and acknowledges it", func() bool {
		s := r.status("--lock-backend", "redis", "--slots", "1", "--standby-slots", "0")
		return s.Jobs.Done == 1 && s.Jobs.Pending == 0
	})
	stop()
	_ = paused.cmd.Process.Signal(syscall.SIGCONT)
	if code := paused.wait(t, 5*time.Second); code != 1 {
		t.Fatalf("resumed holder exit %d, want 1:\n%s", code, paused.log())
	}
	t.Logf("resumed holder: %s", lastLine(paused.log()))
	// Which it sees first is a race on resume: its renew deadline (on the
	// boot clock), its next renewal finding the lease taken, or a write
	// fenced by Redis. Each one stops it without a write.
	if l := paused.log(); !strings.Contains(l, "fenced") && !strings.Contains(l, "renew deadline") && !strings.Contains(l, "lease lost") {
		t.Errorf("resumed holder's log says neither fenced, nor renew deadline, nor lease lost:\n%s", l)
	}
	if s := r.status("--lock-backend", "redis", "--slots", "1", "--standby-slots", "0"); s.Jobs.Done != 1 || s.Jobs.Pending != 0 || s.Jobs.Waiting != 0 {
		t.Errorf("after the resumed holder left: %+v, want 1 done, nothing pending", *s.Jobs)
	}
	l := readLines(t, events)
	var fences []string
	for _, e := range l {
		if f := strings.Fields(e); f[0] == "start" {
			fences = append(fences, f[1]+":"+f[2])
		}
	}
	if len(fences) != 2 || !strings.HasPrefix(fences[0], "paused:") || !strings.HasPrefix(fences[1], "other:") {
		t.Fatalf("job starts %v, want one on paused then one on other", fences)
	}
	a, _ := strconv.Atoi(strings.SplitN(fences[0], ":", 2)[1])
	b, _ := strconv.Atoi(strings.SplitN(fences[1], ":", 2)[1])
	if b <= a {
		t.Errorf("new holder's token %d not above the paused one's %d", b, a)
	}
	time.Sleep(500 * time.Millisecond) // the last candidates set up their signal handlers
	r.drainAll(1)
}

func lastLine(s string) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	return l[len(l)-1]
}

// TestFleetMaxPerHost: a candidate on a host that already holds max_per_host
// slots exits 0 without asking Redis (here it could not: its Redis URL
// points nowhere), while a host with room takes a lease.
func TestFleetMaxPerHost(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	job := r.script("job.sh", "cat >/dev/null\n")
	common := []string{"--slots", "3", "--standby-slots", "0", "--max-per-host", "1", "--lifetime", "1m", "--", job}
	r.start(r.fleetArgs("h1", common...)...)
	eventually(t, 10*time.Second, "h1 holds a lease", func() bool { return published(r.leases("default", 3)) == 1 })
	out, errOut, code := r.baton(r.fleetArgs("h1", append([]string{"--redis-url", "redis://127.0.0.1:1/0"}, common...)...)...)
	if code != 0 || out != "" || errOut != "" {
		t.Fatalf("a candidate on a full host: exit %d, stdout %q, stderr %q; want exit 0, silent, without Redis", code, out, errOut)
	}
	r.start(r.fleetArgs("h2", common...)...)
	eventually(t, 10*time.Second, "h2 holds a lease too", func() bool { return published(r.leases("default", 3)) == 2 })
	r.drainAll(0)
}

// TestFleetConfigMustAgree: two simulated hosts. While h1 holds a lease
// granted under slots = 2 and lease_ttl 1.5s, a candidate on h2 with other
// values exits 2 naming the setting and both values, and takes nothing.
// Once h1 has left and its lease's TTL has passed, h2's new values are
// accepted (a deploy that changes them).
func TestFleetConfigMustAgree(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	job := r.script("job.sh", "cat >/dev/null\n")
	common := func(extra ...string) []string {
		return append([]string{"--standby-slots", "0", "--lease-renew", "200ms", "--lifetime", "1m"}, append(extra, "--", job)...)
	}
	h1 := r.start(r.fleetArgs("h1", common("--slots", "2", "--lease-ttl", "1500ms")...)...)
	eventually(t, 10*time.Second, "h1 holds a lease", func() bool { return published(r.leases("default", 2)) == 1 })
	for _, tc := range []struct {
		args         []string
		name, values string
	}{
		{[]string{"--slots", "3", "--lease-ttl", "1500ms"}, "slots", "slots is 3 here but 2 in the fleet"},
		{[]string{"--slots", "2", "--lease-ttl", "3s"}, "lease_ttl", "lease_ttl is 3s here but 1.5s in the fleet"},
	} {
		_, errOut, code := r.baton(r.fleetArgs("h2", common(tc.args...)...)...)
		if code != 2 || !strings.Contains(errOut, tc.values) {
			t.Errorf("h2 with another %s: exit %d, stderr %q; want 2 naming %q", tc.name, code, errOut, tc.values)
		}
	}
	if n := heldRecs(r.leases("default", 3)); n != 1 {
		t.Errorf("%d run leases held, want h1's alone", n)
	}
	// The deploy: h1 leaves; once its lease's TTL has passed, h2's values win.
	_ = h1.cmd.Process.Signal(syscall.SIGTERM)
	if code := h1.wait(t, 10*time.Second); code != 0 {
		t.Fatalf("h1 exit %d: %s", code, h1.log())
	}
	time.Sleep(1500*time.Millisecond + 200*time.Millisecond)
	r.start(r.fleetArgs("h2", common("--slots", "3", "--lease-ttl", "1500ms")...)...)
	eventually(t, 10*time.Second, "h2 holds a lease under slots = 3", func() bool { return published(r.leases("default", 3)) == 1 })
	_, errOut, code := r.baton(r.fleetArgs("h1", common("--slots", "2", "--lease-ttl", "1500ms")...)...)
	if code != 2 || !strings.Contains(errOut, "slots is 2 here but 3 in the fleet") {
		t.Errorf("h1 with the old slots after the deploy: exit %d, stderr %q; want 2", code, errOut)
	}
	r.drainAll(1)
}

// TestFleetHandOver: three simulated hosts, one run lease and two standby
// leases, standbys that poll only once a minute. A holder retiring at the
// end of its lifetime hands its lease to the standby that came first (h2,
// not h3), which is woken at once: well before a poll, and before the
// lease could have expired. h2 retires in turn and hands it to h3.
func TestFleetHandOver(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	job := r.script("job.sh", "cat >/dev/null\n")
	args := func(h, lifetime string) []string {
		return r.fleetArgs(h, "--slots", "1", "--standby-slots", "2", "--lease-ttl", "6s", "--lease-renew", "500ms",
			"--poll-interval", "1m", "--standby-wait", "1m", "--lifetime", lifetime, "--jitter", "0s", "--", job)
	}
	standbys := func() []lock.Record {
		return r.recordsOf(lock.NewLeaseSet(r.client(), "default", lock.RoleStandby, 2, lock.LeaseOptions{}))
	}
	holder := func() lock.Record { return r.leases("default", 1)[0] }
	h1 := r.start(args("h1", "3s")...)
	eventually(t, 10*time.Second, "h1 holds the run lease", func() bool { return published(r.leases("default", 1)) == 1 })
	h2 := r.start(args("h2", "3s")...)
	eventually(t, 10*time.Second, "h2 stands by", func() bool { return published(standbys()) == 1 })
	r.start(args("h3", "1m")...)
	eventually(t, 10*time.Second, "h3 stands by", func() bool { return published(standbys()) == 2 })
	first := holder()
	for i, tc := range []struct {
		leaving *process
		next    string
	}{{h1, "h2"}, {h2, "h3"}} {
		if code := tc.leaving.wait(t, 20*time.Second); code != 0 {
			t.Fatalf("retiring holder exit %d: %s", code, tc.leaving.log())
		}
		left := time.Now()
		eventually(t, 5*time.Second, tc.next+" holds the run lease", func() bool {
			l := holder()
			return l.Held && l.Host == tc.next && l.Fence > first.Fence
		})
		if took := time.Since(left); took > 3*time.Second {
			t.Errorf("hand-over %d took %s: not a wake-up (polls are a minute apart, the lease lasts 6s)", i+1, took)
		}
	}
	if !strings.Contains(h2.log(), "promoted") {
		t.Errorf("h2's log does not say promoted:\n%s", h2.log())
	}
	r.drainAll(2)
}

// TestFleetJobNamesHolder: in fleet mode, baton job names the pid and host
// of the holder running a job, whichever host asks (the lease records are
// in Redis), in text and JSON.
func TestFleetJobNamesHolder(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	out, errOut, code := r.baton("enqueue", "x")
	id := strings.TrimSpace(out)
	if code != 0 {
		t.Fatalf("enqueue: exit %d %s", code, errOut)
	}
	h := r.start(r.fleetArgs("far", "--lifetime", "30s", "--shutdown-grace", "500ms", "--standby-slots", "0", "--", "sleep", "20")...)
	asked := []string{"job", "--lock-backend", "redis", "--lock-dir", filepath.Join(r.dir, "locks-near"), id}
	want := fmt.Sprintf(", pid %d on host far, for ", h.cmd.Process.Pid)
	eventually(t, 10*time.Second, "baton job names the holder on host far", func() bool {
		out, _, _ := r.baton(asked...)
		return strings.Contains(out, "running on fleet/run-0") && strings.Contains(out, want)
	})
	jout, _, _ := r.baton(append(asked, "--json")...)
	var loc struct {
		State, Host string
		PID         int
	}
	if err := json.Unmarshal([]byte(jout), &loc); err != nil || loc.State != "running" || loc.Host != "far" || loc.PID != h.cmd.Process.Pid {
		t.Fatalf("job --json: %v %s", err, jout)
	}
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	h.wait(t, 15*time.Second)
}
