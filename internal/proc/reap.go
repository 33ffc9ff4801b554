//go:build linux

package proc

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A child subreaper (PR_SET_CHILD_SUBREAPER, as systemd and container inits
// use) inherits the orphans of its descendants: a job that daemonizes (new
// session, double fork) stays in the holder's process tree, as the holder's
// child, instead of vanishing under init. The holder then knows it started
// it, and must also reap it.
//
// Reaping must not steal exit statuses that os/exec waits for, so every child
// the process starts itself goes through Start, which registers it until
// Done; every other child is an orphan (reparented here) and is reaped here.

var subreaper atomic.Bool

// adopter is /proc/self/task/<pid>/children, kept open: the kernel gives an
// orphan to the first live thread of its subreaper, the main thread, which
// in a Go program never exits. Reading it again (pread at 0) is the cheap
// look at whether there is anything to reap at all. Guarded by reg.
var adopter struct {
	f   *os.File
	buf [4096]byte
}

// BecomeSubreaper makes the calling process a child subreaper. Only a process
// that starts all its children through Start may call it: other children's
// exit statuses would be taken by KillOrphans.
func BecomeSubreaper() error {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return err
	}
	reg.Lock()
	defer reg.Unlock()
	if adopter.f == nil {
		adopter.f, _ = os.Open("/proc/self/task/" + strconv.Itoa(os.Getpid()) + "/children")
	}
	subreaper.Store(true)
	return nil
}

// maybeOrphans reports whether the main thread may have a child that Start
// did not register; true when it cannot tell. Call with reg locked.
func maybeOrphans() bool {
	if adopter.f == nil {
		return true
	}
	n, err := adopter.f.ReadAt(adopter.buf[:], 0)
	if (err != nil && err != io.EOF) || n == len(adopter.buf) {
		return true
	}
	reg.mu.Lock()
	defer reg.mu.Unlock()
	for b := adopter.buf[:n]; len(b) > 0; {
		b = bytes.TrimLeft(b, " \n")
		i := bytes.IndexAny(b, " \n")
		if i < 0 {
			i = len(b)
		}
		if len(b) > 0 && reg.waited[atoi(b[:i])] == 0 {
			return true
		}
		b = b[i:]
	}
	return false
}

// atoi parses a decimal pid without allocating; -1 if it is not one.
func atoi(b []byte) int {
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return -1
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// Subreaper reports whether BecomeSubreaper succeeded in this process.
func Subreaper() bool { return subreaper.Load() }

// reg holds the children whose exit status an os/exec Cmd collects. Start
// holds it shared from fork to registration, KillOrphans exclusively while
// it decides what is an orphan: a child that exits at once is a zombie
// before Start returns, and must not be reaped as an orphan meanwhile.
var reg struct {
	sync.RWMutex
	mu     sync.Mutex  // guards waited
	waited map[int]int // pid → Start calls not yet Done (pid reuse)
}

// Start starts cmd and registers its pid as a child that cmd.Wait reaps;
// call Done with the pid once cmd.Wait returned.
func Start(cmd *exec.Cmd) error {
	reg.RLock()
	defer reg.RUnlock()
	return start(cmd)
}

// start is Start with reg held shared.
func start(cmd *exec.Cmd) error {
	if err := cmd.Start(); err != nil {
		return err
	}
	reg.mu.Lock()
	if reg.waited == nil {
		reg.waited = map[int]int{}
	}
	reg.waited[cmd.Process.Pid]++
	reg.mu.Unlock()
	return nil
}

// Done unregisters a child started by Start whose Wait returned.
func Done(pid int) {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	if reg.waited[pid]--; reg.waited[pid] <= 0 {
		delete(reg.waited, pid)
	}
}

// Children returns the pids of the calling process's children, read from
// /proc/self/task/*/children (a child belongs to the thread that forked it,
// or that adopted it). It reads a few small files: cheap enough per job.
func Children() ([]int, error) {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil, err
	}
	var out []int
	for _, t := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + t.Name() + "/children")
		if err != nil {
			continue // the thread exited; its children moved to another
		}
		for _, f := range bytes.Fields(b) {
			if pid, err := strconv.Atoi(string(f)); err == nil {
				out = append(out, pid)
			}
		}
	}
	return out, nil
}

// orphans returns the children no Start registered. Call with reg locked.
func orphans() []int {
	kids, err := Children()
	if err != nil {
		return nil
	}
	reg.mu.Lock()
	defer reg.mu.Unlock()
	out := kids[:0]
	for _, pid := range kids {
		if reg.waited[pid] == 0 {
			out = append(out, pid)
		}
	}
	return out
}

// reap collects pid if it is a zombie child; true if it did.
func reap(pid int) bool {
	var ws syscall.WaitStatus
	got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
	return err == nil && got == pid
}

// KillOrphans reaps the orphans that have exited and kills, with their
// process trees, the live ones for which doomed(environ) is true (environ
// as in /proc/<pid>/environ; nil when it cannot be read), then reaps them.
// It returns how many processes it killed. Orphans are the process's own
// children that no Start registered: with BecomeSubreaper, what the
// process's descendants left running. When there are none it costs one
// pread of the main thread's /proc children file.
func KillOrphans(doomed func(environ []byte) bool) int {
	reg.Lock()
	defer reg.Unlock()
	if !maybeOrphans() {
		return 0
	}
	var killed []int
	for _, pid := range orphans() {
		if reap(pid) {
			continue
		}
		env, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
		if !doomed(env) {
			continue
		}
		if start, err := StartTime(pid); err == nil {
			killed = append(killed, killTree(pid, start, nil)...)
		}
	}
	if len(killed) == 0 {
		return 0
	}
	// The killed processes and their killed children become our zombies
	// (a child whose parent dies is adopted here); collect them.
	for end := time.Now().Add(time.Second); ; time.Sleep(time.Millisecond) {
		for _, pid := range orphans() {
			reap(pid)
		}
		left := false
		for _, pid := range killed {
			if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
				left = true
				break
			}
		}
		if !left || time.Now().After(end) {
			break
		}
	}
	return len(killed)
}

// KillDescendants kills, with SIGKILL, every live descendant of the calling
// process except the candidates SpawnDetached started (and their trees),
// and looks again until none is left or within has passed. It returns how
// many processes it signalled. It is for leaving at once (a second signal,
// a lost slot, the hard deadline): a job killed with its process group lets
// go of its children only as it exits, and only then does this child
// subreaper adopt them, so a single look right after the kill misses a
// daemon the job started in a new session, which would outlive the holder
// under init. Each pass stops what it finds (SIGSTOP) before killing, so
// nothing forks away meanwhile, and reaps the orphans that have exited.
func KillDescendants(within time.Duration) int {
	self := os.Getpid()
	signalled := map[int]bool{}
	for end := time.Now().Add(within); ; time.Sleep(2 * time.Millisecond) {
		reg.Lock()
		left := killBelow(self, signalled)
		for _, pid := range orphans() {
			reap(pid)
		}
		reg.Unlock()
		if left == 0 || time.Now().After(end) {
			break
		}
	}
	return len(signalled)
}

// killBelow stops, then kills, pid's live descendants but the detached
// candidates' trees, adding them to signalled; it returns how many it found
// alive. Call with reg locked, so no candidate is being registered.
func killBelow(pid int, signalled map[int]bool) int {
	seen := stopDescendants(pid, isDetached)
	for p := range seen {
		if syscall.Kill(p, syscall.SIGKILL) == nil {
			signalled[p] = true
		}
	}
	return len(seen)
}
