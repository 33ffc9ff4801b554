package lock

import (
	"os"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/proc"
)

// TestTenureRoundTrip: a tenure reads back as written; a torn read (half
// of one tenure, half of another) or garbage reads as none.
func TestTenureRoundTrip(t *testing.T) {
	now := time.Now()
	a := Record{PID: 123, Start: 456, Since: now, Deadline: now.Add(time.Minute), BootDeadline: time.Hour}
	b := Record{PID: 124, Start: 999, Since: now.Add(time.Second), Deadline: now.Add(2 * time.Minute), BootDeadline: 2 * time.Hour}
	ea, eb := encodeTenure(a), encodeTenure(b)
	if len(ea) != tenureSize || len(eb) != tenureSize {
		t.Fatalf("sizes %d, %d, want %d", len(ea), len(eb), tenureSize)
	}
	got, ok := decodeTenure(ea)
	if !ok || !sameTenure(got, a) || !got.Since.Equal(a.Since) || got.BootDeadline != a.BootDeadline || !got.Held {
		t.Fatalf("decoded %+v %v, want %+v", got, ok, a)
	}
	torn := append(append([]byte{}, eb[:40]...), ea[40:]...)
	for name, bad := range map[string][]byte{"torn": torn, "zeros": make([]byte, tenureSize), "json": []byte(`{"pid":1}`)} {
		if r, ok := decodeTenure(bad); ok {
			t.Errorf("%s read as %+v", name, r)
		}
	}
}

// TestTenureHealsHolderWithoutRecord: a holder whose record cannot be
// written (a directory in its place, as deterministic as a full disk)
// still has its deadline in the lock file: Records and Overdue show it.
func TestTenureHealsHolderWithoutRecord(t *testing.T) {
	dir := t.TempDir()
	s := newSet(t, dir, RoleRun, 1)
	if err := os.Mkdir(s.recordPath(0), 0o750); err != nil {
		t.Fatal(err)
	}
	sl := take(t, s)
	start, _ := proc.StartTime(os.Getpid())
	deadline := time.Now().Add(-time.Minute) // overdue already
	err := sl.Publish(Record{PID: os.Getpid(), Start: start, Deadline: deadline})
	if err == nil {
		t.Fatal("publish wrote a record over a directory")
	}
	rs, _ := s.Records()
	if !rs[0].Held || !rs[0].NoRecord || !rs[0].Deadline.Equal(deadline) {
		t.Fatalf("records %+v, want held without a record, with the deadline", rs[0])
	}
	if od := s.Overdue(time.Now(), time.Second); len(od) != 1 || od[0].PID != os.Getpid() {
		t.Fatalf("overdue %+v, want this holder", od)
	}
	if _, ok := s.live(rs[0]); !ok {
		t.Fatal("the tenure of a live holder is not found live")
	}
}

// TestForeign: a live holder naming another Redis target is foreign; a
// dead one, one naming none (an older version), or one of the same target
// is not.
func TestForeign(t *testing.T) {
	dir := t.TempDir()
	prod := newSet(t, dir, RoleRun, 2).WithTarget("127.0.0.1:6379/0")
	staging := newSet(t, dir, RoleRun, 2).WithTarget("127.0.0.1:6379/1")
	if _, ok := prod.Foreign(); ok {
		t.Fatal("foreign with no holder")
	}
	sl := take(t, staging)
	start, _ := proc.StartTime(os.Getpid())
	if err := sl.Publish(Record{PID: os.Getpid(), Start: start}); err != nil {
		t.Fatal(err)
	}
	if r, ok := prod.Foreign(); !ok || r.Target != "127.0.0.1:6379/1" || r.Queue != "q" {
		t.Fatalf("Foreign = %+v, %v: want staging's holder", r, ok)
	}
	if _, ok := staging.Foreign(); ok {
		t.Fatal("a holder is foreign to its own deployment")
	}
	if _, ok := newSet(t, dir, RoleRun, 2).Foreign(); ok {
		t.Fatal("a set without a target found a foreign holder")
	}
	if err := sl.Publish(Record{PID: os.Getpid(), Start: start + 1}); err != nil { // as if its holder died
		t.Fatal(err)
	}
	if r, ok := prod.Foreign(); ok {
		t.Fatalf("a dead holder's record is foreign: %+v", r)
	}
}
