//go:build linux

package proc

import (
	"os"
	"os/exec"
	"syscall"
)

// SpawnDetached starts argv[0] with argv[1:] as a detached process: a new
// session (so a signal to our group does not reach it), stdin from /dev/null,
// our stdout and stderr, and env added to ours. Go opens files close-on-exec,
// so no lock is inherited. The child is reaped in the background.
func SpawnDetached(argv []string, env ...string) error {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := Start(cmd); err != nil {
		return err
	}
	go func() {
		_ = cmd.Wait() // reaped only, so it leaves no zombie
		Done(cmd.Process.Pid)
	}()
	return nil
}
