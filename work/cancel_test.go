package work_test

import (
	"context"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/work"
	"github.com/redis/go-redis/v9"
)

// A waiting job of another level than normal, with a unique key, is
// cancelled at once, and its unique key freed. The script built the unique
// key from the level's stream (baton:{q}:high:unique:…), never the one the
// job holds (baton:{q}:unique:…), so it said "gone" until Cancel gave up.
func TestCancelWaitingPriorityJobWithUniqueKey(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client()
	for _, p := range []work.Priority{work.PriorityHigh, work.PriorityLow, work.PriorityNormal} {
		key := "report-" + p.String()
		id, err := work.Enqueue(ctx, rdb, "q", []byte("x"), work.WithPriority(p), work.UniqueKey(key))
		if err != nil {
			t.Fatal(err)
		}
		res, err := work.Cancel(ctx, rdb, "q", id)
		if err != nil {
			t.Fatalf("%s: cancel: %v", p, err)
		}
		if len(res) != 1 || res[0].Outcome != work.CancelDone || res[0].State != work.StateWaiting {
			t.Fatalf("%s: cancel = %+v, want done from waiting", p, res)
		}
		if n, _ := rdb.Exists(ctx, work.KeysFor("q").Unique(key)).Result(); n != 0 {
			t.Fatalf("%s: unique key %s still held after the cancel", p, key)
		}
	}
}

// Cancelling a job whose id another dead letter still holds (two entries
// claimed it) keeps the index on that letter, scheduled or keyed, and
// writes the cancel's letter all the same. The key cancel script wrote the
// index over, so `dead show ID` reached the cancelled copy, not the other.
func TestCancelKeepsDeadIndexOfAnotherLetter(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []work.Option
	}{
		{"scheduled", []work.Option{work.In(time.Hour)}},
		{"keyed", []work.Option{work.Key("tenant-1")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			rdb := redistest.Start(t).Client()
			k := work.KeysFor("q")
			id, err := work.Enqueue(ctx, rdb, "q", []byte("x"), tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			other, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: k.Dead, Values: []any{
				work.PayloadField, "other", "orig", id, "reason", "failed", "id", id, "attempts", "1",
			}}).Result()
			if err != nil {
				t.Fatal(err)
			}
			if err := rdb.HSet(ctx, k.DeadIndex, id, other).Err(); err != nil {
				t.Fatal(err)
			}
			res, err := work.Cancel(ctx, rdb, "q", id)
			if err != nil || len(res) != 1 || res[0].Outcome != work.CancelDone {
				t.Fatalf("cancel = %+v, %v; want done", res, err)
			}
			if got := rdb.HGet(ctx, k.DeadIndex, id).Val(); got != other {
				t.Errorf("dead index names %s for job %s, want the other letter %s", got, id, other)
			}
			m, err := rdb.XRange(ctx, k.Dead, res[0].Letter, res[0].Letter).Result()
			if err != nil || len(m) != 1 || m[0].Values["reason"] != "cancelled" || m[0].Values["orig"] != id {
				t.Errorf("cancel's letter %s: %v, %v; want job %s cancelled", res[0].Letter, m, err, id)
			}
		})
	}
}
