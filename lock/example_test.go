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
