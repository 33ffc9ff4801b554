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
