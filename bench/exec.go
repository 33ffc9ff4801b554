package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"

	"github.com/baton-run/baton/work"
	"github.com/rs/zerolog"
)

// trueCmd is the job command of exec mode: it does nothing, so what is
// measured is the cost of a child process per job.
const trueCmd = "/bin/true"

// execChunk is how many jobs exec mode and the bare loop take in turns.
const execChunk = 50

// execVsFork measures exec mode against its ceiling in alternating chunks of
// execChunk jobs, so that the load of a shared machine falls on both alike.
// Exec mode is one holder (work.Run with work.Exec running /bin/true with the
// payload on stdin, own process group, Pdeathsig), kept running; a chunk's
// clock starts just before its jobs are enqueued (one pipelined round trip)
// and stops when the last one returns. The bare loop is conc goroutines that
// fork/exec /bin/true with the same stdin and nothing else. It returns both
// rates in jobs per second over n jobs each.
func execVsFork(ctx context.Context, srv *redisServer, conc, n int) (execRate, forkRate float64, err error) {
	rdb := srv.Client(0)
	defer rdb.Close()
	const q = "exec"
	if err := fill(ctx, rdb, q, 0); err != nil {
		return 0, 0, err
	}
	var c atomic.Pointer[counter]
	x := &work.Exec{Argv: []string{trueCmd}, Logger: zerolog.Nop()}
	h := work.HandlerFunc(func(ctx context.Context, j *work.Job) error {
		err := x.Handle(ctx, j)
		if err == nil {
			c.Load().hit()
		}
		return err
	})
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		errc <- work.Run(rctx, work.Config{Client: rdb, Queue: q, Consumer: "bench/run-0", Handler: h,
			Concurrency: conc, Logger: zerolog.Nop()}, nil)
	}()
	var execTime, forkTime time.Duration
	for i := 0; i < n/execChunk; i++ {
		runExec := func() error {
			c.Store(newCounter(execChunk))
			start := time.Now()
			if err := addJobs(ctx, rdb, q, execChunk, string(payload)); err != nil {
				return err
			}
			if err := c.Load().wait(errc); err != nil {
				return err
			}
			execTime += c.Load().at.Sub(start)
			return nil
		}
		runFork := func() error {
			d, err := forkLoop(conc, execChunk)
			forkTime += d
			return err
		}
		first, second := runExec, runFork
		if i%2 == 1 {
			first, second = runFork, runExec
		}
		if err := first(); err != nil {
			return 0, 0, err
		}
		if err := second(); err != nil {
			return 0, 0, err
		}
	}
	cancel()
	if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
		return 0, 0, err
	}
	if err := drained(ctx, rdb, q); err != nil {
		return 0, 0, err
	}
	done := float64(n / execChunk * execChunk)
	return done / execTime.Seconds(), done / forkTime.Seconds(), nil
}

// forkLoop runs /bin/true n times from conc goroutines, with the payload on
// stdin, and returns the time from the first start to the n-th exit.
func forkLoop(conc, n int) (time.Duration, error) {
	c := newCounter(n)
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	start := time.Now()
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				cmd := exec.Command(trueCmd)
				cmd.Stdin = bytes.NewReader(payload)
				if err := cmd.Run(); err != nil {
					mu.Lock()
					first = fmt.Errorf("run %s: %w", trueCmd, err)
					mu.Unlock()
					return
				}
				c.hit()
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return 0, first
	}
	return c.at.Sub(start), nil
}
