package lock

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// guardedView returns s's guarded view, stopped when the test ends.
func guardedView(t *testing.T, s *FileSet) *FileSet {
	t.Helper()
	v, stop, err := s.Guarded()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return v.(*FileSet)
}

// TestGuardedTakeReadsNoKernelLocks: a waiter's take through its guarded
// view, with nothing changed since the view began, makes no read of
// /proc/locks (the read that costs a grace period), and neither do its
// looks at the records of a slot just released.
func TestGuardedTakeReadsNoKernelLocks(t *testing.T) {
	s := newSet(t, t.TempDir(), RoleRun, 2)
	a, b := take(t, s), take(t, s)
	if err := a.Publish(Record{PID: os.Getpid()}); err != nil {
		t.Fatal(err)
	}
	v := guardedView(t, s)
	_ = a.Release()
	before := procLocksReads.Load()
	rs, err := v.Records()
	if err != nil || rs[a.Index()].Held {
		t.Fatalf("records %+v, %v: want slot %d free", rs, err, a.Index())
	}
	sl, ok, err := v.TryAcquire()
	if !ok || err != nil {
		t.Fatalf("guarded take: ok=%v err=%v", ok, err)
	}
	defer sl.Release()
	if sl.Index() != a.Index() {
		t.Fatalf("took slot %d, want %d (slot %d is held)", sl.Index(), a.Index(), b.Index())
	}
	if n := procLocksReads.Load() - before; n != 0 {
		t.Fatalf("the guarded take read /proc/locks %d times, want none", n)
	}
	// The plain set still asks the kernel on every win.
	_ = sl.Release()
	before = procLocksReads.Load()
	sl = take(t, s)
	if procLocksReads.Load() == before {
		t.Fatal("an unguarded win did not check for holders of unlinked files")
	}
}

// TestGuardedViewWithdrawsItsWord: each change to a lock file, or to the
// dir, makes the guard check the kernel again on the next win; a slot whose
// file did not exist when the guard began is never vouched for.
func TestGuardedViewWithdrawsItsWord(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "locks")
	s := newSet(t, dir, RoleRun, 3)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	for i := range 2 { // files for slots 0 and 1 only
		if err := os.WriteFile(s.Path(i), nil, 0o640); err != nil {
			t.Fatal(err)
		}
	}
	v := guardedView(t, s)
	ino := func(i int) uint64 {
		n, err := inode(s.Path(i))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if !v.guard.vouch(0, ino(0)) || !v.guard.vouch(1, ino(1)) {
		t.Fatal("no word for files unchanged since the guard began")
	}
	if v.guard.vouch(0, ino(0)+1) {
		t.Fatal("vouched for another inode than the one watched")
	}
	if err := os.WriteFile(s.Path(2), nil, 0o640); err != nil {
		t.Fatal(err)
	}
	if v.guard.vouch(2, ino(2)) {
		t.Fatal("vouched for a file that did not exist when the guard began")
	}
	if err := os.Chmod(s.Path(0), 0o600); err != nil { // IN_ATTRIB, like an unlink's link count
		t.Fatal(err)
	}
	if v.guard.vouch(0, ino(0)) {
		t.Fatal("still vouched for a file whose attributes changed")
	}
	if !v.guard.vouch(1, ino(1)) {
		t.Fatal("a change to slot 0's file withdrew the word for slot 1")
	}
	if err := os.Rename(dir, dir+".old"); err != nil {
		t.Fatal(err)
	}
	if v.guard.vouch(1, v.guard.slots[1].ino) { // the path names nothing now
		t.Fatal("still vouched after the lock dir moved")
	}
}

// TestGuardedDefersToHolderOfUnlinkedFile: the lock file is unlinked under
// a holder that cannot restore it (stopped), before and after a waiter's
// guard began: either way the waiter's take counts the slot as held.
func TestGuardedDefersToHolderOfUnlinkedFile(t *testing.T) {
	for _, when := range []string{"before", "after"} {
		t.Run("unlinked "+when+" the guard began", func(t *testing.T) {
			s, pid := stoppedHolder(t)
			defer syscall.Kill(pid, syscall.SIGCONT)
			var v *FileSet
			if when == "after" {
				v = guardedView(t, s)
			}
			if err := os.Remove(s.Path(0)); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(s.Path(0), nil, 0o640); err != nil { // a newcomer made a new one
				t.Fatal(err)
			}
			if when == "before" {
				v = guardedView(t, s)
			}
			for i := 0; i < 3; i++ {
				if sl, ok, err := v.TryAcquire(); ok || err != nil {
					_ = sl.Release()
					t.Fatalf("take %d got a slot whose holder still holds the unlinked file (err %v)", i, err)
				}
			}
		})
	}
}

// TestReleaseLeavesNoFiles: a release takes the record away (renamed
// aside, then unlinked once the lock is dropped) and leaves only the lock
// file, which is never unlinked.
func TestReleaseLeavesNoFiles(t *testing.T) {
	dir := t.TempDir()
	s := newSet(t, dir, RoleRun, 1)
	sl := take(t, s)
	for range 3 { // replaced by rename, as a holder does every half second
		if err := sl.Publish(Record{PID: os.Getpid(), Since: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	if err := sl.Release(); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || ents[0].Name() != filepath.Base(s.Path(0)) {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("after release the dir holds %v, want only the lock file", names)
	}
}
