//go:build linux

// Package proc holds the Linux process details baton relies on: process start
// times (to tell a live holder from a reused pid), the process name shown by ps
// and top, and starting detached candidates.
package proc

import (
	"bytes"
	"errors"
	"os"
	"runtime"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ErrNoProcess means the pid does not exist (or is a zombie being reaped).
var ErrNoProcess = errors.New("no such process")

// StartTime returns the start time of pid in clock ticks since boot (field 22
// of /proc/<pid>/stat). A pid and its start time identify one process for life.
func StartTime(pid int) (uint64, error) {
	s, err := ReadStat(pid)
	return s.Start, err
}

// Alive reports whether pid is running and started at start.
func Alive(pid int, start uint64) bool {
	if pid <= 0 {
		return false
	}
	st, err := StartTime(pid)
	return err == nil && st == start
}

// SetName sets the process name that ps and top show (at most 15 bytes).
// prctl(PR_SET_NAME) names the calling thread, so it is used only on the main
// thread; elsewhere the main thread's /proc comm file is written instead.
func SetName(name string) error {
	if len(name) > 15 {
		name = name[:15]
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if unix.Gettid() == unix.Getpid() {
		b := append([]byte(name), 0)
		return unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&b[0])), 0, 0, 0)
	}
	return os.WriteFile("/proc/self/comm", []byte(name), 0)
}

// Name returns the process name (the main thread's comm).
func Name(pid int) (string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	return string(bytes.TrimSpace(b)), err
}
