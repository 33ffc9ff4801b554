package main

import (
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/lock"
	"github.com/redis/go-redis/v9"
)

// TestFleetSentinelFailover: a master, a replica and three Sentinels on
// loopback; two simulated hosts run baton in fleet mode through the
// Sentinels while a producer enqueues with enqueue_wait_replicas = 1, and
// SENTINEL FAILOVER promotes the replica mid-run. Every job enqueue
// confirmed runs to its end (none is lost with the old master's unreplicated
// writes); no slot is granted twice: on one slot, jobs of two tenures never
// overlap (from the jobs' own records), and every new fencing token sampled
// from Redis is above all tokens seen before; the new master paused its
// grants; jobs ran there with tokens raised to its clock.
//
// SENTINEL_TEST_NO_WAIT=1 enqueues without WAIT and reports the confirmed
// jobs the failover lost instead of failing: what WAIT buys (docs/fleet.md).
func TestFleetSentinelFailover(t *testing.T) {
	t.Parallel()
	const slots = 2
	noWait := os.Getenv("SENTINEL_TEST_NO_WAIT") == "1"
	replicas := "1"
	if noWait {
		replicas = "0"
	}
	g := redistest.StartGroup(t)
	r := rigOn(t, g.Master)
	r.fresh("default")
	r.extraEnv = []string{"BATON_REDIS_URL=redis:///0"} // the rig's URL names one server
	topo := []string{"--redis-sentinels", strings.Join(g.Sentinels, ","), "--redis-master", g.Name}
	events := r.dir + "/events"
	job := r.script("job.sh", `p=$(cat)
echo "s $(date +%s%N) $p $BATON_FENCE $BATON_SLOT $$" >> `+events+`
sleep 0.05
echo "e $(date +%s%N) $p $BATON_FENCE $BATON_SLOT $$" >> `+events+"\n")
	run := append(append([]string{}, topo...), "--slots", strconv.Itoa(slots), "--lease-ttl", "2s", "--lease-renew", "200ms",
		"--lifetime", "2s", "--jitter", "1s", "--standby-wait", "8s", "--poll-interval", "50ms", "--", job)

	// Sample the leases through the Sentinels, as any client sees them.
	fc := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: g.Name, SentinelAddrs: g.Sentinels, MaxRetries: -1,
		DialTimeout: 300 * time.Millisecond, ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond})
	defer fc.Close()
	leases, err := lock.NewLeaseSet(fc, "default", lock.RoleRun, slots, lock.LeaseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu         sync.Mutex
		maxTok     int64
		seen       = map[int64]string{} // token → holder host/pid
		regressed  []string
		paused     int
		most       int
		quit, done = make(chan struct{}), make(chan struct{})
	)
	go func() {
		defer close(done)
		for {
			select {
			case <-quit:
				return
			case <-time.After(20 * time.Millisecond):
			}
			rs, err := leases.Records()
			if err != nil {
				continue // mid-failover
			}
			p, _ := leases.PausedFor()
			mu.Lock()
			// Grants between two samples may show in any order; each must
			// be above every token of the samples before.
			before := maxTok
			most = max(most, heldRecs(rs))
			if p > 0 {
				paused++
			}
			for _, rec := range rs {
				if !rec.Held {
					continue
				}
				who := rec.Host + "/" + strconv.Itoa(rec.PID)
				if prev, ok := seen[rec.Fence]; ok {
					if prev != who {
						regressed = append(regressed, fmt.Sprintf("token %d held by %s and %s", rec.Fence, prev, who))
					}
					continue
				}
				if rec.Fence <= before {
					regressed = append(regressed, fmt.Sprintf("new token %d on slot %d not above %d, seen before", rec.Fence, rec.Slot, before))
				}
				seen[rec.Fence], maxTok = who, max(maxTok, rec.Fence)
			}
			mu.Unlock()
		}
	}()

	var stops []func()
	for _, h := range []string{"h1", "h2"} {
		stops = append(stops, r.cron(400*time.Millisecond, r.fleetArgs(h, run...)...))
	}
	// The producer: 5 jobs per enqueue, confirmed only with a replica's WAIT.
	var confirmed, refused []string
	stopProducer, produced := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(produced)
		for k := 0; ; k += 5 {
			select {
			case <-stopProducer:
				return
			case <-time.After(100 * time.Millisecond):
			}
			args := append(append([]string{"enqueue", "-q"}, topo...), "--enqueue-wait-replicas", replicas, "--enqueue-wait-timeout", "500ms")
			var batch []string
			for i := k; i < k+5; i++ {
				batch = append(batch, "p"+strconv.Itoa(i))
			}
			_, errOut, code := r.baton(append(args, batch...)...)
			mu.Lock()
			if code == 0 {
				confirmed = append(confirmed, batch...)
			} else {
				refused = append(refused, strings.TrimSpace(errOut))
			}
			mu.Unlock()
		}
	}()

	confirmedN := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(confirmed)
	}
	eventually(t, 20*time.Second, "10 jobs confirmed before the failover", func() bool { return confirmedN() >= 10 })
	time.Sleep(time.Second) // holders at work
	failoverAt := time.Now()
	newMaster := g.Failover()
	tookover := time.Since(failoverAt)
	// status shows the pause, through the Sentinels.
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		out, _, _ := r.baton(append(append([]string{"status", "--json", "--lock-backend", "redis"}, topo...), "--slots", strconv.Itoa(slots))...)
		if strings.Contains(out, `"leases_paused_until"`) && strings.Contains(out, "leases paused after a Redis failover") {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("status never showed the pause after the failover: %s", out)
		}
	}
	// The old master is still a master until it turns into the new one's
	// replica: until then, writes that reach it are lost, and WAIT on the
	// new master finds no replica. The Sentinels would demote it within
	// 8-18s; an operator (here, the test) does it after 1s.
	before := confirmedN()
	time.Sleep(time.Second)
	g.Demote(g.Master.Addr, newMaster)
	time.Sleep(time.Second)
	eventually(t, 25*time.Second, "10 jobs confirmed after the failover", func() bool { return confirmedN() >= before+10 })
	close(stopProducer)
	<-produced

	// Every confirmed job ends, on either master.
	ended := func() map[string]bool {
		m := map[string]bool{}
		for _, l := range readLines(t, events) {
			if f := strings.Fields(l); len(f) >= 3 && f[0] == "e" {
				m[f[2]] = true
			}
		}
		return m
	}
	mu.Lock()
	want := append([]string(nil), confirmed...)
	mu.Unlock()
	var missing []string
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		e := ended()
		missing = missing[:0]
		for _, p := range want {
			if !e[p] {
				missing = append(missing, p)
			}
		}
		if len(missing) == 0 || time.Now().After(end) {
			break
		}
	}
	for _, stop := range stops {
		stop()
	}
	close(quit)
	<-done
	switch {
	case noWait:
		t.Logf("without WAIT: %d of %d confirmed jobs lost in the failover", len(missing), len(want))
	case len(missing) > 0:
		t.Errorf("%d of %d confirmed jobs never ran to their end (lost in the failover?): %v", len(missing), len(want), missing)
	}

	// No slot granted twice: per slot, completed jobs of two tenures never
	// overlap; at most `slots` jobs at once.
	type span struct {
		from, to int64
		fence    string
	}
	bySlot := map[string][]span{}
	starts := map[string]int64{} // pid → start
	maxFence := int64(0)
	for _, l := range readLines(t, events) {
		f := strings.Fields(l)
		if len(f) < 6 {
			t.Fatalf("job record %q: BATON_FENCE or BATON_SLOT missing", l)
		}
		at, _ := strconv.ParseInt(f[1], 10, 64)
		if f[0] == "s" {
			starts[f[5]] = at
			continue
		}
		fence, _ := strconv.ParseInt(f[3], 10, 64)
		maxFence = max(maxFence, fence)
		bySlot[f[4]] = append(bySlot[f[4]], span{starts[f[5]], at, f[3]})
	}
	for slot, ss := range bySlot {
		sort.Slice(ss, func(i, j int) bool { return ss[i].from < ss[j].from })
		for i := 1; i < len(ss); i++ {
			if ss[i].fence != ss[i-1].fence && ss[i].from < ss[i-1].to {
				t.Errorf("slot %s: a job of token %s started before one of token %s ended: the slot was held twice", slot, ss[i].fence, ss[i-1].fence)
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if most > slots {
		t.Errorf("%d run leases held at once (sampled through the Sentinels), want at most %d", most, slots)
	}
	for _, s := range regressed {
		t.Error(s)
	}
	if paused == 0 {
		t.Error("the new master never paused its grants: the failover went unnoticed")
	}
	if maxFence < failoverAt.UnixMicro() {
		t.Errorf("largest token of a finished job %d: none ran on the new master (tokens raised to its clock, ≥ %d)", maxFence, failoverAt.UnixMicro())
	}
	t.Logf("failover to %s took %s; %d jobs confirmed, %d enqueue calls refused during the failover (e.g. %.120q); grants paused in %d samples; %d tokens seen",
		newMaster, tookover.Round(time.Millisecond), len(want), len(refused), first(refused), paused, len(seen))
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// TestSentinelAuth: Sentinels with their own requirepass, and data servers
// with another. With the Sentinels' password in
// BATON_REDIS_SENTINEL_PASSWORD and the master's in BATON_REDIS_URL,
// enqueue and a fleet holder work through them, status reads them, and the
// job inherits neither password. A wrong Sentinel password, or none, is
// refused with one line saying it is the Sentinels' password that is wrong
// or missing, exit 1, the password never printed; a wrong master password
// is refused as the master's; a Sentinel password without redis_sentinels
// is exit 2 naming both keys.
func TestSentinelAuth(t *testing.T) {
	t.Parallel()
	const pw, dpw = "s3ntinel-only-pw", "d4ta-only-pw"
	g := redistest.StartGroup(t, redistest.SentinelAuth(pw), redistest.DataAuth(dpw))
	r := rigOn(t, g.Master)
	r.fresh("default")
	r.extraEnv = []string{"BATON_REDIS_URL=redis://:" + dpw + "@/0", "BATON_REDIS_SENTINEL_PASSWORD=" + pw}
	topo := []string{"--redis-sentinels", strings.Join(g.Sentinels, ","), "--redis-master", g.Name}
	out := r.dir + "/out"
	job := r.script("job.sh", `p=$(cat); echo "$p $BATON_HOST $(env | grep -c -e SENTINEL_PASSWORD -e `+dpw+`)" >> `+out+"\n")

	if _, errOut, code := r.baton(append(append([]string{"enqueue", "-q"}, topo...), "a", "b", "c")...); code != 0 {
		t.Fatalf("enqueue through password-protected Sentinels: exit %d: %s", code, errOut)
	}
	h := r.start(r.fleetArgs("h1", append(append([]string{}, topo...), "--slots", "1", "--standby-slots", "0",
		"--lease-ttl", "3s", "--lease-renew", "200ms", "--lifetime", "1m", "--", job)...)...)
	eventually(t, 20*time.Second, "the holder runs the 3 jobs", func() bool {
		b, _ := os.ReadFile(out)
		return strings.Count(string(b), "\n") == 3
	})
	for _, l := range readLines(t, out) {
		if f := strings.Fields(l); len(f) != 3 || f[1] != "h1" || f[2] != "0" {
			t.Errorf("job record %q: want payload, host h1, and 0 variables holding a password", l)
		}
	}
	st, errOut, code := r.baton(append([]string{"status", "--json", "--lock-backend", "redis", "--slots", "1", "--standby-slots", "0"}, topo...)...)
	if code != 0 || !strings.Contains(st, `"done": 3`) || !strings.Contains(st, `"host": "h1"`) {
		t.Errorf("status through the Sentinels: exit %d: %s%s", code, st, errOut)
	}
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	if code := h.wait(t, 20*time.Second); code != 0 {
		t.Errorf("holder exit %d: %s", code, h.log())
	}

	for _, tc := range []struct {
		name      string
		env, args []string
		code      int
		want      []string
	}{
		{"wrong password", []string{"BATON_REDIS_SENTINEL_PASSWORD=not-" + pw}, topo, 1,
			[]string{"the sentinels refused the password (WRONGPASS)", "hint: check redis_sentinel_password (or BATON_REDIS_SENTINEL_PASSWORD)"}},
		{"wrong password flag", nil, append([]string{"--redis-sentinel-password", "not-" + pw}, topo...), 1,
			[]string{"the sentinels refused the password (WRONGPASS)"}},
		{"no password", []string{"BATON_REDIS_SENTINEL_PASSWORD="}, topo, 1,
			[]string{"the sentinels require a password (NOAUTH)", "hint: set BATON_REDIS_SENTINEL_PASSWORD"}},
		{"wrong master password", []string{"BATON_REDIS_URL=redis://:not-" + dpw + "@/0"}, topo, 1,
			[]string{"wrong password or user (WRONGPASS)"}},
		{"without sentinels", nil, nil, 2,
			[]string{"env BATON_REDIS_SENTINEL_PASSWORD: given without redis_sentinels: redis_sentinel_password is the Sentinels' own password"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := r.cmd(append(append([]string{"enqueue"}, tc.args...), "x")...)
			cmd.Env = append(cmd.Env, tc.env...)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			err := cmd.Run()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			}
			msg := stderr.String()
			if code != tc.code || strings.Contains(msg, pw) || strings.Contains(msg, dpw) {
				t.Errorf("exit %d, want %d, and no password ever printed:\n%s", code, tc.code, msg)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("stderr does not say %q:\n%s", w, msg)
				}
			}
		})
	}
}
