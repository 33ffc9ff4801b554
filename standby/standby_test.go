package standby

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/baton-run/baton/lock"
)

func sets(tb testing.TB, n, ns int) (*lock.FileSet, *lock.FileSet) {
	tb.Helper()
	dir := tb.TempDir()
	run, err := lock.NewFileSet(dir, "q", lock.RoleRun, n)
	if err != nil {
		tb.Fatal(err)
	}
	sb, err := lock.NewFileSet(dir, "q", lock.RoleStandby, ns)
	if err != nil {
		tb.Fatal(err)
	}
	return run, sb
}

func TestEnterRoles(t *testing.T) {
	run, sb := sets(t, 2, 1)
	p := &Protocol{Run: run, Standby: sb}
	want := []Role{Run, Run, Standby, None, None}
	for i, w := range want {
		r, s, err := p.Enter()
		if err != nil || r != w || (r == None) != (s == nil) {
			t.Fatalf("candidate %d: role %v slot %v err %v, want %v", i, r, s, err, w)
		}
	}
	p.Standby = nil
	if r, _, _ := p.Enter(); r != None {
		t.Fatalf("without standby slots: %v", r)
	}
}

func TestPromoteTakesRunBeforeReleasingStandby(t *testing.T) {
	run, sb := sets(t, 1, 1)
	p := &Protocol{Run: run, Standby: sb, Poll: 5 * time.Millisecond, Wait: 10 * time.Second}
	_, holder, _ := p.Enter()
	_, standby, _ := p.Enter()
	done := make(chan lock.Slot)
	go func() {
		s, ok, err := p.Promote(context.Background(), standby)
		if !ok || err != nil {
			t.Errorf("promote: ok=%v err=%v", ok, err)
		}
		done <- s
	}()
	time.Sleep(30 * time.Millisecond)
	// Still standing by: a new candidate finds nothing.
	if r, _, _ := p.Enter(); r != None {
		t.Fatalf("while standing by a candidate got %v", r)
	}
	_ = holder.Release()
	s := <-done
	if s.Index() != 0 {
		t.Fatalf("promoted to %v", s.Name())
	}
	// The standby slot is free again, the run slot is not.
	if r, _, _ := p.Enter(); r != Standby {
		t.Fatalf("after promotion a candidate got %v, want standby", r)
	}
}

func TestPromoteTimesOut(t *testing.T) {
	run, sb := sets(t, 1, 1)
	p := &Protocol{Run: run, Standby: sb, Poll: 5 * time.Millisecond, Wait: 50 * time.Millisecond}
	p.Enter()
	_, s, _ := p.Enter()
	start := time.Now()
	if _, ok, err := p.Promote(context.Background(), s); ok || err != nil {
		t.Fatalf("ok=%v err=%v", ok, err)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatal("standby_wait not honoured")
	}
	if r, _, _ := p.Enter(); r != Standby {
		t.Fatalf("standby slot not released on timeout: %v", r)
	}
}

func TestPromoteCancelled(t *testing.T) {
	run, sb := sets(t, 1, 1)
	p := &Protocol{Run: run, Standby: sb, Poll: 5 * time.Millisecond, Wait: time.Hour}
	p.Enter()
	_, s, _ := p.Enter()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, ok, err := p.Promote(ctx, s); ok || !errors.Is(err, context.Canceled) {
		t.Fatalf("ok=%v err=%v", ok, err)
	}
	if r, _, _ := p.Enter(); r != Standby {
		t.Fatalf("standby slot not released on cancel: %v", r)
	}
}

func TestJitterBounds(t *testing.T) {
	for i := 0; i < 1000; i++ {
		if d := jitter(time.Second); d < 900*time.Millisecond || d > 1100*time.Millisecond {
			t.Fatalf("jitter %v outside ±10%%", d)
		}
	}
}
