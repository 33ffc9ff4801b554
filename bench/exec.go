package main

import (
	"bytes"
	"context"
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

// execRate is exec mode: work.Exec runs /bin/true once per job with the
// payload on stdin, in its own process group, Pdeathsig set.
func execRate(ctx context.Context, srv *redisServer, conc, n int) (float64, error) {
	c := newCounter(n)
	x := &work.Exec{Argv: []string{trueCmd}, Logger: zerolog.Nop()}
	h := work.HandlerFunc(func(ctx context.Context, j *work.Job) error {
		err := x.Handle(ctx, j)
		if err == nil {
			c.hit()
		}
		return err
	})
	return batonRate(ctx, srv, conc, n, h, c)
}

// forkRate is the ceiling for exec mode: conc goroutines that fork/exec
// /bin/true with the same stdin, n times in all, and nothing else.
func forkRate(conc, n int) (float64, error) {
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
	return float64(n) / c.at.Sub(start).Seconds(), nil
}
