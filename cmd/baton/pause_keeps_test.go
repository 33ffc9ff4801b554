package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-run/baton/work"
)

// TestPauseKeepsStandbysRetriesAndTicks: while a queue is paused, what a
// pause does not stop goes on: its standby stays a standby (no promotion,
// the same run holder), a retry becomes due and waits in the stream, and
// periodic ticks are still enqueued; no job starts. After resume they run.
func TestPauseKeepsStandbysRetriesAndTicks(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx := context.Background()
	log := filepath.Join(r.dir, "jobs.log")
	job := r.script("job.sh", `[ "$(cat)" = fail ] && exit 3
echo "$BATON_JOB_ID" >> `+log+"\n")
	cfg := r.periodicConfig(beatEntry)
	args := []string{"run", "--config", cfg, "--slots", "1", "--standby-slots", "1", "--retry-backoff", "4s", "--retry-backoff-max", "4s", "--", job}
	run := r.start(args...)
	eventually(t, 20*time.Second, "the run slot held", func() bool { return len(r.heldPIDs("default", 1)) == 1 })
	standby := r.start(args...)
	fails := r.enqueueOne("--max-attempts", "2", "fail")
	eventually(t, 20*time.Second, "the failed job waits for its retry", func() bool {
		loc, err := work.Locate(ctx, r.client(), "default", fails)
		return err == nil && loc.State == work.StateRetrying
	})
	if _, errOut, code := r.baton("pause", "--config", cfg); code != 0 {
		t.Fatalf("pause: exit %d %s", code, errOut)
	}
	paused := time.Now()
	// The retry becomes due (4 s after the failure) and two ticks are
	// enqueued, to wait.
	for end := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		loc, err := work.Locate(ctx, r.client(), "default", fails)
		if err == nil && loc.State == work.StateWaiting && len(r.queuedTicks("default")) >= 2 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("not within 20s: the retry due and two ticks queued, waiting: %+v %v, ticks %v\n%s", loc, err, r.queuedTicks("default"), run.log())
		}
	}
	lines := func() int { b, _ := os.ReadFile(log); return len(strings.Fields(string(b))) }
	eventually(t, 5*time.Second, "the pause has held 1 s", func() bool { return time.Since(paused) > time.Second })
	ran := lines()
	if pids := r.heldPIDs("default", 1); len(pids) != 1 || pids[0] != run.cmd.Process.Pid {
		t.Fatalf("run slot holders %v, want the first holder %d", pids, run.cmd.Process.Pid)
	}
	for _, p := range []*process{run, standby} {
		if syscall.Kill(p.cmd.Process.Pid, 0) != nil {
			t.Fatalf("holder %d left while paused:\n%s", p.cmd.Process.Pid, p.log())
		}
	}
	if strings.Contains(standby.log(), "promot") {
		t.Fatalf("the standby was promoted while paused:\n%s", standby.log())
	}
	// Two more ticks queued, none run.
	n := len(r.queuedTicks("default"))
	eventually(t, 20*time.Second, "two more ticks queued", func() bool { return len(r.queuedTicks("default")) >= n+2 })
	if now := lines(); now != ran {
		t.Fatalf("%d jobs ran while paused", now-ran)
	}
	if _, errOut, code := r.baton("resume", "--config", cfg); code != 0 {
		t.Fatalf("resume: exit %d %s", code, errOut)
	}
	eventually(t, 20*time.Second, "the retry runs (dead after 2 attempts) and the ticks run", func() bool {
		d := r.deadOf("default", fails)
		b, _ := os.ReadFile(log)
		return d != nil && d.Attempts == 2 && len(strings.Fields(string(b))) >= ran+2
	})
}
