package main

import (
	"context"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

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
	eventually(t, 10*time.Second, "the job starts", func() bool { return r.leases("default", 1)[0].Job != "" })
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
