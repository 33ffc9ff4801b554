package proc

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

func TestStartTimeIdentifiesProcess(t *testing.T) {
	st, err := StartTime(os.Getpid())
	if err != nil || st == 0 {
		t.Fatalf("StartTime(self) = %d, %v", st, err)
	}
	if !Alive(os.Getpid(), st) || Alive(os.Getpid(), st+1) {
		t.Fatal("Alive must match pid and start time")
	}
	if _, err := StartTime(1 << 30); err != ErrNoProcess {
		t.Fatalf("missing pid: %v", err)
	}
}

func TestSetName(t *testing.T) {
	old, _ := Name(os.Getpid())
	t.Cleanup(func() { _ = SetName(old) })
	if err := SetName("baton:run:12345678"); err != nil {
		t.Fatal(err)
	}
	if got, _ := Name(os.Getpid()); got != "baton:run:12345" {
		t.Fatalf("name %q, want the first 15 bytes", got)
	}
}

func TestKillLeftovers(t *testing.T) {
	mark := "BATON_SLOT=test/" + t.Name()
	start := func(env ...string) *exec.Cmd {
		c := exec.Command("sleep", "60")
		c.Env = append(os.Environ(), env...)
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
		return c
	}
	left := start(mark, "BATON_QUEUE=q")
	other := start("BATON_SLOT=test/other", "BATON_QUEUE=q")
	if n := KillLeftovers(mark, "BATON_QUEUE=q"); n != 1 {
		t.Fatalf("killed %d, want 1", n)
	}
	_ = left.Wait()
	if ws := left.ProcessState.Sys().(syscall.WaitStatus); ws.Signal() != syscall.SIGKILL {
		t.Fatalf("leftover ended by %v", ws)
	}
	time.Sleep(10 * time.Millisecond)
	if other.Process.Signal(syscall.Signal(0)) != nil {
		t.Fatal("killed a process of another slot")
	}
}
