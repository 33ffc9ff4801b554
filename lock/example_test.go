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
	a, ok, _ := run.TryAcquire()
	fmt.Println(a.Name(), ok)
	b, ok, _ := run.TryAcquire()
	fmt.Println(b.Name(), ok)
	_, ok, _ = run.TryAcquire()
	fmt.Println("third:", ok)
	_ = a.Publish(lock.Record{PID: os.Getpid(), Host: "web1"})
	_ = a.Release()
	_, ok, _ = run.TryAcquire()
	fmt.Println("after release:", ok)
	// Output:
	// run-0 true
	// run-1 true
	// third: false
	// after release: true
}
