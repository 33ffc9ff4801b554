package work

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Counts is where a queue's jobs are now, and its totals.
type Counts struct {
	Waiting   int64 `json:"waiting"`   // in the stream, never delivered
	Pending   int64 `json:"pending"`   // delivered, not yet acknowledged
	Scheduled int64 `json:"scheduled"` // delayed by their producer (In, At)
	Retrying  int64 `json:"retrying"`  // failed, waiting for their retry time
	Dead      int64 `json:"dead"`      // dead letters kept
	Done      int64 `json:"done"`      // acknowledged, all time
	// OldestWaiting is how long the oldest waiting job has waited (since it
	// entered the stream: a retry or a given-back job re-enters); 0 when
	// none waits.
	OldestWaiting time.Duration `json:"oldest_waiting_ns"`
	// Stats are the queue's totals (the Stat* fields), all time.
	Stats map[string]int64 `json:"-"`
}

// ReadCounts reads a queue's counts in two round trips, without writing.
// Acknowledged entries are deleted, so the stream holds exactly the waiting
// and pending ones.
func ReadCounts(ctx context.Context, rdb redis.Cmdable, q string) (*Counts, error) {
	k := KeysFor(q)
	var xlen, scheduled, retrying, dead *redis.IntCmd
	var groups *redis.XInfoGroupsCmd
	var stats *redis.MapStringStringCmd
	_, _ = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		xlen = p.XLen(ctx, k.Stream)
		groups = p.XInfoGroups(ctx, k.Stream)
		scheduled = p.ZCard(ctx, k.Scheduled)
		retrying = p.ZCard(ctx, k.Retry)
		dead = p.XLen(ctx, k.Dead)
		stats = p.HGetAll(ctx, k.Stats)
		return nil
	})
	if err := xlen.Err(); err != nil {
		return nil, fmt.Errorf("read queue: %w", err)
	}
	c := &Counts{Scheduled: scheduled.Val(), Retrying: retrying.Val(), Dead: dead.Val(), Stats: map[string]int64{}}
	last := "0-0"
	for _, g := range groups.Val() { // an error here means no stream yet
		if g.Name == Group {
			c.Pending, last = g.Pending, g.LastDeliveredID
		}
	}
	c.Waiting = xlen.Val() - c.Pending
	for f, v := range stats.Val() {
		c.Stats[f], _ = strconv.ParseInt(v, 10, 64)
	}
	c.Done = c.Stats[StatDone]
	if c.Waiting > 0 {
		next, err := rdb.XRangeN(ctx, k.Stream, "("+last, "+", 1).Result()
		if err != nil {
			return nil, fmt.Errorf("read queue: %w", err)
		}
		if len(next) == 1 {
			if ms, _, ok := cutDash(next[0].ID); ok {
				c.OldestWaiting = max(0, time.Since(time.UnixMilli(ms)))
			}
		}
	}
	return c, nil
}
