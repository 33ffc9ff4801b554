package lock

import (
	"bufio"
	"encoding/json"
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

// take acquires a slot of s and releases it when the test ends, before its
// TempDir is removed (a holder restores a removed lock file).
func take(tb testing.TB, s *FileSet) Slot {
	tb.Helper()
	sl, ok, err := s.TryAcquire()
	if !ok || err != nil {
		tb.Fatalf("acquire: ok=%v err=%v", ok, err)
	}
	tb.Cleanup(func() { _ = sl.Release() })
	return sl
}

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
		sl := take(t, s)
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
	if sl := take(t, s); sl.Index() != 1 {
		t.Fatalf("reacquired %s, want the freed run-1", sl.Name())
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
	take(t, run)
	take(t, sb) // must not share the run slot's lock
	if _, err := NewFileSet(dir, "q", "other", 1); err == nil {
		t.Fatal("unknown role accepted")
	}
	if _, err := NewFileSet(dir, "q", RoleRun, 0); err == nil {
		t.Fatal("zero slots accepted")
	}
}

func TestRecords(t *testing.T) {
	s := newSet(t, t.TempDir(), RoleRun, 2)
	sl := take(t, s)
	st, _ := proc.StartTime(os.Getpid())
	since := time.Now().Truncate(time.Second)
	if err := sl.Publish(Record{PID: os.Getpid(), Start: st, Host: "h", Since: since, Activity: json.RawMessage(`{"jobs_done":7,"job":"1-0"}`)}); err != nil {
		t.Fatal(err)
	}
	rs, err := s.Records()
	if err != nil {
		t.Fatal(err)
	}
	me, other := rs[sl.Index()], rs[1-sl.Index()]
	if !me.Held || string(me.Activity) != `{"job":"1-0","jobs_done":7}` || me.Role != RoleRun || !me.Since.Equal(since) || other.Held {
		t.Fatalf("records: %+v", rs)
	}
	// A record left by a process that is gone, or whose pid was reused,
	// does not count; the lock does: held by us, no record.
	for _, r := range []Record{{PID: os.Getpid(), Start: st + 1}, {PID: 1 << 30, Start: 1}} {
		if err := sl.Publish(r); err != nil {
			t.Fatal(err)
		}
		if got := mustRecords(t, s)[sl.Index()]; !got.Held || !got.NoRecord || got.PID != os.Getpid() {
			t.Fatalf("stale record %+v on a held lock reads as %+v, want held by us without a record", r, got)
		}
	}
	_ = sl.Release()
	if rs, _ := s.Records(); rs[sl.Index()].Held {
		t.Fatal("released slot reads as held")
	}
	if again := take(t, s); again.Inherited() != nil {
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

// TestPublishNeverFollowsPlantedLink: someone who can write the lock dir
// plants a link, at the temporary name a record used to be written to,
// pointing at a file of the holder's user. Publishing writes neither through
// the link nor leaves the record a link: the victim is untouched.
func TestPublishNeverFollowsPlantedLink(t *testing.T) {
	dir := t.TempDir()
	s := newSet(t, dir, RoleRun, 1)
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	sl := take(t, s)
	rec := filepath.Base(s.recordPath(0))
	for _, name := range []string{"." + rec + "." + strconv.Itoa(os.Getpid()) + ".tmp", rec} {
		if err := os.Symlink(victim, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := sl.Publish(Record{PID: os.Getpid(), Host: "h"}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "precious" {
		t.Fatalf("victim overwritten: %q", b)
	}
	if fi, err := os.Lstat(s.recordPath(0)); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("record %v, %v: want a regular file", fi, err)
	}
	if r, ok := s.parseRecord(0); !ok || r.Host != "h" {
		t.Fatalf("record %+v %v", r, ok)
	}
	leftovers, _ := filepath.Glob(filepath.Join(dir, "."+rec+".*.tmp"))
	if len(leftovers) != 1 { // the planted link, nothing of ours
		t.Fatalf("temporary files left: %v", leftovers)
	}
}

// TestLostWhenFileReplaced: a lock file replaced by one that another open
// file description already holds cannot be restored: Lost closes.
func TestLostWhenFileReplaced(t *testing.T) {
	s := newSet(t, t.TempDir(), RoleRun, 1)
	sl := take(t, s)
	other := filepath.Join(s.Dir(), "other")
	f, err := os.Create(other)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(other, s.Path(0)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sl.Lost():
	case <-time.After(restoreFor + 5*time.Second):
		t.Fatal("Lost not closed after the lock file was replaced by a held one")
	}
}

func mustRecords(tb testing.TB, s *FileSet) []Record {
	tb.Helper()
	rs, err := s.Records()
	if err != nil {
		tb.Fatal(err)
	}
	return rs
}

// TestHolderRestoresRemovedLockFile: a lock file unlinked, or the whole lock
// dir removed, under its holder: the holder notices at once (inotify: the
// poll is set to an hour here), locks a new file before it lets the old one
// go, republishes its record, and keeps the slot; nobody else gets it.
func TestHolderRestoresRemovedLockFile(t *testing.T) {
	for _, tc := range []struct {
		name   string
		remove func(s *FileSet) error
	}{
		{"lock file", func(s *FileSet) error { return os.Remove(s.Path(0)) }},
		// RemoveAll may fail (directory not empty) when the holder
		// restores its file while it runs: it removed it all the same.
		{"lock dir", func(s *FileSet) error { _ = os.RemoveAll(s.Dir()); return nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSet(t, filepath.Join(t.TempDir(), "locks"), RoleRun, 1)
			s.watch = time.Hour
			sl := take(t, s)
			st, _ := proc.StartTime(os.Getpid())
			if err := sl.Publish(Record{PID: os.Getpid(), Start: st, Host: "h"}); err != nil {
				t.Fatal(err)
			}
			old, _ := inode(s.Path(0))
			if err := tc.remove(s); err != nil {
				t.Fatal(err)
			}
			// The new file exists a moment before it is locked: wait
			// for the lock, not only for the new inode.
			deadline := time.Now().Add(5 * time.Second)
			for {
				now, err := inode(s.Path(0))
				r := mustRecords(t, s)[0]
				pid, locked := flockOwner(s.Path(0), mustFlocks(t))
				if err == nil && now != old && locked && r.Held && !r.NoRecord && r.Host == "h" {
					if pid != os.Getpid() {
						t.Fatalf("new lock file flocked by %d, want us", pid)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("not restored: inode %d→%d (%v), flocked %v by %d, record %+v", old, now, err, locked, pid, r)
				}
				time.Sleep(5 * time.Millisecond)
			}
			if _, ok, _ := s.TryAcquire(); ok {
				t.Fatal("a newcomer took the restored slot")
			}
			select {
			case <-sl.Lost():
				t.Fatal("Lost closed although the slot was restored")
			default:
			}
		})
	}
}

func mustFlocks(tb testing.TB) []flockEntry {
	tb.Helper()
	fl, err := flocks()
	if err != nil {
		tb.Fatal(err)
	}
	return fl
}

// TestRecordsShowLockWithoutRecord: a held slot whose record cannot be
// written (a directory where the record goes) reads as held, by its flock
// owner, record missing; never as free.
func TestRecordsShowLockWithoutRecord(t *testing.T) {
	s := newSet(t, t.TempDir(), RoleRun, 2)
	sl := take(t, s)
	if err := os.Mkdir(s.recordPath(sl.Index()), 0o755); err != nil {
		t.Fatal(err)
	}
	st, _ := proc.StartTime(os.Getpid())
	if err := sl.Publish(Record{PID: os.Getpid(), Start: st}); err == nil {
		t.Fatal("publish over a directory succeeded")
	}
	rs := mustRecords(t, s)
	if got := rs[sl.Index()]; !got.Held || !got.NoRecord || got.PID != os.Getpid() {
		t.Fatalf("held slot without a record reads as %+v", got)
	}
	if rs[1-sl.Index()].Held {
		t.Fatalf("free slot reads as held: %+v", rs[1-sl.Index()])
	}
	if ents, _ := filepath.Glob(filepath.Join(s.Dir(), ".*.tmp")); len(ents) != 0 {
		t.Fatalf("a failed publish left %v", ents)
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
		{mk("group", 0o770), false},
		{mk("group-read", 0o775), false},
		{mk("group-sticky", 0o770|os.ModeSticky), true},
		{mk("group-readonly", 0o750), true},
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

// helper takes a slot of the set named by spec ("dir|n", or "dir|n|d" to
// publish a record with a hard deadline d from now), says "held <i>" and
// waits to be killed; it says "none" and exits when all slots are held.
func helper(spec string) int {
	f := strings.Split(spec, "|")
	size, _ := strconv.Atoi(f[1])
	s, _ := NewFileSet(f[0], "q", RoleRun, size)
	sl, ok, err := s.TryAcquire()
	switch {
	case err != nil:
		fmt.Println("error", err)
		return 1
	case !ok:
		fmt.Println("none")
		return 0
	}
	if len(f) > 2 {
		d, _ := time.ParseDuration(f[2])
		st, _ := proc.StartTime(os.Getpid())
		now := time.Now()
		_ = sl.Publish(Record{PID: os.Getpid(), Start: st, Since: now, Deadline: now.Add(d), BootDeadline: BootClock() + d})
	}
	fmt.Println("held", sl.Index())
	select {}
}

// startHelper starts a helper process on spec and waits until it holds a
// slot; it is killed when the test ends.
func startHelper(tb testing.TB, spec string) *exec.Cmd {
	tb.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), helperEnv+"="+spec)
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if line, _ := bufio.NewReader(out).ReadString('\n'); !strings.HasPrefix(line, "held") {
		tb.Fatalf("helper said %q", line)
	}
	return cmd
}

// stoppedHolder starts a helper holding the one slot of a new set and
// stops it (SIGSTOP): it cannot restore an unlinked lock file.
func stoppedHolder(t *testing.T) (*FileSet, int) {
	t.Helper()
	dir := t.TempDir()
	s := newSet(t, dir, RoleRun, 1)
	pid := startHelper(t, dir+"|1").Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	return s, pid
}

// TestNewcomerDefersToHolderOfUnlinkedFile: the lock file is unlinked under
// a holder that cannot restore it yet (stopped). A newcomer creates a new
// file and could lock it, but the kernel still holds the old lock for the
// holder: the newcomer must count the slot as held. Resumed, the holder
// restores its slot on the new file.
func TestNewcomerDefersToHolderOfUnlinkedFile(t *testing.T) {
	s, pid := stoppedHolder(t)
	if err := os.Remove(s.Path(0)); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ { // the first creates the file, the others find it fresh
		if sl, ok, err := s.TryAcquire(); ok || err != nil {
			_ = sl.Release()
			t.Fatalf("newcomer %d took a slot whose holder still holds the unlinked file (err %v)", i, err)
		}
	}
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if owner, ok := flockOwner(s.Path(0), mustFlocks(t)); ok && owner == pid {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the resumed holder did not restore its slot on the new file")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, ok, _ := s.TryAcquire(); ok {
		t.Fatal("a newcomer took the restored slot")
	}
}

// TestEvictOnlyProvable: an overdue, stopped holder is killed only with
// proof: its record in this set and slot, its start time, its lock, the
// deadline plus margin passed, and the process old enough by the boot clock
// to be overdue. Then the slot is free.
func TestEvictOnlyProvable(t *testing.T) {
	dir := t.TempDir()
	s := newSet(t, dir, RoleRun, 1)
	h := startHelper(t, dir+"|1|100ms")
	pid := h.Process.Pid
	_ = syscall.Kill(pid, syscall.SIGSTOP)
	r := mustRecords(t, s)[0]
	if r.PID != pid || r.Deadline.IsZero() {
		t.Fatalf("helper record %+v", r)
	}
	late := r.Deadline.Add(2 * time.Second)
	other, _ := NewFileSet(dir, "other", RoleRun, 1) // another queue, same dir
	forged := r
	forged.Start++
	for _, tc := range []struct {
		name   string
		set    *FileSet
		r      Record
		now    time.Time
		margin time.Duration
	}{
		{"before deadline + margin", s, r, r.Deadline.Add(500 * time.Millisecond), time.Second},
		{"start time differs", s, forged, late, time.Second},
		{"another set's slot", other, r, late, time.Second},
		// The wall clock says overdue, the boot clock says the process
		// has not lived its tenure plus margin yet: a clock step.
		{"younger than its tenure", s, r, r.Deadline.Add(2 * time.Hour), time.Hour},
	} {
		if n, err := tc.set.Evict(tc.r, tc.now, tc.margin); n != 0 || err != nil || !proc.Alive(pid, r.Start) {
			t.Fatalf("%s: killed %d (err %v)", tc.name, n, err)
		}
	}
	time.Sleep(time.Until(r.Since.Add(r.Deadline.Sub(r.Since) + 1200*time.Millisecond)))
	// Old enough now, and past its deadline by the wall clock; but had the
	// wall clock stepped forward, its boot deadline would still be ahead.
	stepped := r
	stepped.BootDeadline = BootClock() + time.Hour
	rewriteRecord(t, s, stepped)
	if n, err := s.Evict(stepped, late, time.Second); n != 0 || err != nil || !proc.Alive(pid, r.Start) {
		t.Fatalf("boot clock not past the deadline: killed %d (err %v)", n, err)
	}
	rewriteRecord(t, s, r)
	if n, err := s.Evict(r, late, time.Second); n != 1 || err != nil {
		t.Fatalf("overdue holder: killed %d (err %v)", n, err)
	}
	if proc.Alive(pid, r.Start) {
		t.Fatal("evicted holder still alive")
	}
	take(t, s)
}

// rewriteRecord replaces slot r.Slot's record file, as its holder would.
func rewriteRecord(tb testing.TB, s *FileSet, r Record) {
	tb.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(s.recordPath(r.Slot), b, 0o644); err != nil {
		tb.Fatal(err)
	}
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

// TestWatchSurvivesDirRemoval: the lock dir removed and recreated (by its
// holders) under a watcher: the watcher follows the new dir, so a release
// there still wakes it.
func TestWatchSurvivesDirRemoval(t *testing.T) {
	s := newSet(t, filepath.Join(t.TempDir(), "locks"), RoleRun, 1)
	sl := take(t, s)
	ch, stop, err := s.Watch()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	_ = os.RemoveAll(s.Dir()) // the holder recreates it
	eventually := func(what string, cond func() bool) {
		t.Helper()
		for end := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatal(what)
			}
		}
	}
	eventually("lock file not restored", func() bool { _, err := os.Stat(s.Path(0)); return err == nil })
	// Wait until the watcher sees the new dir: a file of the set's name
	// closed after writing there wakes it.
	probe := filepath.Join(s.Dir(), "q.run.probe")
	eventually("the watcher never saw the recreated dir", func() bool {
		if err := os.WriteFile(probe, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ch:
			return true
		case <-time.After(20 * time.Millisecond):
			return false
		}
	})
	if err := os.Remove(probe); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	for drained := false; !drained; {
		select {
		case <-ch:
		default:
			drained = true
		}
	}
	_ = sl.Release()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("no event for a release in the recreated dir")
	}
}
