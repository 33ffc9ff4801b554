package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/baton-run/baton/work"
	"github.com/rs/zerolog"
)

// The producers group: how late delayed jobs start while a holder runs, and
// how closely a queue-wide rate limit holds over 30 s with 4 holders.

// lateness enqueues n jobs due over the next two seconds, runs one holder,
// and returns the p50 and p99 of start − due, in ms.
func lateness(ctx context.Context, srv *redisServer, n int) (p50, p99 float64, err error) {
	rdb := srv.Client(0)
	defer rdb.Close()
	if err := fill(ctx, rdb, "bench", 0); err != nil {
		return 0, 0, err
	}
	due := make(map[string]time.Time, n)
	base := time.Now().Add(500 * time.Millisecond)
	msgs := make([]work.Message, n)
	for i := range msgs {
		at := base.Add(time.Duration(i) * 2 * time.Second / time.Duration(n))
		msgs[i] = work.Message{Payload: []byte(strconv.Itoa(i)), Options: []work.Option{work.At(at)}}
	}
	ids, err := work.EnqueueMany(ctx, rdb, "bench", msgs)
	if err != nil {
		return 0, 0, err
	}
	for i, id := range ids {
		due[id] = base.Add(time.Duration(i) * 2 * time.Second / time.Duration(n))
	}
	var mu sync.Mutex
	var late []float64
	c := newCounter(n)
	h := work.HandlerFunc(func(_ context.Context, j *work.Job) error {
		mu.Lock()
		late = append(late, float64(time.Since(due[j.ID]).Microseconds())/1000)
		mu.Unlock()
		c.hit()
		return nil
	})
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		errc <- work.Run(rctx, work.Config{Client: rdb, Queue: "bench", Consumer: "bench/run-0", Handler: h, Logger: zerolog.Nop()}, nil)
	}()
	if err := c.wait(errc); err != nil {
		return 0, 0, err
	}
	slices.Sort(late)
	return late[len(late)/2], late[len(late)*99/100], nil
}

// rateHeld runs 4 holders with rate_limit 200/s over a backlog for 30 s and
// returns the jobs per second over the whole span and the most started in
// any one second (sliding by 100 ms).
func rateHeld(ctx context.Context, srv *redisServer, span time.Duration) (rate, worst float64, err error) {
	rdb := srv.Client(0)
	defer rdb.Close()
	if err := fill(ctx, rdb, "bench", 10000); err != nil {
		return 0, 0, err
	}
	var mu sync.Mutex
	var starts []time.Time
	h := work.HandlerFunc(func(context.Context, *work.Job) error {
		mu.Lock()
		starts = append(starts, time.Now())
		mu.Unlock()
		return nil
	})
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = work.Run(rctx, work.Config{Client: rdb, Queue: "bench", Consumer: "bench/run-" + strconv.Itoa(i), Handler: h,
				Concurrency: 4, RateLimit: work.Rate{N: 200, Per: time.Second}, Logger: zerolog.Nop()}, nil)
		}()
	}
	time.Sleep(span + time.Second)
	cancel()
	wg.Wait()
	if len(starts) < 2 {
		return 0, 0, fmt.Errorf("only %d jobs started", len(starts))
	}
	// Judge from the first second on: the holders start then.
	from := starts[0].Add(time.Second)
	in := func(a, b time.Time) (n int) {
		for _, s := range starts {
			if !s.Before(a) && s.Before(b) {
				n++
			}
		}
		return n
	}
	for at := from; !at.Add(time.Second).After(from.Add(span - time.Second)); at = at.Add(100 * time.Millisecond) {
		worst = max(worst, float64(in(at, at.Add(time.Second))))
	}
	return float64(in(from, from.Add(span-time.Second))) / (span - time.Second).Seconds(), worst, nil
}

func (b *bench) producers(ctx context.Context) error {
	err := b.pairRuns("lateness", label{"delayed_late_p50_ms", "ms"}, label{"delayed_late_p99_ms", "ms"},
		func() (float64, float64, error) { return lateness(ctx, b.srv, 200) })
	if err != nil {
		return err
	}
	span := 30 * time.Second
	if b.cfg.Quick {
		span = 5 * time.Second
	}
	rate, worst, err := rateHeld(ctx, b.srv, span)
	if err != nil {
		return fmt.Errorf("rate limit: %w", err)
	}
	b.res.add("rate_200_per_s", "jobs/s", rate)
	b.res.add("rate_200_worst_1s", "jobs", worst)
	progress("rate limit 200/s, 4 holders, %s: %s jobs/s, at most %s in one second", span, num(rate), num(worst))
	return nil
}
