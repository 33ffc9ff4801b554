//go:build linux

package proc

import (
	"os/exec"
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
