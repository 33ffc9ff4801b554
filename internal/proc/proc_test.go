//go:build linux

package proc

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
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

func TestKillHolderLeftovers(t *testing.T) {
	token := NewToken()
	if len(token) != 32 || token == NewToken() {
		t.Fatalf("token %q: want 128 random bits in hex", token)
	}
	start := func(env ...string) *exec.Cmd {
		c := exec.Command("sh", "-c", "sleep 60 & wait")
		c.Env = append(os.Environ(), env...)
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		// The group: sh's sleep too, which would otherwise outlive the test.
		t.Cleanup(func() { _ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL); _ = c.Wait() })
		return c
	}
	// Same queue and slot, another holder's token: another deployment's job.
	left := start(EnvHolder+"="+token, "BATON_QUEUE=q", "BATON_SLOT=h/run-0")
	other := start(EnvHolder+"="+NewToken(), "BATON_QUEUE=q", "BATON_SLOT=h/run-0")
	prefix := start(EnvHolder + "=" + token[:16])
	holder := start(EnvHolder + "=" + token) // a holder a job started: spared
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%[1]d/children", left.Process.Pid))
		if len(strings.Fields(string(b))) == 1 { // sh started its sleep
			break
		}
		if time.Now().After(end) {
			t.Fatal("sh never started its sleep")
		}
	}
	spare := func(pid int) bool { return pid == holder.Process.Pid }
	if n := KillHolderLeftovers(token, spare); n != 2 {
		t.Fatalf("killed %d, want 2 (sh and its sleep)", n)
	}
	_ = left.Wait()
	if ws := left.ProcessState.Sys().(syscall.WaitStatus); ws.Signal() != syscall.SIGKILL {
		t.Fatalf("leftover ended by %v", ws)
	}
	for _, c := range []*exec.Cmd{other, prefix, holder} {
		if c.Process.Signal(syscall.Signal(0)) != nil {
			t.Fatal("killed a process without the exact token, or one spared")
		}
	}
	if n := KillHolderLeftovers("", nil); n != 0 {
		t.Fatalf("an empty token killed %d", n)
	}
}

func TestEnvHas(t *testing.T) {
	env := []byte("A=1\x00BATON_RUN=12\x00B=")
	for kv, want := range map[string]bool{"A=1": true, "BATON_RUN=12": true, "BATON_RUN=1": false, "B=": true, "=": false} {
		if EnvHas(env, []byte(kv)) != want {
			t.Errorf("EnvHas(%q) = %v", kv, !want)
		}
	}
}
