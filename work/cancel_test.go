package work_test

import (
	"context"
	"testing"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/work"
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
