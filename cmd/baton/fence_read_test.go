package main

import (
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestFleetResumedHolderStartsNothing: a holder idle in its blocking read
// is stopped (SIGSTOP) past its lease while jobs are enqueued: Redis hands
// the first ones to its read, which it cannot answer while stopped. A
// holder on another host takes the slot, replays them (the slot is the
// consumer) and works through the rest. Resumed while jobs still wait, the
// stale holder starts no job at all, neither those its read brought back
// nor new ones, replayed or claimed: it no longer holds the slot. Every job
// is done, by the other host.
func TestFleetResumedHolderStartsNothing(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	events := filepath.Join(r.dir, "events")
	// The start is recorded first: a job started and killed at once counts.
	job := r.script("job.sh", `echo "start $BATON_HOST $$ $BATON_JOB_ID" >> `+events+`
cat >/dev/null
sleep 0.2
`)
	const ttl = 2400 * time.Millisecond
	const jobs = 24
	common := []string{"--slots", "1", "--standby-slots", "0", "--concurrency", "3",
		"--lease-ttl", ttl.String(), "--lease-renew", "200ms", "--lifetime", "1m", "--", job}
	stale := r.start(r.fleetArgs("stale", common...)...)
	eventually(t, 10*time.Second, "the holder on host stale takes the lease", func() bool { return published(r.leases("default", 1)) == 1 })
	time.Sleep(300 * time.Millisecond) // in its blocking read
	_ = stale.cmd.Process.Signal(syscall.SIGSTOP)
	args := []string{"enqueue", "-q"}
	for i := range jobs {
		args = append(args, "j"+strconv.Itoa(i))
	}
	if _, errOut, code := r.baton(args...); code != 0 {
		t.Fatal(errOut)
	}
	stop := r.cron(200*time.Millisecond, r.fleetArgs("other", common...)...)
	defer stop()
	// Resumed once the other host works, while jobs still wait.
	eventually(t, 30*time.Second, "host other starts 6 jobs", func() bool { return len(readLines(t, events)) >= 6 })
	stop()
	_ = stale.cmd.Process.Signal(syscall.SIGCONT)
	resumed := len(readLines(t, events))
	if code := stale.wait(t, 5*time.Second); code != 1 {
		t.Fatalf("resumed holder exit %d, want 1:\n%s", code, stale.log())
	}
	// The stale holder has exited: every job start it made is recorded.
	var stales []string
	for _, e := range readLines(t, events) {
		if f := strings.Fields(e); f[1] == "stale" {
			stales = append(stales, e)
		}
	}
	t.Logf("%d job starts before the resume; the resumed holder: %s", resumed, lastLine(stale.log()))
	if len(stales) > 0 {
		t.Errorf("the resumed stale holder started %d jobs after it lost its lease: %v\n%s", len(stales), stales, stale.log())
	}
	// What it read after the slot's new holder replayed the slot's pending
	// entries would stay pending, unseen, for that holder's whole lifetime.
	st := []string{"--lock-backend", "redis", "--slots", "1", "--standby-slots", "0"}
	for end := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		s := r.status(st...)
		if s.Jobs.Done == jobs && s.Jobs.Pending == 0 && s.Jobs.Waiting == 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("not every job done within 20s: %+v\njob starts:\n%s", *s.Jobs, strings.Join(readLines(t, events), "\n"))
		}
	}
	started := map[string]bool{}
	for _, e := range readLines(t, events) {
		started[strings.Fields(e)[3]] = true
	}
	if len(started) != jobs {
		t.Errorf("%d jobs started, want %d", len(started), jobs)
	}
	time.Sleep(500 * time.Millisecond) // the last candidates set up their signal handlers
	r.drainAll(1)
}
