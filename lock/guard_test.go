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
	take(t, s) // released at cleanup
	if procLocksReads.Load() == before {
		t.Fatal("an unguarded win did not check for holders of unlinked files")
	}
}

// TestGuardedViewWithdrawsItsWord: each change to a lock file, or to a dir
// on its path, makes the guard check the kernel again on the next win; a
// slot whose file did not exist when the guard began is never vouched for.
func TestGuardedViewWithdrawsItsWord(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "parent", "locks")
	s := newSet(t, dir, RoleRun, 4)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	for i := range 3 { // files for slots 0 to 2 only
		if err := os.WriteFile(s.Path(i), nil, 0o640); err != nil {
			t.Fatal(err)
		}
	}
	v := guardedView(t, s)
	vouched := func(i int) bool {
		var st syscall.Stat_t
		if err := syscall.Lstat(s.Path(i), &st); err != nil {
			t.Fatal(err)
		}
		return v.guard.vouch(i, st.Dev, st.Ino)
	}
	for i := range 3 {
		if !vouched(i) {
			t.Fatalf("no word for slot %d, unchanged since the guard began", i)
		}
	}
	if v.guard.vouch(0, v.guard.slots[0].dev, v.guard.slots[0].ino+1) {
		t.Fatal("vouched for another inode than the one watched")
	}
	if err := os.WriteFile(s.Path(3), nil, 0o640); err != nil {
		t.Fatal(err)
	}
	if vouched(3) {
		t.Fatal("vouched for a file that did not exist when the guard began")
	}
	// Moved away and back: the same inode at the path, but it was gone.
	if err := os.Rename(s.Path(0), s.Path(0)+".x"); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(s.Path(0)+".x", s.Path(0)); err != nil {
		t.Fatal(err)
	}
	if vouched(0) {
		t.Fatal("still vouched for a file moved away and back")
	}
	// A hard link and its unlink: the link count changed, as an unlink does.
	if err := os.Link(s.Path(1), s.Path(1)+".x"); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(s.Path(1) + ".x"); err != nil {
		t.Fatal(err)
	}
	if vouched(1) {
		t.Fatal("still vouched for a file whose link count changed")
	}
	if !vouched(2) {
		t.Fatal("changes to slots 0 and 1 withdrew the word for slot 2")
	}
	// A parent moved aside and back raises nothing on the lock files.
	parent := filepath.Dir(dir)
	if err := os.Rename(parent, parent+".x"); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(parent+".x", parent); err != nil {
		t.Fatal(err)
	}
	if vouched(2) {
		t.Fatal("still vouched after a parent of the lock dir moved")
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
