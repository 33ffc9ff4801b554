//go:build linux

package proc

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestKillTreeReachesDaemonizedGrandchildren(t *testing.T) {
	// sh starts a background sleep in a new session (setsid): it leaves sh's
	// process group but stays in sh's tree while sh lives.
	c := exec.Command("sh", "-c", "setsid sleep 60 & sleep 60")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = c.Wait(); close(done) }()
	var kids []Stat
	for end := time.Now().Add(5 * time.Second); len(kids) < 2; time.Sleep(10 * time.Millisecond) {
		kids, _ = Descendants(c.Process.Pid)
		if time.Now().After(end) {
			t.Fatalf("descendants of sh: %v", kids)
		}
	}
	start, err := StartTime(c.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if n := KillTree(c.Process.Pid, start+1); n != 0 {
		t.Fatalf("KillTree with a wrong start time killed %d", n)
	}
	if n := KillTree(c.Process.Pid, start); n != 3 {
		t.Fatalf("KillTree killed %d, want 3 (sh and two sleeps)", n)
	}
	<-done
	for _, k := range kids {
		for end := time.Now().Add(5 * time.Second); Alive(k.PID, k.Start); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("pid %d survived", k.PID)
			}
		}
	}
}

func TestParseStat(t *testing.T) {
	b := []byte("42 (a) b (c)) S 7 42 42 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 12345 0 0")
	s, err := parseStat(42, b)
	if err != nil || s.PPID != 7 || s.PGID != 42 || s.State != 'S' || s.Start != 12345 {
		t.Fatalf("parseStat = %+v, %v", s, err)
	}
	if _, err := parseStat(42, []byte("42 (x) Z 1 1 1")); err == nil {
		t.Fatal("short or zombie stat must fail")
	}
}

// KillTreeExcept spares the descendants it is told to, with their subtrees.
func TestKillTreeSparesSiblings(t *testing.T) {
	c := exec.Command("sh", "-c", "sleep 60 & sh -c 'sleep 61 & wait' & wait")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = c.Wait(); close(done) }()
	var kids []Stat
	for end := time.Now().Add(5 * time.Second); len(kids) < 3; time.Sleep(10 * time.Millisecond) {
		kids, _ = Descendants(c.Process.Pid)
		if time.Now().After(end) {
			t.Fatalf("descendants: %v", kids)
		}
	}
	var spared int // the inner sh: it and its sleep 61 must survive
	for _, k := range kids {
		if k.PPID == c.Process.Pid {
			if b, _ := os.ReadFile("/proc/" + strconv.Itoa(k.PID) + "/cmdline"); strings.Contains(string(b), "sleep 61") {
				spared = k.PID
			}
		}
	}
	if spared == 0 {
		t.Fatalf("no inner sh among %v", kids)
	}
	start, _ := StartTime(c.Process.Pid)
	KillTreeExcept(c.Process.Pid, start, func(pid int) bool { return pid == spared })
	<-done
	sub, _ := Descendants(spared)
	if !Alive(spared, mustStart(t, spared)) || len(sub) != 1 {
		t.Fatalf("spared sh %d or its sleep killed (subtree %v)", spared, sub)
	}
	_ = syscall.Kill(sub[0].PID, syscall.SIGKILL)
	_ = syscall.Kill(spared, syscall.SIGKILL)
}

func mustStart(t *testing.T, pid int) uint64 {
	t.Helper()
	s, err := StartTime(pid)
	if err != nil {
		t.Fatalf("pid %d: %v", pid, err)
	}
	return s
}
