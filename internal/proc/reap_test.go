//go:build linux

package proc

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestKillOrphans: a subreaper adopts what a child daemonized; KillOrphans
// kills and reaps the orphans it is told to, reaps exited ones, and leaves
// alone the children it started itself (registered by Start).
func TestKillOrphans(t *testing.T) {
	if err := BecomeSubreaper(); err != nil {
		t.Fatal(err)
	}
	mine := exec.Command("sleep", "60")
	if err := Start(mine); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mine.Process.Kill(); _ = mine.Wait(); Done(mine.Process.Pid) })
	// Two daemons in new sessions, one with a mark; a short-lived orphan.
	sh := exec.Command("sh", "-c", "MARK=1 setsid sleep 60 >/dev/null & echo $!; setsid sleep 60 >/dev/null & echo $!; sleep 0.01 >/dev/null & echo $!")
	var out bytes.Buffer
	sh.Stdout = &out
	if err := Start(sh); err != nil {
		t.Fatal(err)
	}
	_ = sh.Wait()
	Done(sh.Process.Pid)
	var pids []int
	for _, f := range strings.Fields(out.String()) {
		p, _ := strconv.Atoi(f)
		pids = append(pids, p)
		t.Cleanup(func() { _ = (&os.Process{Pid: p}).Kill() })
	}
	marked, unmarked, short := pids[0], pids[1], pids[2]
	// The marked one is marked once it has exec'd its sleep; the short
	// one is a zombie once it has exited.
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		env, _ := os.ReadFile("/proc/" + strconv.Itoa(marked) + "/environ")
		if _, err := ReadStat(short); EnvHas(env, []byte("MARK=1")) && err != nil {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the marked orphan never exec'd, or the short one never exited")
		}
	}
	if n := KillOrphans(func(env []byte) bool { return EnvHas(env, []byte("MARK=1")) }); n != 1 {
		t.Fatalf("killed %d, want the marked orphan", n)
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(marked)); err == nil {
		t.Fatal("the marked orphan is not gone (killed and reaped)")
	}
	if _, err := ReadStat(unmarked); err != nil {
		t.Fatal("the unmarked orphan was killed")
	}
	// The short orphan exits and is reaped on its own; give a loaded
	// machine time for it.
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		kids, _ := Children()
		if len(kids) == 2 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("children %v: want the one we started and the unmarked orphan (the exited orphan reaped)", kids)
		}
	}
	if n := KillOrphans(func([]byte) bool { return true }); n != 1 {
		t.Fatalf("killed %d, want the unmarked orphan", n)
	}
	if kids, _ := Children(); len(kids) != 1 || kids[0] != mine.Process.Pid {
		t.Fatalf("children %v: want only %d, started by Start", kids, mine.Process.Pid)
	}
}

// BenchmarkKillOrphansNone is what the exec handler adds to each job when
// the job left nothing behind: one look at the process's children.
func BenchmarkKillOrphansNone(b *testing.B) {
	if err := BecomeSubreaper(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if KillOrphans(func([]byte) bool { return true }) != 0 {
			b.Fatal("killed something")
		}
	}
}

// TestKillDescendants: a job killed with its process group leaves a daemon
// (a new session) that is adopted only once the job has exited;
// KillDescendants, called right after the kill, gets it and its child all
// the same, and spares a candidate SpawnDetached started.
func TestKillDescendants(t *testing.T) {
	if err := BecomeSubreaper(); err != nil {
		t.Fatal(err)
	}
	if err := SpawnDetached([]string{"sleep", "60"}); err != nil {
		t.Fatal(err)
	}
	var candidate int
	detached.Lock()
	for p := range detached.pids {
		candidate = p
	}
	detached.Unlock()
	t.Cleanup(func() { _ = syscall.Kill(candidate, syscall.SIGKILL) })
	pids := filepath.Join(t.TempDir(), "pids")
	job := exec.Command("sh", "-c", `setsid sh -c 'sleep 60 & echo $$ >> `+pids+`; echo $! >> `+pids+`; wait' </dev/null >/dev/null 2>&1 &
exec sleep 60`)
	job.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := Start(job); err != nil {
		t.Fatal(err)
	}
	var daemon []int
	for end := time.Now().Add(5 * time.Second); len(daemon) < 2; time.Sleep(5 * time.Millisecond) {
		b, _ := os.ReadFile(pids)
		daemon = daemon[:0]
		for _, f := range strings.Fields(string(b)) {
			p, _ := strconv.Atoi(f)
			daemon = append(daemon, p)
		}
		if time.Now().After(end) {
			t.Fatal("the job's daemon never wrote its pids")
		}
	}
	for _, p := range daemon {
		t.Cleanup(func() { _ = syscall.Kill(p, syscall.SIGKILL) })
	}
	_ = syscall.Kill(-job.Process.Pid, syscall.SIGKILL)
	if n := KillDescendants(2 * time.Second); n < 2 {
		t.Errorf("signalled %d processes, want at least the daemon and its child", n)
	}
	_ = job.Wait()
	Done(job.Process.Pid)
	for _, p := range daemon {
		if s, err := ReadStat(p); err == nil {
			t.Errorf("daemon process %d still alive: %+v", p, s)
		}
	}
	if _, err := ReadStat(candidate); err != nil {
		t.Errorf("the detached candidate %d was killed: %v", candidate, err)
	}
}
