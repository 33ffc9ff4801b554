package lock_test

import (
	"testing"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/lock"
)

// Lowest(s, 2) of 4 slots hands out slots 0 and 1 only, and they are the
// same slots as s's: s sees them held, and takes 2 and 3 after them.
func TestLowest(t *testing.T) {
	files, err := lock.NewFileSet(t.TempDir(), "q", lock.RoleRun, 4)
	if err != nil {
		t.Fatal(err)
	}
	srv := redistest.Start(t)
	for _, tc := range []struct {
		name string
		set  lock.Set
	}{
		{"file", files},
		{"lease", leaseSet(t, srv.Client(), "h", lock.RoleRun, 4, lock.LeaseOptions{})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			low, err := lock.Lowest(tc.set, 2)
			if err != nil {
				t.Fatal(err)
			}
			if low.Size() != 2 {
				t.Fatalf("size %d, want 2", low.Size())
			}
			var held []lock.Slot
			defer func() {
				for _, s := range held {
					_ = s.Release()
				}
			}()
			for i := 0; i < 3; i++ {
				s, ok, err := low.TryAcquire()
				if err != nil {
					t.Fatal(err)
				}
				if i == 2 {
					if ok {
						t.Fatalf("a third slot %d from the 2 lowest", s.Index())
					}
					break
				}
				if !ok || s.Index() > 1 {
					t.Fatalf("take %d: %v %v, want slot 0 or 1", i, s, ok)
				}
				if err := s.Publish(lock.Record{PID: 1}); err != nil {
					t.Fatal(err)
				}
				held = append(held, s)
			}
			rs, err := tc.set.Records()
			if err != nil {
				t.Fatal(err)
			}
			if !rs[0].Held || !rs[1].Held || rs[2].Held || rs[3].Held {
				t.Fatalf("the whole set reads %+v: want slots 0 and 1 held", rs)
			}
			for _, want := range []int{2, 3} {
				s, ok, err := tc.set.TryAcquire()
				if err != nil || !ok || s.Index() < 2 {
					t.Fatalf("the whole set gave %v %v %v, want slot %d or above", s, ok, err, want)
				}
				held = append(held, s)
			}
			if _, err := lock.Lowest(tc.set, 5); err == nil {
				t.Fatal("Lowest(5) of 4 slots: no error")
			}
		})
	}
}
