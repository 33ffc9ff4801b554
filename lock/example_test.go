package lock_test

import (
	"fmt"
	"os"

	"github.com/baton-run/baton/lock"
)

func ExampleFileSet() {
	dir, _ := os.MkdirTemp("", "locks")
	defer os.RemoveAll(dir)
	run, _ := lock.NewFileSet(dir, "thumbs", lock.RoleRun, 2)
	a, ok1, _ := run.TryAcquire() // slots are tried from a random one
	b, ok2, _ := run.TryAcquire()
	fmt.Println(ok1, ok2, a.Index() != b.Index())
	_, ok, _ := run.TryAcquire()
	fmt.Println("third:", ok)
	_ = a.Publish(lock.Record{PID: os.Getpid(), Host: "web1"})
	_ = a.Release()
	c, ok, _ := run.TryAcquire()
	fmt.Println("after release:", ok)
	_ = b.Release() // a holder restores its lock file if the dir is removed
	_ = c.Release()
	// Output:
	// true true true
	// third: false
	// after release: true
}

// A process that will wait long for a slot (a standby) takes it through a
// guarded view: the check for holders of unlinked lock files is done as the
// wait begins, so the take itself costs a few non-blocking syscalls.
func ExampleFileSet_Guarded() {
	dir, _ := os.MkdirTemp("", "locks")
	defer os.RemoveAll(dir)
	run, _ := lock.NewFileSet(dir, "thumbs", lock.RoleRun, 1)
	holder, _, _ := run.TryAcquire()
	view, stop, err := run.Guarded()
	if err != nil {
		fmt.Println(err) // no inotify: take from run itself
		return
	}
	defer stop()
	_, ok, _ := view.TryAcquire()
	fmt.Println("while held:", ok)
	_ = holder.Release()
	s, ok, _ := view.TryAcquire()
	fmt.Println("once released:", ok)
	_ = s.Release()
	// Output:
	// while held: false
	// once released: true
}
