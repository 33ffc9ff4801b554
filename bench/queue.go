package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/baton-run/baton/work"
	"github.com/redis/go-redis/v9"
)

// payload is every job's body, for every contender: 64 bytes.
var payload = []byte(strings.Repeat("p", 64))

// fill empties the server and enqueues n baton jobs on queue q, pipelined;
// enqueueing is never part of a measured time.
func fill(ctx context.Context, rdb *redis.Client, q string, n int) error {
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	k := work.KeysFor(q)
	if err := work.EnsureGroup(ctx, rdb, k); err != nil {
		return fmt.Errorf("create group: %w", err)
	}
	return addJobs(ctx, rdb, q, n, string(payload))
}

// addJobs enqueues n jobs with body p, 1,000 per round trip.
func addJobs(ctx context.Context, rdb *redis.Client, q string, n int, p string) error {
	stream := work.KeysFor(q).Stream
	for done := 0; done < n; {
		chunk := min(1000, n-done)
		_, err := rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
			for i := 0; i < chunk; i++ {
				pl.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{work.PayloadField, p}})
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("enqueue: %w", err)
		}
		done += chunk
	}
	return nil
}

// drained checks that every job of q was acknowledged and deleted.
func drained(ctx context.Context, rdb *redis.Client, q string) error {
	stream := work.KeysFor(q).Stream
	n, err := rdb.XLen(ctx, stream).Result()
	if err != nil {
		return err
	}
	p, err := rdb.XPending(ctx, stream, work.Group).Result()
	if err != nil {
		return err
	}
	if n != 0 || p.Count != 0 {
		return fmt.Errorf("queue %s not drained: %d entries, %d pending", q, n, p.Count)
	}
	return nil
}
