package main

import (
	"context"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-run/baton/holder"
	"github.com/baton-run/baton/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestFleetSlowLinkKeepsLease: a holder whose link to Redis turns slow (a
// 1.6s round trip through internal/faultproxy, above a quarter of the
// renew deadline but well below half of it) keeps its lease: each renewal
// waits for its late reply, up to the renew deadline. Its 7s job, longer
// than the renew deadline, completes and is acknowledged over the slow
// link, and the holder never fences itself.
func TestFleetSlowLinkKeepsLease(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	px := r.proxy()
	ended := r.dir + "/ended"
	job := r.script("job.sh", "cat >/dev/null\nsleep 7\necho end >> "+ended+"\n")
	// renew deadline 5s (2/3 of the TTL): a quarter of it is 1.25s.
	h := r.start(r.fleetArgs("slow", "--redis-url", "redis://"+px.Addr+"/0",
		"--slots", "1", "--standby-slots", "0", "--lease-ttl", "7500ms", "--lease-renew", "500ms",
		"--lifetime", "2m", "--redis-down-exit", "1m", "--", job)...)
	eventually(t, 10*time.Second, "the holder takes the lease", func() bool { return published(r.leases("default", 1)) == 1 })
	if _, errOut, code := r.baton("enqueue", "x"); code != 0 {
		t.Fatal(errOut)
	}
	eventually(t, 10*time.Second, "the job starts", func() bool { return holder.ActivityOf(r.leases("default", 1)[0]).Job != "" })
	px.Delay(800 * time.Millisecond) // each way: a 1.6s round trip
	eventually(t, 30*time.Second, "the job ends and is acknowledged", func() bool {
		if ok, code := h.exited(); ok {
			t.Fatalf("the holder exited %d on a slow link:\n%s", code, h.log())
		}
		return len(readLines(t, ended)) == 1 && r.status("--lock-backend", "redis", "--slots", "1", "--standby-slots", "0").Jobs.Done == 1
	})
	if l := h.log(); strings.Contains(l, "renew deadline") || strings.Contains(l, "lease lost") {
		t.Fatalf("the holder fenced itself on a slow link:\n%s", l)
	}
	if rec := r.leases("default", 1)[0]; !rec.Held || rec.Host != "slow" {
		t.Fatalf("lease after the job: %+v, want still held by host slow", rec)
	}
}

// TestFleetOOMKeepsWorking: at maxmemory (noeviction) a fleet keeps working
// what is queued, as the flock queue does: the holder renews its lease
// (its renewals replace a field, they do not grow memory), works through
// every queued job, and a candidate started meanwhile finds the slot taken
// and exits quietly. What cannot be written is logged once, not at every
// attempt.
func TestFleetOOMKeepsWorking(t *testing.T) {
	t.Parallel()
	r := newRig(t, redistest.Option{"--maxmemory-policy", "noeviction"})
	job := r.script("job.sh", "cat >/dev/null\nsleep 0.05\n")
	const jobs = 40
	args := r.fleetArgs("h1", "--slots", "1", "--standby-slots", "0", "--lease-ttl", "1500ms", "--lease-renew", "200ms",
		"--lifetime", "2m", "--concurrency", "1", "--", job)
	h := r.start(args...)
	eventually(t, 10*time.Second, "the holder takes the lease", func() bool { return published(r.leases("default", 1)) == 1 })
	enq := []string{"enqueue"}
	for i := 0; i < jobs; i++ {
		enq = append(enq, "j"+strconv.Itoa(i))
	}
	if _, errOut, code := r.baton(enq...); code != 0 {
		t.Fatal(errOut)
	}
	fillToOOM(t, r.client())
	if err := r.client().Set(context.Background(), "more", strings.Repeat("x", 1<<10), 0).Err(); err == nil || !strings.HasPrefix(err.Error(), "OOM") {
		t.Fatalf("a write at maxmemory: %v, want OOM", err)
	}
	at := time.Now()
	loser := r.start(r.fleetArgs("h2", args[5:]...)...)
	if code := loser.wait(t, 10*time.Second); code != 0 {
		t.Errorf("a candidate at maxmemory with the slot held: exit %d, want 0:\n%s", code, loser.log())
	}
	eventually(t, 30*time.Second, "every queued job is done at maxmemory", func() bool {
		if ok, code := h.exited(); ok {
			t.Fatalf("the holder exited %d at maxmemory:\n%s", code, h.log())
		}
		return r.status("--lock-backend", "redis", "--slots", "1", "--standby-slots", "0").Jobs.Done == jobs
	})
	// Ten renew intervals more: the lease is renewed at maxmemory.
	time.Sleep(time.Until(at.Add(3 * time.Second)))
	if rec := r.leases("default", 1)[0]; !rec.Held || rec.Host != "h1" {
		t.Fatalf("lease at maxmemory: %+v, want held by h1", rec)
	}
	if ok, code := h.exited(); ok {
		t.Fatalf("the holder exited %d at maxmemory:\n%s", code, h.log())
	}
	// Leaving at maxmemory: the history it cannot write does not fail it.
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	if code := h.wait(t, 10*time.Second); code != 0 {
		t.Errorf("the holder left at maxmemory with exit %d, want 0", code)
	}
	seen := map[string]int{}
	for _, l := range strings.Split(h.log(), "\n") {
		if strings.Contains(l, `"level":"warn"`) || strings.Contains(l, `"level":"error"`) {
			i := strings.Index(l, `"message":`)
			seen[l[i:]]++
		}
	}
	for m, n := range seen {
		if n > 1 {
			t.Errorf("logged %d times at maxmemory, want once: %s", n, m)
		}
	}
	t.Logf("holder log at maxmemory:\n%s", h.log())
}

// noTwoRunning reads the ticks file the jobs of a two-host test write
// ("<host> <pid> <unix ns>" every few ms while each runs) and fails the
// test where two jobs' runs overlap: two holders ran jobs at once. It
// returns when host's first job began (unix ns; 0: none).
func noTwoRunning(t *testing.T, ticks, host string) (first int64) {
	t.Helper()
	type run struct {
		host       string
		start, end int64
	}
	runs := map[string]*run{} // by the job's pid
	for _, l := range readLines(t, ticks) {
		f := strings.Fields(l)
		if len(f) != 3 {
			continue // a line cut by a kill
		}
		ns, _ := strconv.ParseInt(f[2], 10, 64)
		if x := runs[f[1]]; x == nil {
			runs[f[1]] = &run{f[0], ns, ns}
		} else {
			x.start, x.end = min(x.start, ns), max(x.end, ns)
		}
	}
	var all []*run
	for _, x := range runs {
		all = append(all, x)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].start < all[j].start })
	for i := 1; i < len(all); i++ {
		if p, x := all[i-1], all[i]; x.start <= p.end {
			t.Errorf("two holders ran jobs at once for %s: host %s's job until %s, host %s's job from %s",
				time.Duration(p.end-x.start), p.host, time.Unix(0, p.end).Format("15:04:05.000"), x.host, time.Unix(0, x.start).Format("15:04:05.000"))
		}
	}
	for _, x := range all {
		if x.host == host {
			return x.start
		}
	}
	return 0
}

