package work

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// On a queue that once used priorities, an idle holder blocks on every
// level's stream and a new normal job wakes it at once, even when a level's
// stream does not exist: the queue used only high (low was never created),
// a level's stream was deleted, or its group was destroyed.
func TestNewJobWakesHolderOnLevelsQueue(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after func(ctx context.Context, rdb *redis.Client) // once the priority jobs ran
	}{
		{"low never used", func(context.Context, *redis.Client) {}},
		{"high stream deleted", func(ctx context.Context, rdb *redis.Client) { rdb.Del(ctx, KeysFor("q").High) }},
		{"high group destroyed", func(ctx context.Context, rdb *redis.Client) { rdb.XGroupDestroy(ctx, KeysFor("q").High, Group) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rdb := redistest.Start(t).Client()
			ctx := context.Background()
			enqueueAt(t, rdb, PriorityHigh, 1)
			started := make(chan time.Time, 10)
			c := testConfig(rdb, HandlerFunc(func(context.Context, *Job) error {
				started <- time.Now()
				return nil
			}))
			st := new(Stats)
			runCtx, cancel := context.WithCancel(ctx)
			defer cancel()
			errc := make(chan error, 1)
			go func() { errc <- Run(runCtx, c, st) }()
			select {
			case <-started: // the high job: the holder reads by level
			case <-time.After(10 * time.Second):
				t.Fatal("the high job never ran")
			}
			tc.after(ctx, rdb)
			var waits []time.Duration
			for i := 0; i < 5; i++ {
				// Let the holder go idle: a normal job enqueued now must
				// wake it, whatever it did since the last one.
				time.Sleep(time.Second)
				at := time.Now()
				enqueue(t, rdb, "q", 1)
				select {
				case s := <-started:
					waits = append(waits, s.Sub(at))
				case <-time.After(10 * time.Second):
					t.Fatal("a normal job never ran")
				}
			}
			cancel()
			<-errc
			slices.Sort(waits)
			if waits[len(waits)/2] > 300*time.Millisecond {
				t.Fatalf("normal jobs started %v after they were enqueued, want a blocked read woken at once", waits)
			}
			t.Logf("pickup %v", waits)
		})
	}
}
