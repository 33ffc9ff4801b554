package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/baton-run/baton/work"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
)

// chainLinks is how long the chains group's chain is: issue 27 asks for a
// chain of 1,000 jobs, each after the previous.
const chainLinks = 1000

// chains measures a chain of chainLinks jobs, each enqueued with
// work.After the one before, run by one holder (library mode, a no-op
// handler, concurrency 1): links per second, from the first job's start
// to the last one's end. Each link is released by the script that
// acknowledges the one before, so the figure is the round trip of a
// settle, a wake-up of the blocking read and the next run. The chain is
// enqueued first (its enqueue time is not counted) with its head delayed
// until the chain is built.
func chains(ctx context.Context, srv *redisServer) (float64, error) {
	rdb := srv.Client(0)
	defer rdb.Close()
	q := "chains-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	k := work.KeysFor(q)
	if err := work.EnsureGroup(ctx, rdb, k); err != nil {
		return 0, err
	}
	head, err := work.Enqueue(ctx, rdb, q, []byte("0"), work.In(time.Hour))
	if err != nil {
		return 0, err
	}
	prev := head
	for i := 1; i < chainLinks; i++ {
		if prev, err = work.Enqueue(ctx, rdb, q, []byte(strconv.Itoa(i)), work.After(prev)); err != nil {
			return 0, fmt.Errorf("link %d: %w", i, err)
		}
	}
	var start, end time.Time
	n := 0
	done := make(chan struct{})
	h := work.HandlerFunc(func(context.Context, *work.Job) error {
		if n == 0 {
			start = time.Now()
		}
		if n++; n == chainLinks {
			end = time.Now()
			close(done)
		}
		return nil
	})
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		errc <- work.Run(rctx, work.Config{Client: rdb, Queue: q, Consumer: "bench/run-0", Handler: h, Logger: zerolog.Nop()}, nil)
	}()
	// The head is moved into the stream now: the holder's keeper would
	// only do it in an hour.
	if err := rdb.ZAdd(ctx, k.Scheduled, redis.Z{Score: 0, Member: head}).Err(); err != nil {
		return 0, err
	}
	select {
	case <-done:
	case err := <-errc:
		return 0, fmt.Errorf("holder stopped after %d links: %v", n, err)
	case <-time.After(2 * time.Minute):
		return 0, fmt.Errorf("the chain stalled after %d links", n)
	}
	cancel()
	if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
		return 0, err
	}
	_ = rdb.Del(ctx, k.Stream, k.Stats, k.Scheduled, k.ScheduledJobs)
	return float64(chainLinks-1) / end.Sub(start).Seconds(), nil
}

func (b *bench) chains(ctx context.Context) error {
	return b.rounds(ctx, []contender{{"chain_links_c1", "links/s", func() (float64, error) { return chains(ctx, b.srv) }}})
}
