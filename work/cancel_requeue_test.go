package work

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/redistest"
)

// A dead job requeued runs, with a holder running all along, though a
// cancel request named it: cancelled while running and requeued at once
// (the holder's copy of the requests, read up to keepEvery earlier, still
// names it), or rejected first and its request left behind in Redis.
func TestRequeueCancelledRuns(t *testing.T) {
	for _, tc := range []struct {
		name   string
		reason string
	}{
		{"cancelled, requeued at once", ReasonCancelled},
		{"rejected, request left behind", ReasonRejected},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb := redistest.Start(t).Client()
			ctx := context.Background()
			var runs atomic.Int64
			started := make(chan struct{}, 1)
			c := testConfig(rdb, HandlerFunc(func(ctx context.Context, j *Job) error {
				if runs.Add(1) > 1 {
					return nil
				}
				if tc.reason == ReasonRejected {
					return fmt.Errorf("first run: %w", ErrSkipRetry)
				}
				started <- struct{}{}
				<-ctx.Done()
				return ctx.Err()
			}))
			st := runFor(t, c)
			id := enqueue(t, rdb, "q", 1)[0]
			if tc.reason == ReasonCancelled {
				select {
				case <-started:
				case <-time.After(30 * time.Second):
					t.Fatal("the job never started")
				}
				if res, err := Cancel(ctx, rdb, "q", id); err != nil || res[0].Outcome != CancelRequested {
					t.Fatalf("cancel = %+v, %v; want requested", res, err)
				}
			}
			waitFor(t, "the job dead", func() bool {
				d, err := GetDead(ctx, rdb, "q", id)
				return err == nil && d.Reason == tc.reason
			})
			if tc.reason == ReasonRejected {
				// A request its holder never acted on, seen by the holder.
				rdb.HSet(ctx, KeysFor("q").Cancel, id, "too late")
				time.Sleep(2 * keepEvery)
			}
			if _, err := RequeueDead(ctx, rdb, "q", id); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the requeued job settled", func() bool { return st.Done.Load()+st.Dead.Load() >= 2 })
			if st.Done.Load() != 1 || runs.Load() != 2 {
				d, _ := GetDead(ctx, rdb, "q", id)
				t.Fatalf("requeued job: %d done, %d runs, dead letter %+v; want it run and done", st.Done.Load(), runs.Load(), d)
			}
		})
	}
}
