package metrics

import (
	"context"
	"fmt"
	"testing"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/work"
	"github.com/redis/go-redis/v9"
)

// Keyed jobs in their keys' streams (laid out by hand as docs/keys.md
// says): waiting ones count in baton_keyed_jobs_waiting and in the
// waiting jobs, running ones (pending) in the pending jobs; the rings'
// lengths give baton_keys_waiting.
func TestMetricsKeyStreams(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client()
	k := work.KeysFor("q")
	n := 0
	for _, key := range []string{"a", "b", "c"} {
		s := k.KeyStream(work.PriorityNormal, key)
		rdb.XGroupCreateMkStream(ctx, s, work.Group, "0")
		for range 4 {
			n++
			id := fmt.Sprintf("1700000000000-%d", n)
			rdb.XAdd(ctx, &redis.XAddArgs{Stream: s, ID: id, Values: []any{work.PayloadField, "x", "key", key, "orig", id}})
			rdb.HSet(ctx, k.KeyJobs(), id, id+"\nnormal\n"+key)
		}
		rdb.SAdd(ctx, k.KeyStreams(), s)
		rdb.RPush(ctx, k.KeyRing(work.PriorityNormal), key)
	}
	// a's first job runs
	if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: work.Group, Consumer: "h/run-1",
		Streams: []string{k.KeyStream(work.PriorityNormal, "a"), ">"}, Count: 1}).Err(); err != nil {
		t.Fatal(err)
	}
	scrapeWant(t, rdb, map[string]float64{
		`baton_keyed_jobs_waiting{queue="q"}`:             11,
		`baton_jobs{queue="q",state="waiting"}`:           11,
		`baton_jobs{queue="q",state="pending"}`:           1,
		`baton_keys_waiting{priority="normal",queue="q"}`: 3,
		`baton_keys_waiting{priority="high",queue="q"}`:   0,
	})
}
