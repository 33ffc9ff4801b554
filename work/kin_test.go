package work

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A job whose child is forked as KillAll runs (before the handler tracks
// its group) dies too: KillAll holds for every child started after it.
func TestKillAllKillsLaterChildren(t *testing.T) {
	t.Parallel()
	x := &Exec{Argv: []string{"/bin/sh", "-c", "sleep 60"}, Logger: testLogger()}
	x.KillAll()
	done := make(chan error, 1)
	go func() {
		done <- x.Handle(context.Background(), &Job{ID: "1-0", Attempt: 1, Queue: "q", Slot: "h/run-0"})
	}()
	select {
	case err := <-done:
		var ee *ExecError
		if !errors.As(err, &ee) || ee.Signal != "SIGKILL" {
			t.Fatalf("job after KillAll: %v, want killed by SIGKILL", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a job started after KillAll still runs after 10s")
	}
}