// fillToOOM writes 2 MiB of junk, then sets maxmemory 1 MiB below what
// Redis uses: every write that needs memory is refused from then on.
func fillToOOM(tb testing.TB, rdb *redis.Client) {
	tb.Helper()
	ctx := context.Background()
	junk := strings.Repeat("j", 16<<10)
	for i := 0; i < 128; i++ {
		if err := rdb.Set(ctx, "junk:"+strconv.Itoa(i), junk, 0).Err(); err != nil {
			tb.Fatal(err)
		}
	}
	used, err := strconv.ParseInt(rdb.InfoMap(ctx, "memory").Val()["Memory"]["used_memory"], 10, 64)
	if err != nil {
		tb.Fatal(err)
	}
	if err := rdb.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used-1<<20, 10)).Err(); err != nil {
		tb.Fatal(err)
	}
}

// TestFleetRestartWithoutData: slots = 1 on two hosts, and the Redis they
// share restarts without persistence just as host a's holder starts a 3s
// job: the lease and the fence counter are gone. Host a cannot reach the
// new server for 2.5s (a partition, internal/faultproxy), so it cannot
// learn it lost its lease before then. Host b's candidates (one every
// 100ms) are granted nothing until a lease TTL after the restart; a's
// holder finds its lease gone at its first renewal that arrives, kills its
// job and exits. Every job records its host and a tick every 20ms while it
// runs: no two jobs' runs ever overlap, so at no instant did two holders
// run jobs.
func TestFleetRestartWithoutData(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	px := r.proxy()
	ticks := r.dir + "/ticks"
	job := r.script("job.sh", `cat >/dev/null
end=$(( $(date +%s%N) + 3000000000 ))
while [ "$(date +%s%N)" -lt "$end" ]; do echo "$BATON_HOST $$ $(date +%s%N)" >> `+ticks+`; sleep 0.02; done
`)
	const ttl = 4500 * time.Millisecond // renew deadline 3s
	common := []string{"--slots", "1", "--standby-slots", "0", "--lease-ttl", ttl.String(), "--lease-renew", "500ms",
		"--lifetime", "1m", "--redis-down-exit", "1m", "--concurrency", "1", "--", job}
	a := r.start(r.fleetArgs("a", append([]string{"--redis-url", "redis://" + px.Addr + "/0"}, common...)...)...)
	eventually(t, 10*time.Second, "host a takes the lease", func() bool { return published(r.leases("default", 1)) == 1 })
	enq := []string{"enqueue"}
	for i := 0; i < 10; i++ {
		enq = append(enq, "j"+strconv.Itoa(i))
	}
	if _, errOut, code := r.baton(enq...); code != 0 {
		t.Fatal(errOut)
	}
	eventually(t, 10*time.Second, "host a starts a job", func() bool { return len(readLines(t, ticks)) > 0 })

	cut := time.Now()
	px.Partition(true)
	r.redis.Restart() // no persistence: the jobs are gone too; queue new ones
	at := time.Now()
	if _, errOut, code := r.baton(enq...); code != 0 {
		t.Fatal(errOut)
	}
	stop := r.cron(100*time.Millisecond, r.fleetArgs("b", common...)...)
	defer stop()
	// The partition's length, the restart in it: under the renew deadline
	// (3s) unless the restart alone takes longer, on a loaded machine. Host
	// a then finds its lease gone at its first renewal, or, the partition
	// having outlasted its deadline, stops at the deadline: fenced either way.
	time.Sleep(time.Until(cut.Add(2000 * time.Millisecond)))
	px.Partition(false)
	code := a.wait(t, 2*ttl)
	fenced := time.Since(at)
	if out := a.log(); code != 1 || !strings.Contains(out, "lease lost") && !strings.Contains(out, "renew deadline") {
		t.Errorf("host a's holder after the restart: exit %d, want 1 with its lease lost or its renew deadline passed:\n%s", code, out)
	}
	if fenced > 6*time.Second { // the partition's 2.5s, its renew deadline of 3s at most, and room to kill its job
		t.Errorf("host a's holder left %s after the restart, want within 6s", fenced)
	}
	eventually(t, 4*ttl, "host b runs jobs", func() bool {
		for _, l := range readLines(t, ticks) {
			if strings.HasPrefix(l, "b ") {
				return true
			}
		}
		return false
	})
	stop()
	firstB := noTwoRunning(t, ticks, "b")
	t.Logf("restart without data: host a left %s after it, host b's first job began %s after it (lease_ttl %s)",
		fenced.Round(time.Millisecond), time.Duration(firstB-at.UnixNano()).Round(time.Millisecond), ttl)
}
