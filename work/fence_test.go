package work

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/lock"
)

// A holder whose lease is taken over mid-job (its lease expired and another
// holder was granted it, with a larger token): its ack, its retry, or the
// give-back of entries it read ahead when it drains, is fenced by Redis and
// does nothing; the entries stay pending for the slot's new holder, which
// shares the slot's consumer. With the lease intact the same writes go
// through, and every job carries the token.
func TestFencedWrites(t *testing.T) {
	for _, tc := range []struct {
		name     string
		takeOver bool
		fail     bool
		drain    bool // drain mid-job: entries read ahead are given back
	}{
		{"ack, lease intact", false, false, false},
		{"ack after takeover", true, false, false},
		{"retry after takeover", true, true, false},
		{"give-back after takeover", true, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			rdb := srv.Client()
			opt := lock.LeaseOptions{Host: "a", TTL: 10 * time.Second, Renew: time.Second}
			set, err := lock.NewLeaseSet(rdb, "q", lock.RoleRun, 1, opt)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := lock.MarkFresh(context.Background(), rdb, "q"); err != nil { // a new server: no pause
				t.Fatal(err)
			}
			sl, ok, err := set.TryAcquire()
			if err != nil || !ok {
				t.Fatal(ok, err)
			}
			defer sl.Release()
			key, token := sl.(lock.Fencer).Fence()
			jobs := 1
			if tc.drain {
				jobs = 5
			}
			ids := enqueue(t, rdb, "q", jobs)
			var ran atomic.Int64
			var seen atomic.Int64
			var once sync.Once
			h := HandlerFunc(func(ctx context.Context, j *Job) error {
				seen.Store(j.Fence)
				once.Do(func() {
					if !tc.takeOver {
						return
					}
					rdb.HSet(ctx, key, "expires", 1)          // expired on Redis' clock,
					rdb.HSet(ctx, lock.EpochKey("q"), key, 1) // and its copy (lock: mirrorLua)
					other, _ := lock.NewLeaseSet(rdb, "q", lock.RoleRun, 1, lock.LeaseOptions{Host: "b"})
					if s, ok, err := other.TryAcquire(); err != nil || !ok {
						t.Errorf("takeover: %v %v", ok, err)
					} else {
						t.Cleanup(func() { _ = s.Release() })
					}
				})
				ran.Add(1)
				if tc.drain {
					time.Sleep(300 * time.Millisecond) // the drain begins meanwhile
				}
				if tc.fail {
					return errors.New("boom")
				}
				return nil
			})
			c := testConfig(rdb, h)
			c.Consumer = "fleet/run-0"
			c.Fence = &Fence{Key: key, Token: token}
			c.Retention = time.Hour
			st := new(Stats)
			var after time.Time
			_ = runUntil(t, c, st, func() bool {
				if ran.Load() == 0 {
					return false
				}
				if tc.drain {
					// drain once the reader has read ahead of the running job
					return pending(t, rdb, "q") >= 2
				}
				if after.IsZero() {
					after = time.Now()
				}
				return st.Done.Load() == 1 || time.Since(after) > 500*time.Millisecond
			})
			if seen.Load() != token {
				t.Errorf("Job.Fence %d, want the lease's token %d", seen.Load(), token)
			}
			if !tc.takeOver {
				if st.Done.Load() != 1 {
					t.Fatalf("done %d with the lease intact, want 1", st.Done.Load())
				}
				settled(t, rdb, "q")
				if l, err := Locate(context.Background(), rdb, "q", ids[0]); err != nil || l.State != StateDone {
					t.Errorf("acked with the lease intact: %+v, %v; want done", l, err)
				}
				return
			}
			if st.Done.Load() != 0 {
				t.Errorf("a fenced ack counted %d done", st.Done.Load())
			}
			if n := rdb.Exists(context.Background(), KeysFor("q").Done).Val(); n != 0 {
				t.Errorf("a fenced ack recorded done jobs")
			}
			if n := rdb.ZCard(context.Background(), KeysFor("q").Retry).Val(); n != 0 {
				t.Errorf("a fenced retry scheduled %d jobs", n)
			}
			if tc.drain {
				// Nothing was given back: every entry is the one enqueued,
				// and the running one and those read ahead stay pending.
				var left []string
				for _, m := range rdb.XRange(context.Background(), KeysFor("q").Stream, "-", "+").Val() {
					left = append(left, m.ID)
				}
				if !slices.Equal(left, ids) {
					t.Errorf("stream holds %v after a fenced give-back, want the enqueued %v", left, ids)
				}
				if n := pending(t, rdb, "q"); n < 2 {
					t.Errorf("%d entries pending after a fenced give-back, want the running one and those read ahead", n)
				}
				return
			}
			if n := pending(t, rdb, "q"); n != 1 {
				t.Errorf("%d entries pending after a fenced write, want 1 (left for the new holder)", n)
			}
			if n := rdb.XLen(context.Background(), KeysFor("q").Stream).Val(); n != 1 {
				t.Errorf("stream holds %d entries, want the 1 pending", n)
			}
		})
	}
}

func TestIsFenced(t *testing.T) {
	rdb := redistest.Start(t).Client()
	k := KeysFor("q")
	err := fenced[ackScript].Run(context.Background(), rdb, []string{k.Stream, k.Stats, k.Done, k.Waiters, k.Results, "baton:{q}:lease:run:0"},
		Group, 0, 0, 0, 1, "7").Err()
	if !IsFenced(err) {
		t.Fatalf("ack against a missing lease: %v, want fenced", err)
	}
}
