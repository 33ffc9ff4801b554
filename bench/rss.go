package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
)

// Peak RSS is read as VmHWM from /proc/<pid>/status, never from the rusage
// of wait4: Go starts children with vfork, and at execve Linux folds the
// hiwater RSS of the mm the child shared — the parent's — into the child's
// ru_maxrss, so rusage would report this benchmark's own size.

// vmHWM is the peak resident set of a live process, in KiB.
func vmHWM(pid int) (float64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				return strconv.ParseFloat(f[0], 64)
			}
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
}

// tracedPeakRSS runs argv to completion under ptrace and reads its VmHWM at
// the exit stop (PTRACE_O_TRACEEXIT), when the process is done but its memory
// is still there; out receives its stdout and stderr. It returns the peak in
// KiB and the exit code. The stops make the process slower: never time it.
func tracedPeakRSS(argv []string, out *os.File) (kb float64, code int, err error) {
	// Every ptrace request must come from the thread that started the tracee.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Ptrace: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	pid := cmd.Process.Pid
	defer cmd.Process.Release() // reaped below with wait4, not by cmd.Wait
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil || !ws.Stopped() {
		_ = cmd.Process.Kill()
		return 0, 0, fmt.Errorf("traced child did not stop at exec: %v (status %v)", err, ws)
	}
	if err := syscall.PtraceSetOptions(pid, syscall.PTRACE_O_TRACEEXIT); err != nil {
		_ = cmd.Process.Kill()
		return 0, 0, fmt.Errorf("ptrace set options: %w", err)
	}
	sig := 0
	for {
		if err := syscall.PtraceCont(pid, sig); err != nil {
			return 0, 0, fmt.Errorf("ptrace cont: %w", err)
		}
		if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil {
			return 0, 0, err
		}
		switch {
		case ws.Exited():
			if kb == 0 {
				return 0, 0, fmt.Errorf("exit stop missed")
			}
			return kb, ws.ExitStatus(), nil
		case ws.Signaled():
			return 0, 0, fmt.Errorf("traced child killed by %v", ws.Signal())
		case ws.Stopped() && ws.TrapCause() == syscall.PTRACE_EVENT_EXIT:
			if kb, err = vmHWM(pid); err != nil {
				return 0, 0, err
			}
			sig = 0
		case ws.Stopped():
			sig = int(ws.StopSignal()) // pass the runtime's own signals on
		}
	}
}
