package main

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/baton-run/baton/work"
	"github.com/rs/zerolog"
)

// The workflows group (issue 27): batches.

func (b *bench) workflows(ctx context.Context) error {
	n := b.cfg.HolderJobs // 100,000
	err := b.rounds(ctx, []contender{
		{"nobatch_100k_c10", "jobs/s", func() (float64, error) { return batchRate(ctx, b.srv, 10, n, false) }},
		{"batch_100k_c10", "jobs/s", func() (float64, error) { return batchRate(ctx, b.srv, 10, n, true) }},
	})
	if err != nil {
		return err
	}
	return b.pairRuns("batch callback", label{"batch_callback_p99_ms", "ms"}, label{"batch_wait_p99_ms", "ms"},
		func() (float64, float64, error) { return batchLatency(ctx, b.srv, 20, 1000) })
}

// batchRate is noopRate over n jobs that are, with inBatch, the members of
// one closed batch: jobs per second from the call of Run to the n-th member
// handled.
func batchRate(ctx context.Context, srv *redisServer, conc, n int, inBatch bool) (float64, error) {
	rdb := srv.Client(0)
	defer rdb.Close()
	const q = "bench"
	if err := fill(ctx, rdb, q, 0); err != nil {
		return 0, err
	}
	if inBatch {
		bt, err := work.NewBatch(ctx, rdb, q, work.BatchCallback([]byte("cb"), ""))
		if err != nil {
			return 0, err
		}
		msgs := make([]work.Message, n)
		for i := range msgs {
			msgs[i] = work.Message{Payload: payload}
		}
		if _, err := bt.AddAndClose(ctx, msgs...); err != nil {
			return 0, err
		}
	} else if err := addJobs(ctx, rdb, q, n, string(payload)); err != nil {
		return 0, err
	}
	c := newCounter(n)
	h := work.HandlerFunc(func(_ context.Context, j *work.Job) error {
		if j.Batch == nil {
			c.hit()
		}
		return nil
	})
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	start := time.Now()
	go func() {
		errc <- work.Run(rctx, work.Config{Client: rdb, Queue: q, Consumer: "bench/run-0", Handler: h, Concurrency: conc, Logger: zerolog.Nop()}, nil)
	}()
	if err := c.wait(errc); err != nil {
		return 0, err
	}
	elapsed := c.at.Sub(start)
	cancel()
	if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
		return 0, err
	}
	return float64(n) / elapsed.Seconds(), nil
}

// batchLatency runs batches of size no-op members one after the other on
// one holder (concurrency 10) and returns the 99th percentiles, in ms, of
// the callback's latency (from the last member's handler return to the
// callback's handler start: the ack, the count and the callback's pickup)
// and of Wait's (from the batch's completion, on Redis' clock, to Wait's
// return).
func batchLatency(ctx context.Context, srv *redisServer, batches, size int) (cbP99, waitP99 float64, err error) {
	rdb := srv.Client(0)
	defer rdb.Close()
	producer := srv.Client(1)
	defer producer.Close()
	const q = "bench"
	if err := fill(ctx, rdb, q, 0); err != nil {
		return 0, 0, err
	}
	var last atomic.Int64 // unix ns of the latest member's return
	called := make(chan time.Time, 1)
	h := work.HandlerFunc(func(_ context.Context, j *work.Job) error {
		if j.Batch != nil {
			called <- time.Now()
			return nil
		}
		last.Store(time.Now().UnixNano())
		return nil
	})
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		errc <- work.Run(rctx, work.Config{Client: rdb, Queue: q, Consumer: "bench/run-0", Handler: h, Concurrency: 10, Logger: zerolog.Nop()}, nil)
	}()
	msgs := make([]work.Message, size)
	for i := range msgs {
		msgs[i] = work.Message{Payload: payload}
	}
	var cbMS, waitMS []float64
	for i := 0; i < batches; i++ {
		bt, err := work.NewBatch(ctx, producer, q, work.BatchCallback([]byte("cb"), ""))
		if err != nil {
			return 0, 0, err
		}
		waited := make(chan error, 1)
		go func() {
			sum, err := bt.Wait(ctx)
			if err == nil {
				waitMS = append(waitMS, float64(time.Now().UnixMicro()-sum.CompletedAt*1000)/1000)
			}
			waited <- err
		}()
		if _, err := bt.AddAndClose(ctx, msgs...); err != nil {
			return 0, 0, err
		}
		select {
		case at := <-called:
			cbMS = append(cbMS, float64(at.UnixNano()-last.Load())/float64(time.Millisecond))
		case err := <-errc:
			return 0, 0, fmt.Errorf("holder stopped: %v", err)
		case <-time.After(runTimeout):
			return 0, 0, errors.New("no callback within the run timeout")
		}
		if err := <-waited; err != nil {
			return 0, 0, err
		}
	}
	cancel()
	<-errc
	return percentile(cbMS, 99), percentile(waitMS, 99), nil
}
