package clock

import (
	"testing"
	"time"
)

func TestFakeFiresInOrder(t *testing.T) {
	f := NewFake(time.Unix(1000, 0))
	got := make(chan int, 3)
	f.AfterFunc(2*time.Second, func() { got <- 2 })
	t1 := f.AfterFunc(time.Second, func() { got <- 1 })
	stopped := f.AfterFunc(time.Second, func() { got <- 9 })
	if !stopped.Stop() {
		t.Fatal("Stop of an armed timer: false")
	}
	tk := f.NewTicker(500 * time.Millisecond)
	f.Advance(999 * time.Millisecond)
	select {
	case <-tk.C():
	default:
		t.Fatal("no tick after 999ms of a 500ms ticker")
	}
	f.Advance(time.Millisecond)
	if v := <-got; v != 1 {
		t.Fatalf("first timer fired: %d", v)
	}
	if t1.Stop() {
		t.Fatal("Stop of a fired timer: true")
	}
	f.Advance(time.Second)
	if v := <-got; v != 2 {
		t.Fatalf("second timer fired: %d", v)
	}
	tk.Stop()
	if n := f.Waiters(); n != 0 {
		t.Fatalf("waiters left: %d", n)
	}
	if want := time.Unix(1002, 0); !f.Now().Equal(want) {
		t.Fatalf("now %v, want %v", f.Now(), want)
	}
}

func TestFakeNewTimer(t *testing.T) {
	f := NewFake(time.Unix(1000, 0))
	now := func(tm Timer) (time.Time, bool) {
		select {
		case v := <-tm.C():
			return v, true
		default:
			return time.Time{}, false
		}
	}
	// Due now: it fires without the time moving, as time.NewTimer(0).
	if v, ok := now(f.NewTimer(0)); !ok || !v.Equal(time.Unix(1000, 0)) {
		t.Fatalf("NewTimer(0): fired %v at %v", ok, v)
	}
	tm := f.NewTimer(time.Minute)
	f.Advance(time.Minute - time.Millisecond)
	if _, ok := now(tm); ok {
		t.Fatal("fired before its time")
	}
	f.Advance(time.Millisecond)
	if v, ok := now(tm); !ok || !v.Equal(time.Unix(1060, 0)) {
		t.Fatalf("at its time: fired %v at %v", ok, v)
	}
	if tm.Stop() {
		t.Fatal("Stop of a fired timer: true")
	}
	// Reset re-arms from the fake now; a value not received is dropped.
	if tm.Reset(time.Second) {
		t.Fatal("Reset of a fired timer: true")
	}
	f.Advance(time.Second)
	if tm.Reset(time.Hour) { // fired and unread
		t.Fatal("Reset of a fired timer: true")
	}
	if _, ok := now(tm); ok {
		t.Fatal("Reset kept an unread value")
	}
	if !tm.Stop() {
		t.Fatal("Stop of an armed timer: false")
	}
	f.Advance(2 * time.Hour)
	if _, ok := now(tm); ok {
		t.Fatal("a stopped timer fired")
	}
	tm.Reset(time.Second) // re-armed after Advance unlisted it
	if n := f.Waiters(); n != 1 {
		t.Fatalf("waiters after Reset: %d", n)
	}
	f.Advance(time.Second)
	if _, ok := now(tm); !ok {
		t.Fatal("a re-armed timer did not fire")
	}
}
