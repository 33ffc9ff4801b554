//go:build linux

package proc

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"strings"
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
