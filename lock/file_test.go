package lock

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/proc"
)

func newSet(tb testing.TB, dir, role string, n int) *FileSet {
	tb.Helper()
	s, err := NewFileSet(dir, "q", role, n)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

func TestAcquireUpToN(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "locks")
	s := newSet(t, dir, RoleRun, 3)
	slots := make([]Slot, 3)
	for i := 0; i < 3; i++ {
		sl, ok, err := s.TryAcquire()
		if err != nil || !ok {
			t.Fatalf("acquire %d: ok=%v err=%v", i, ok, err)
		}
		if slots[sl.Index()] != nil || sl.Name() != "run-"+strconv.Itoa(sl.Index()) {
			t.Fatalf("slot %d taken twice or named %s", sl.Index(), sl.Name())
		}
		slots[sl.Index()] = sl
	}
	if _, ok, err := s.TryAcquire(); ok || err != nil {
		t.Fatalf("4th acquire of 3: ok=%v err=%v", ok, err)
	}
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o750 {
		t.Fatalf("lock dir mode: %v %v", fi.Mode(), err)
	}
	if err := slots[1].Release(); err != nil {
		t.Fatal(err)
	}
	if err := slots[1].Release(); err != nil {
		t.Fatalf("second release: %v", err)
	}
	sl, ok, err := s.TryAcquire()
	if !ok || err != nil || sl.Index() != 1 {
		t.Fatalf("reacquire freed slot: %v %v %v", sl, ok, err)
	}
	if _, err := os.Stat(s.Path(1)); err != nil {
		t.Fatalf("lock file must stay after release: %v", err)
	}
}

func TestRunAndStandbyAreDistinct(t *testing.T) {
	dir := t.TempDir()
	run, sb := newSet(t, dir, RoleRun, 1), newSet(t, dir, RoleStandby, 1)
	if run.Path(0) == sb.Path(0) {
		t.Fatalf("same file %s", run.Path(0))
	}
	if _, ok, _ := run.TryAcquire(); !ok {
		t.Fatal("run")
	}
	if _, ok, _ := sb.TryAcquire(); !ok {
		t.Fatal("standby must not share the run slot's lock")
	}
	if _, err := NewFileSet(dir, "q", "other", 1); err == nil {
		t.Fatal("unknown role accepted")
	}
	if _, err := NewFileSet(dir, "q", RoleRun, 0); err == nil {
		t.Fatal("zero slots accepted")
	}
}

func TestRecords(t *testing.T) {
	s := newSet(t, t.TempDir(), RoleRun, 2)
	sl, _, _ := s.TryAcquire()
	st, _ := proc.StartTime(os.Getpid())
	since := time.Now().Truncate(time.Second)
	if err := sl.Publish(Record{PID: os.Getpid(), Start: st, Host: "h", Since: since, JobsDone: 7, Job: "1-0"}); err != nil {
		t.Fatal(err)
	}
	rs, err := s.Records()
	if err != nil {
		t.Fatal(err)
	}
	me, other := rs[sl.Index()], rs[1-sl.Index()]
	if !me.Held || me.JobsDone != 7 || me.Job != "1-0" || me.Role != RoleRun || !me.Since.Equal(since) || other.Held {
		t.Fatalf("records: %+v", rs)
	}
	// A record left by a process that is gone, or whose pid was reused, is free.
	for _, r := range []Record{{PID: os.Getpid(), Start: st + 1}, {PID: 1 << 30, Start: 1}} {
		if err := sl.Publish(r); err != nil {
			t.Fatal(err)
		}
		if rs, _ := s.Records(); rs[sl.Index()].Held {
			t.Fatalf("stale record %+v reads as held", r)
		}
	}
	_ = sl.Release()
	if rs, _ := s.Records(); rs[sl.Index()].Held {
		t.Fatal("released slot reads as held")
	}
	if again, _, _ := s.TryAcquire(); again.Inherited() != nil {
		t.Fatal("a cleanly released slot reads as inherited")
	}
}

func TestSymlinkRefused(t *testing.T) {
	dir := t.TempDir()
	s := newSet(t, dir, RoleRun, 1)
	target := filepath.Join(dir, "elsewhere")
	if err := os.Symlink(target, s.Path(0)); err != nil {
		t.Fatal(err)
	}
	_, ok, err := s.TryAcquire()
	if ok || err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("ok=%v err=%v", ok, err)
	}
	if _, err := os.Stat(target); err == nil {
		t.Fatal("followed the symlink and created its target")
	}
}

func TestLostWhenFileReplaced(t *testing.T) {
	s := newSet(t, t.TempDir(), RoleRun, 1)
	s.watch = 10 * time.Millisecond
	sl, _, _ := s.TryAcquire()
	defer sl.Release()
	if err := os.Remove(s.Path(0)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sl.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("Lost not closed after the lock file was unlinked")
	}
}

