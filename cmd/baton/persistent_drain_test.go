package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestPersistentSIGTERMDuringStartup: SIGTERM while the only child has not
// said ready yet: the holder leaves within shutdown_grace (not at its hard
// deadline a minute on), the child is killed, and the job waits in the
// queue, unrun.
func TestPersistentSIGTERMDuringStartup(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.baton("enqueue", "x")
	pidFile := filepath.Join(r.dir, "child.pid")
	slow := "import os, time\nopen(" + strconv.Quote(pidFile) + ", 'w').write(str(os.getpid()))\ntime.sleep(120)\n"
	h := r.start("run", "--persistent", "--lifetime", "1m", "--jitter", "1ms", "--shutdown-grace", "2s", "--", python(t), "-c", slow)
	var child int
	eventually(t, 15*time.Second, "the child started", func() bool {
		b, _ := os.ReadFile(pidFile)
		child, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return child > 0
	})
	sent := time.Now()
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	code := h.wait(t, 90*time.Second)
	if took := time.Since(sent); took > 12*time.Second {
		t.Fatalf("holder left %s after SIGTERM (exit %d), want about shutdown_grace (2s): it waited for the child's start-up\n%s", took, code, h.log())
	}
	eventually(t, 5*time.Second, "the starting child killed", func() bool { return gone(child) })
	if s := r.status(); s.Jobs.Waiting != 1 || s.Jobs.Pending != 0 {
		t.Fatalf("jobs %+v, want the job waiting, unrun", *s.Jobs)
	}
}
