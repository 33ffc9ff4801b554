package main

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/baton-run/baton/work"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
)

// runTimeout bounds every measured run: a contender that has not finished by
// then is reported as failed, not waited for.
const runTimeout = 2 * time.Minute

// counter counts handled jobs and closes done at the n-th: every contender's
// clock stops when its n-th handler call returns.
type counter struct {
	n     int64
	count atomic.Int64
	at    time.Time // when the n-th job returned; read after done is closed
	done  chan struct{}
}

func newCounter(n int) *counter { return &counter{n: int64(n), done: make(chan struct{})} }

func (c *counter) hit() {
	if c.count.Add(1) == c.n {
		c.at = time.Now()
		close(c.done)
	}
}

// wait waits for the n-th job, a failure of the contender, or the timeout.
func (c *counter) wait(errc <-chan error) error {
	t := time.NewTimer(runTimeout)
	defer t.Stop()
	select {
	case <-c.done:
		return nil
	case err := <-errc:
		return fmt.Errorf("stopped after %d of %d jobs: %v", c.count.Load(), c.n, err)
	case <-t.C:
		return fmt.Errorf("timed out after %d of %d jobs", c.count.Load(), c.n)
	}
}

// batonRate runs work.Run with handler h over n pre-enqueued jobs and returns
// jobs per second, from the call of Run to the n-th handler return. ready,
// unless nil, is called once the jobs are enqueued, before Run.
func batonRate(ctx context.Context, srv *redisServer, conc, n int, h work.Handler, c *counter, ready func() error) (float64, error) {
	rdb := srv.Client(0)
	defer rdb.Close()
	const q = "bench"
	if err := fill(ctx, rdb, q, n); err != nil {
		return 0, err
	}
	if ready != nil {
		if err := ready(); err != nil {
			return 0, err
		}
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	start := time.Now()
	go func() {
		errc <- work.Run(rctx, work.Config{
			Client: rdb, Queue: q, Consumer: "bench/run-0", Handler: h,
			Concurrency: conc, Logger: zerolog.Nop(),
		}, nil)
	}()
	if err := c.wait(errc); err != nil {
		return 0, err
	}
	elapsed := c.at.Sub(start)
	cancel()
	if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
		return 0, err
	}
	if err := drained(ctx, rdb, q); err != nil {
		return 0, err
	}
	return float64(n) / elapsed.Seconds(), nil
}

// noopRate is library mode with a handler that does nothing.
func noopRate(ctx context.Context, srv *redisServer, conc, n int) (float64, error) {
	c := newCounter(n)
	h := work.HandlerFunc(func(context.Context, *work.Job) error { c.hit(); return nil })
	return batonRate(ctx, srv, conc, n, h, c, nil)
}

// rawBatchRate is the ceiling for a consumer group: one loop that reads 128
// entries with XREADGROUP, "handles" each, then acknowledges and deletes the
// batch with XACK and XDEL in one pipelined round trip. No goroutines, no
// channels, no Lua.
func rawBatchRate(ctx context.Context, srv *redisServer, n int) (float64, error) {
	rdb := srv.Client(1)
	defer rdb.Close()
	const q = "bench"
	if err := fill(ctx, rdb, q, n); err != nil {
		return 0, err
	}
	stream := work.KeysFor(q).Stream
	c := newCounter(n)
	ids := make([]string, 0, 128)
	start := time.Now()
	for deadline := start.Add(runTimeout); c.count.Load() < c.n; {
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("timed out after %d of %d jobs", c.count.Load(), n)
		}
		res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
			Group: work.Group, Consumer: "raw", Streams: []string{stream, ">"},
			Count: 128, Block: time.Second,
		}).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return 0, err
		}
		ids = ids[:0]
		for _, s := range res {
			for _, m := range s.Messages {
				_, _ = m.Values[work.PayloadField].(string)
				c.hit()
				ids = append(ids, m.ID)
			}
		}
		if len(ids) == 0 {
			continue
		}
		_, err = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.XAck(ctx, stream, work.Group, ids...)
			p.XDel(ctx, stream, ids...)
			return nil
		})
		if err != nil {
			return 0, err
		}
	}
	<-c.done
	elapsed := c.at.Sub(start)
	if err := drained(ctx, rdb, q); err != nil {
		return 0, err
	}
	return float64(n) / elapsed.Seconds(), nil
}
