package main

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestFleetFlushAll: slots = 1 on two hosts, and the Redis they share,
// up for longer than a lease TTL, is emptied by a FLUSHALL while it runs
// on (same run id, same uptime) just as host a's holder runs a 3s job. Host
// a cannot reach Redis for 1s (a partition, internal/faultproxy), so it
// cannot learn it lost its lease before then. Host b's candidates (one
// every 100ms) are granted nothing until a lease TTL after the loss; a's
// holder finds its lease gone, kills its job and exits. Every job records
// its host and a tick every 20ms while it runs (and its BATON_FENCE
// first): no two jobs' runs overlap, and b's fencing token is above a's.
func TestFleetFlushAll(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newRig(t)
	px := r.proxy()
	ticks := r.dir + "/ticks"
	job := r.script("job.sh", `cat >/dev/null
echo "$BATON_HOST fence=$BATON_FENCE" >> `+ticks+`
end=$(( $(date +%s%N) + 3000000000 ))
while [ "$(date +%s%N)" -lt "$end" ]; do echo "$BATON_HOST $$ $(date +%s%N)" >> `+ticks+`; sleep 0.02; done
`)
	const ttl = 2 * time.Second // renew deadline 1.33s
	common := []string{"--slots", "1", "--standby-slots", "0", "--lease-ttl", ttl.String(), "--lease-renew", "300ms",
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
	// Up for longer than a TTL, in whole seconds and up to one over: a
	// restart would be long past, and its pause with it.
	eventually(t, 10*time.Second, "redis up for 3s", func() bool {
		up, _ := strconv.Atoi(r.client().InfoMap(ctx, "server").Val()["Server"]["uptime_in_seconds"])
		return up >= 3
	})
	eventually(t, 10*time.Second, "host a starts a job", func() bool { return len(readLines(t, ticks)) > 1 })

	px.Partition(true)
	if err := r.client().FlushAll(ctx).Err(); err != nil { // the jobs are gone too; queue new ones
		t.Fatal(err)
	}
	at := time.Now()
	if _, errOut, code := r.baton(enq...); code != 0 {
		t.Fatal(errOut)
	}
	stop := r.cron(100*time.Millisecond, r.fleetArgs("b", common...)...)
	defer stop()
	time.Sleep(time.Until(at.Add(time.Second))) // the partition's length
	px.Partition(false)
	code := a.wait(t, 2*ttl)
	if code != 1 || !strings.Contains(a.log(), "slot lost") {
		t.Errorf("host a's holder after the FLUSHALL: exit %d, want 1 with its slot lost:\n%s", code, a.log())
	}
	eventually(t, 4*ttl, "host b runs jobs", func() bool {
		for _, l := range readLines(t, ticks) {
			if strings.HasPrefix(l, "b ") && len(strings.Fields(l)) == 3 {
				return true
			}
		}
		return false
	})
	stop()
	firstB := noTwoRunning(t, ticks, "b")
	if after := time.Duration(firstB - at.UnixNano()); after < ttl-100*time.Millisecond {
		t.Errorf("host b's first job began %s after the FLUSHALL, before a lease TTL (%s)", after, ttl)
	}
	fence := map[string]int64{}
	for _, l := range readLines(t, ticks) {
		host, tok, ok := strings.Cut(l, " fence=")
		if ok && fence[host] == 0 {
			fence[host], _ = strconv.ParseInt(tok, 10, 64)
		}
	}
	if fence["a"] == 0 || fence["b"] <= fence["a"] {
		t.Errorf("fencing tokens: host a %d, then host b %d: want b's above a's", fence["a"], fence["b"])
	}
	t.Logf("FLUSHALL: host b's first job began %s after it (lease_ttl %s); tokens a %d, b %d",
		time.Duration(firstB-at.UnixNano()).Round(time.Millisecond), ttl, fence["a"], fence["b"])
}
