//go:build linux

package proc

import (
	"os"
	"os/exec"
	"sync"
	"syscall"
)

// detached holds the pids of the candidates SpawnDetached started that
// have not been reaped: baton processes of their own, which may hold slots,
// never a job's work, so KillDescendants spares them. Written with reg held
// shared (from fork to registration), read with reg held exclusively.
var detached struct {
	sync.Mutex
	pids map[int]bool
}

// SpawnDetached starts argv[0] with argv[1:] as a detached process: a new
// session (so a signal to our group does not reach it), stdin from /dev/null,
// our stdout and stderr, and env added to ours. Go opens files close-on-exec,
// so no lock is inherited. The child is reaped in the background.
func SpawnDetached(argv []string, env ...string) error {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := startDetached(cmd); err != nil {
		return err
	}
	pid := cmd.Process.Pid
	go func() {
		_ = cmd.Wait() // reaped only, so it leaves no zombie
		detached.Lock()
		delete(detached.pids, pid)
		detached.Unlock()
		Done(pid)
	}()
	return nil
}

// startDetached is Start, registering cmd as a detached candidate before a
// KillDescendants can look.
func startDetached(cmd *exec.Cmd) error {
	reg.RLock()
	defer reg.RUnlock()
	if err := start(cmd); err != nil {
		return err
	}
	detached.Lock()
	defer detached.Unlock()
	if detached.pids == nil {
		detached.pids = map[int]bool{}
	}
	detached.pids[cmd.Process.Pid] = true
	return nil
}

// isDetached reports whether pid is a candidate SpawnDetached started.
func isDetached(pid int) bool {
	detached.Lock()
	defer detached.Unlock()
	return detached.pids[pid]
}
