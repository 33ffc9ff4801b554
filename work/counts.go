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
	Blocked   int64 `json:"blocked"`   // waiting for the jobs they were enqueued after (After)
	Done      int64 `json:"done"`      // acknowledged, all time
	// OldestWaiting is how long the oldest waiting job has waited (since it
	// entered the stream: a retry or a given-back job re-enters); 0 when
	// none waits.
	OldestWaiting time.Duration `json:"oldest_waiting_ns"`
	// ByPriority splits Waiting by priority ("high", "normal", "low") once
	// the queue has used priorities; nil before.
	ByPriority map[string]int64 `json:"waiting_by_priority,omitempty"`
	// Keyed counts the jobs of Waiting that wait in their keys' streams
	// (enqueued with a key, docs/keys.md); their running jobs are counted
	// in Pending and KeyedRunning. Both read at most MaxKeyStreamsRead key
	// streams.
	Keyed        int64 `json:"waiting_keyed,omitempty"`
	KeyedRunning int64 `json:"pending_keyed,omitempty"`
	// Paused is the queue's pause, nil when it is not paused.
	Paused *Pause `json:"paused,omitempty"`
	// Stats are the queue's totals (the Stat* fields), all time.
	Stats map[string]int64 `json:"-"`
	// The key streams read for Keyed and KeyedRunning (Keys), and whether
	// some were left unread.
	keyStreams  []keyStreamLoad
	keysPartial bool
}

// ReadCounts reads a queue's counts in two round trips, without writing
// (one more for each priority with jobs waiting, and two per thousand key
// streams when keys have jobs, readKeyStreams, and one more per thousand
// when keyed jobs wait, oldestKeyed). Acknowledged entries are
// deleted, so the streams hold exactly the waiting and pending ones.
func ReadCounts(ctx context.Context, rdb redis.Cmdable, q string) (*Counts, error) {
	k := KeysFor(q)
	var xlen [3]*redis.IntCmd
	var groups [3]*redis.XInfoGroupsCmd
	var scheduled, retrying, dead, blocked, keyStreams *redis.IntCmd
	var stats, paused *redis.MapStringStringCmd
	var pausedTTL *redis.DurationCmd
	_, _ = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, level := range readOrder {
			xlen[level] = p.XLen(ctx, k.StreamOf(level))
			groups[level] = p.XInfoGroups(ctx, k.StreamOf(level))
		}
		scheduled = p.ZCard(ctx, k.Scheduled)
		retrying = p.ZCard(ctx, k.Retry)
		dead = p.XLen(ctx, k.Dead)
		blocked = p.HLen(ctx, k.Blocked())
		keyStreams = p.SCard(ctx, k.KeyStreams())
		stats = p.HGetAll(ctx, k.Stats)
		paused = p.HGetAll(ctx, k.Paused)
		pausedTTL = p.PTTL(ctx, k.Paused)
		return nil
	})
	c := &Counts{Scheduled: scheduled.Val(), Retrying: retrying.Val(), Dead: dead.Val(), Blocked: blocked.Val(), Stats: map[string]int64{},
		Paused: pauseOf(paused.Val(), pausedTTL.Val())}
	if keyStreams.Val() > 0 {
		streams, more, err := readKeyStreams(ctx, rdb, k)
		if err != nil {
			return nil, fmt.Errorf("read queue: %w", err)
		}
		c.keyStreams, c.keysPartial = streams, more
		for _, s := range streams {
			c.Keyed += s.waiting
			c.KeyedRunning += s.running
		}
		if c.Keyed > 0 {
			if c.OldestWaiting, err = oldestKeyed(ctx, rdb, streams); err != nil {
				return nil, fmt.Errorf("read queue: %w", err)
			}
		}
	}
	c.Waiting, c.Pending = c.Keyed, c.KeyedRunning
	var waiting [3]int64
	for _, level := range readOrder {
		if err := xlen[level].Err(); err != nil {
			return nil, fmt.Errorf("read queue: %w", err)
		}
		last, pending := "0-0", int64(0)
		for _, g := range groups[level].Val() { // an error here means no stream yet
			if g.Name == Group {
				pending, last = g.Pending, g.LastDeliveredID
			}
		}
		waiting[level] = xlen[level].Val() - pending
		c.Pending += pending
		c.Waiting += waiting[level]
		if waiting[level] > 0 {
			age, err := oldestWaiting(ctx, rdb, k.StreamOf(level), last)
			if err != nil {
				return nil, err
			}
			c.OldestWaiting = max(c.OldestWaiting, age)
		}
	}
	if xlen[PriorityHigh].Val() > 0 || xlen[PriorityLow].Val() > 0 {
		c.ByPriority = map[string]int64{}
		for _, level := range readOrder {
			c.ByPriority[level.String()] = waiting[level]
		}
	}
	for f, v := range stats.Val() {
		c.Stats[f], _ = strconv.ParseInt(v, 10, 64)
	}
	c.Done = c.Stats[StatDone]
	return c, nil
}

// oldestWaiting is the age of the first entry after last in stream.
func oldestWaiting(ctx context.Context, rdb redis.Cmdable, stream, last string) (time.Duration, error) {
	next, err := rdb.XRangeN(ctx, stream, "("+last, "+", 1).Result()
	if err != nil {
		return 0, fmt.Errorf("read queue: %w", err)
	}
	if len(next) == 1 {
		if ms, _, ok := cutDash(next[0].ID); ok {
			return max(0, time.Since(time.UnixMilli(ms))), nil
		}
	}
	return 0, nil
}
