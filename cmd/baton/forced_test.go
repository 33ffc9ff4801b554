package main

import (
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestForcedExitLeavesNoDaemon: a job, or a persistent child's handler,
// starts a daemon (a new session: not in the job's process group) and
// keeps running; then the holder is forced out, by a second SIGTERM or by
// losing its lease (fleet mode, cut from Redis). The daemon, and what it
// started, must die with the holder: nothing a job started outlives it,
// although the daemon is reparented to the holder only once the killed
// job has exited.
func TestForcedExitLeavesNoDaemon(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		persistent bool
		lease      bool // forced out by a lost lease, not a second SIGTERM
	}{
		{name: "exec second SIGTERM"},
		{name: "persistent second SIGTERM", persistent: true},
		{name: "exec lost lease", lease: true},
		{name: "persistent lost lease", persistent: true, lease: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t)
			pids := filepath.Join(r.dir, "pids")
			// The daemon writes its own pid and its child's; the job
			// then runs until killed.
			job := r.script("job.sh", `cat >/dev/null
setsid sh -c 'sleep 300 & echo $$ >> `+pids+`; echo $! >> `+pids+`; wait' </dev/null >/dev/null 2>&1 &
exec sleep 300
`)
			args := []string{"--slots", "1", "--standby-slots", "0", "--lifetime", "1m", "--shutdown-grace", "1m"}
			if tc.persistent {
				args = append(args, "--persistent", "--", examplePath(t, "shell/worker.sh"), job)
			} else {
				args = append(args, "--", job)
			}
			var h *process
			var cut func()
			if tc.lease {
				px := r.proxy()
				// Fenced 1.6s after the cut, well before the lease expires.
				args = append([]string{"--redis-url", "redis://" + px.Addr + "/0", "--lease-ttl", "2400ms", "--lease-renew", "200ms",
					"--redis-down-exit", "1m"}, args...)
				h = r.start(r.fleetArgs("cut", args...)...)
				cut = func() { px.Partition(true) }
			} else {
				h = r.start(append([]string{"run"}, args...)...)
				cut = func() {
					_ = h.cmd.Process.Signal(syscall.SIGTERM)
					eventually(t, 10*time.Second, "the holder drains", func() bool { return strings.Contains(h.log(), "draining") })
					_ = h.cmd.Process.Signal(syscall.SIGTERM)
				}
			}
			if _, errOut, code := r.baton("enqueue", "x"); code != 0 {
				t.Fatal(errOut)
			}
			daemon := pidsIn(t, pids, 2)
			cut()
			if code := h.wait(t, 10*time.Second); code != 1 {
				t.Fatalf("exit %d, want 1 (forced out): %s", code, h.log())
			}
			for _, p := range daemon {
				eventually(t, 3*time.Second, "daemon process "+strconv.Itoa(p)+" gone with its holder", func() bool { return gone(p) })
			}
		})
	}
}
