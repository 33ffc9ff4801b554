package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestCancelGraceZero: with shutdown_grace 0, a cancelled exec job that
// ignores SIGTERM is killed at once (SIGKILL after no grace), not after a
// default grace of 10 s: its process group is gone within a second or two.
func TestCancelGraceZero(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	pidf := filepath.Join(r.dir, "job.pid")
	deaf := r.script("deaf.sh", "cat >/dev/null; echo $$ > "+pidf+"; trap '' TERM\nsleep 60 & sleep 60 & wait; wait\n")
	id := r.enqueue("default", 1)[0]
	r.start("run", "--lifetime", "1m", "--shutdown-grace", "0", "--", deaf)
	var pgid int
	eventually(t, 20*time.Second, "the job runs", func() bool {
		b, _ := os.ReadFile(pidf)
		pgid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return pgid > 0
	})
	start := time.Now()
	type result struct {
		out, errOut string
		code        int
	}
	done := make(chan result, 1)
	go func() {
		out, errOut, code := r.baton("cancel", id)
		done <- result{out, errOut, code}
	}()
	// Generous for a loaded machine, far below the 10 s default grace.
	eventually(t, 5*time.Second, "the job's process group is gone", func() bool { return !groupAlive(pgid) })
	t.Logf("group gone %s after cancel started", time.Since(start).Round(time.Millisecond))
	res := <-done
	if res.code != 0 || !strings.Contains(res.out, "stopped while running") {
		t.Fatalf("cancel: exit %d %s%s", res.code, res.out, res.errOut)
	}
}