func TestCheckDir(t *testing.T) {
	base := t.TempDir()
	mk := func(name string, mode os.FileMode) string {
		p := filepath.Join(base, name)
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		dir  string
		safe bool
	}{
		{filepath.Join(base, "missing"), true},
		{mk("private", 0o750), true},
		{mk("open", 0o777), false},
		{mk("sticky", 0o777|os.ModeSticky), true},
	} {
		if err := CheckDir(tc.dir); (err == nil) != tc.safe {
			t.Errorf("CheckDir(%s) = %v, want safe=%v", tc.dir, err, tc.safe)
		}
	}
}

// helperEnv makes the test binary a lock candidate: see TestMain.
const helperEnv = "BATON_LOCK_TEST_HELPER"

func TestMain(m *testing.M) {
	if spec := os.Getenv(helperEnv); spec != "" {
		os.Exit(helper(spec))
	}
	os.Exit(m.Run())
}

// helper takes a slot of the set named by spec ("dir|n"), says "held <i>" and
// waits to be killed; it says "none" and exits when all slots are held.
func helper(spec string) int {
	dir, n, _ := strings.Cut(spec, "|")
	size, _ := strconv.Atoi(n)
	s, _ := NewFileSet(dir, "q", RoleRun, size)
	sl, ok, err := s.TryAcquire()
	switch {
	case err != nil:
		fmt.Println("error", err)
		return 1
	case !ok:
		fmt.Println("none")
		return 0
	}
	fmt.Println("held", sl.Index())
	select {}
}

// TestAtMostNProcesses starts waves of 60 real processes at once against 4
// slots, kill -9s random holders between waves, and checks that the live
// holders never exceed the slots and never share one.
func TestAtMostNProcesses(t *testing.T) {
	const n, wave, rounds = 4, 60, 6
	dir := t.TempDir()
	type holder struct {
		cmd  *exec.Cmd
		slot int
	}
	var live []holder
	t.Cleanup(func() {
		for _, h := range live {
			_ = h.cmd.Process.Kill()
			_ = h.cmd.Wait()
		}
	})
	for round := 0; round < rounds; round++ {
		var mu sync.Mutex
		var wg sync.WaitGroup
		var won []holder
		for c := 0; c < wave; c++ {
			cmd := exec.Command(os.Args[0])
			cmd.Env = append(os.Environ(), helperEnv+"="+dir+"|"+strconv.Itoa(n))
			out, _ := cmd.StdoutPipe()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				line, _ := bufio.NewReader(out).ReadString('\n')
				f := strings.Fields(line)
				if len(f) == 2 && f[0] == "held" {
					i, _ := strconv.Atoi(f[1])
					mu.Lock()
					won = append(won, holder{cmd, i})
					mu.Unlock()
					return
				}
				if len(f) == 0 || f[0] != "none" {
					t.Errorf("candidate said %q", line)
				}
				_ = cmd.Wait()
			}()
		}
		wg.Wait()
		live = append(live, won...)
		seen := map[int]int{}
		for _, h := range live {
			seen[h.slot]++
		}
		for slot, k := range seen {
			if k > 1 {
				t.Fatalf("round %d: slot %d held by %d processes", round, slot, k)
			}
		}
		if len(live) != n {
			t.Fatalf("round %d: %d live holders, want %d", round, len(live), n)
		}
		// kill -9 a random subset before the next wave.
		var keepLive []holder
		for _, h := range live {
			if rand.IntN(2) == 0 {
				_ = h.cmd.Process.Signal(syscall.SIGKILL)
				_ = h.cmd.Wait()
				continue
			}
			keepLive = append(keepLive, h)
		}
		live = keepLive
	}
}

func TestWatchSeesRelease(t *testing.T) {
	s := newSet(t, t.TempDir(), RoleRun, 1)
	sl, _, _ := s.TryAcquire()
	ch, stop, err := s.Watch()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	// Drain events from our own acquisition.
	time.Sleep(20 * time.Millisecond)
	select {
	case <-ch:
	default:
	}
	_ = sl.Release()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("no event when the slot was released")
	}
}

func TestWatchIgnoresFailedProbes(t *testing.T) {
	s := newSet(t, t.TempDir(), RoleRun, 1)
	sl, _, _ := s.TryAcquire()
	defer sl.Release()
	ch, stop, err := s.Watch()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	for i := 0; i < 10; i++ {
		if _, ok, _ := s.TryAcquire(); ok {
			t.Fatal("acquired a held slot")
		}
	}
	select {
	case <-ch:
		t.Fatal("a failed probe woke the watchers")
	case <-time.After(100 * time.Millisecond):
	}
}
