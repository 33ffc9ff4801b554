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

// waitRun measures work.Wait tries times, one job at a time: a library
// holder (work.Run) runs each job with a handler that waits for the bench's
// go, a Wait for the job is blocked by then, and the figure is from the
// handler returning to Wait returning (the ack, the notify it carries and
// the BLPOP's wake-up), in ms.
func waitRun(ctx context.Context, srv *redisServer, tries int) ([]float64, error) {
	rdb := srv.Client(3)
	defer rdb.Close()
	const q = "wait"
	if err := fill(ctx, rdb, q, 0); err != nil {
		return nil, err
	}
	var returned atomic.Int64
	started := make(chan string)
	release := make(chan struct{})
	h := work.HandlerFunc(func(ctx context.Context, j *work.Job) error {
		started <- j.ID
		select {
		case <-release:
		case <-ctx.Done():
			return ctx.Err()
		}
		returned.Store(time.Now().UnixNano())
		return nil
	})
	rctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		errc <- work.Run(rctx, work.Config{Client: rdb, Queue: q, Consumer: "bench/run-0", Handler: h,
			Concurrency: 1, Logger: zerolog.Nop()}, nil)
	}()
	defer func() {
		cancel()
		<-errc
	}()
	type waited struct {
		at  time.Time
		err error
	}
	vs := make([]float64, 0, tries)
	for range tries {
		id, err := work.Enqueue(ctx, rdb, q, payload)
		if err != nil {
			return nil, err
		}
		select {
		case got := <-started:
			if got != id {
				return nil, fmt.Errorf("ran job %s, want %s", got, id)
			}
		case err := <-errc:
			return nil, fmt.Errorf("work.Run: %w", err)
		case <-time.After(20 * time.Second):
			return nil, errors.New("the job did not start in 20s")
		}
		done := make(chan waited, 1)
		go func() {
			_, err := work.Wait(ctx, rdb, q, id)
			done <- waited{time.Now(), err}
		}()
		// Wait registers and blocks in its BLPOP: the waiters hash names
		// the job once it has registered.
		if err := waitFor(10*time.Second, "Wait registered", func() bool {
			n, _ := rdb.HGet(ctx, work.KeysFor(q).Waiters, id).Int()
			return n > 0
		}); err != nil {
			return nil, err
		}
		time.Sleep(5 * time.Millisecond) // from Locate into its BLPOP
		release <- struct{}{}
		var w waited
		select {
		case w = <-done:
		case <-time.After(20 * time.Second):
			return nil, fmt.Errorf("work.Wait for %s did not return in 20s", id)
		}
		if w.err != nil {
			return nil, fmt.Errorf("work.Wait for %s: %w", id, w.err)
		}
		vs = append(vs, float64(w.at.UnixNano()-returned.Load())/float64(time.Millisecond))
	}
	return vs, nil
}
