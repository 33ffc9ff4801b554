package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/baton-run/baton/work"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
)

// pickup measures an idle holder (library mode, concurrency 1, defaults): the
// time from just before a producer's XADD to the start of the handler, one job
// at a time, with an idle pause of 2–5 ms before each so the holder is parked
// in its blocking read. Both times come from this process's monotonic clock.
// It returns the 50th and 99th percentiles in milliseconds.
func pickup(ctx context.Context, srv *redisServer, samples int) (p50, p99 float64, err error) {
	holder := srv.Client(0)
	defer holder.Close()
	producer := srv.Client(1)
	defer producer.Close()
	const q = "pickup"
	if err := fill(ctx, producer, q, 0); err != nil {
		return 0, 0, err
	}
	started := make(chan time.Time, 1)
	h := work.HandlerFunc(func(context.Context, *work.Job) error {
		started <- time.Now()
		return nil
	})
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		errc <- work.Run(rctx, work.Config{Client: holder, Queue: q, Consumer: "bench/run-0", Handler: h, Logger: zerolog.Nop()}, nil)
	}()
	var ms []float64
	for i := -5; i < samples; i++ { // five unmeasured jobs warm both sides up
		time.Sleep(2*time.Millisecond + rand.N(3*time.Millisecond))
		sent := time.Now()
		if err := producer.XAdd(ctx, &redis.XAddArgs{Stream: work.KeysFor(q).Stream, Values: []any{work.PayloadField, payload}}).Err(); err != nil {
			return 0, 0, err
		}
		select {
		case at := <-started:
			if i >= 0 {
				ms = append(ms, float64(at.Sub(sent))/float64(time.Millisecond))
			}
		case err := <-errc:
			return 0, 0, fmt.Errorf("holder stopped: %v", err)
		case <-time.After(10 * time.Second):
			return 0, 0, errors.New("a job was not picked up in 10s")
		}
	}
	cancel()
	if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
		return 0, 0, err
	}
	return percentile(ms, 50), percentile(ms, 99), nil
}

// percentile is the nearest-rank p-th percentile of v.
func percentile(v []float64, p float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	rank := int(p/100*float64(len(s))+0.999999) - 1
	return s[min(max(rank, 0), len(s)-1)]
}
