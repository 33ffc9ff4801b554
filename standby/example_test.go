package standby_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/baton-run/baton/lock"
	"github.com/baton-run/baton/standby"
)

func ExampleProtocol() {
	dir, _ := os.MkdirTemp("", "locks")
	defer os.RemoveAll(dir)
	run, _ := lock.NewFileSet(dir, "thumbs", lock.RoleRun, 1)
	sb, _ := lock.NewFileSet(dir, "thumbs", lock.RoleStandby, 1)
	p := &standby.Protocol{Run: run, Standby: sb, Poll: 10 * time.Millisecond, Wait: time.Minute}

	_, holder, _ := p.Enter() // the first candidate holds the run slot
	role, waiting, _ := p.Enter()
	fmt.Println("second candidate:", role)
	role, _, _ = p.Enter()
	fmt.Println("third candidate:", role)

	go func() { time.Sleep(50 * time.Millisecond); _ = holder.Release() }() // the holder retires
	slot, ok, _ := p.Promote(context.Background(), waiting)
	fmt.Println("promoted to", slot.Name(), ok)
	_ = slot.Release() // a holder restores its lock file if the dir is removed
	// Output:
	// second candidate: standby
	// third candidate: none
	// promoted to run-0 true
}
