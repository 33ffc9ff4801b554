package main

import (
	"strings"
	"testing"
	"time"
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
