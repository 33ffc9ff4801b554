package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/baton-run/baton/work"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
)

// keys measures issue 28's figures: fair turns (key A's 50,000 waiting jobs
// of 1 ms, then key B's 100: how long until B's are done, and how long A
// takes to drain, which is what plain FIFO would make B wait), the cap
// (key_concurrency 3, 4 holders of concurrency 4 as 2 hosts, jobs of 20 ms
// of one key: the most running at once, sampled by the jobs, and the key's
// rate), and the cost of keys (20,000 no-op jobs over 1,000 keys, no cap,
// against the same jobs without keys).
func (b *bench) keys(ctx context.Context) error {
	rdb := b.srv.Client(0)
	defer rdb.Close()
	for r := 1; r <= b.cfg.Runs; r++ {
		bDone, aDrain, err := keysFair(ctx, rdb, 50000)
		if err != nil {
			return fmt.Errorf("keys fair, run %d: %w", r, err)
		}
		b.res.add("keys_fair_b_done_ms", "ms", bDone)
		b.res.add("keys_fair_a_drain_ms", "ms", aDrain)
		most, rate, err := keysCap(ctx, rdb)
		if err != nil {
			return fmt.Errorf("keys cap, run %d: %w", r, err)
		}
		b.res.add("keys_cap_most_running", "jobs", most)
		b.res.add("keys_cap_rate", "jobs/s", rate)
		keyed, plain, err := keysCost(ctx, rdb, b.cfg.Jobs)
		if err != nil {
			return fmt.Errorf("keys cost, run %d: %w", r, err)
		}
		b.res.add("keys_noop_1000_keys_c10", "jobs/s", keyed)
		b.res.add("keys_noop_no_keys_c10", "jobs/s", plain)
		b.res.add("keys_noop_ratio", "x", keyed/plain) // each run's pairs, measured back to back
		progress("run %d/%d  keys  B's 100 done in %s ms (A drains in %s ms); cap 3: most %s at once, %s jobs/s; noop over 1,000 keys %s jobs/s, without keys %s jobs/s",
			r, b.cfg.Runs, num(bDone), num(aDrain), num(most), num(rate), num(keyed), num(plain))
	}
	return nil
}

// runners starts n work.Run loops on queue q until the returned stop.
func runners(ctx context.Context, rdb *redis.Client, q string, n, conc int, caps work.KeyCaps, h work.Handler) (stop func()) {
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = work.Run(rctx, work.Config{Client: rdb, Queue: q, Consumer: fmt.Sprintf("host%d/run-%d", i%2, i/2), Handler: h,
				Concurrency: conc, KeyCaps: caps, Logger: zerolog.Nop()}, nil)
		}()
	}
	return func() { cancel(); wg.Wait() }
}

func enqueueKeyed(ctx context.Context, rdb *redis.Client, q string, n int, key func(i int) string) error {
	for i := 0; i < n; i += 1000 {
		msgs := make([]work.Message, 0, 1000)
		for j := i; j < min(i+1000, n); j++ {
			var opts []work.Option
			if k := key(j); k != "" {
				opts = []work.Option{work.Key(k)}
			}
			msgs = append(msgs, work.Message{Payload: []byte(key(j)), Options: opts})
		}
		if _, err := work.EnqueueMany(ctx, rdb, q, msgs); err != nil {
			return err
		}
	}
	return nil
}

func keysFair(ctx context.Context, rdb *redis.Client, a int) (bDone, aDrain float64, err error) {
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		return 0, 0, err
	}
	const q = "keys-fair"
	if err := enqueueKeyed(ctx, rdb, q, a, func(int) string { return "A" }); err != nil {
		return 0, 0, err
	}
	var doneA, doneB atomic.Int64
	h := work.HandlerFunc(func(_ context.Context, j *work.Job) error {
		time.Sleep(time.Millisecond)
		if j.Key == "B" {
			doneB.Add(1)
		} else {
			doneA.Add(1)
		}
		return nil
	})
	stop := runners(ctx, rdb, q, 2, 4, work.KeyCaps{}, h)
	defer stop()
	time.Sleep(500 * time.Millisecond)
	start := time.Now()
	if err := enqueueKeyed(ctx, rdb, q, 100, func(int) string { return "B" }); err != nil {
		return 0, 0, err
	}
	deadline := time.Now().Add(runTimeout)
	for doneB.Load() < 100 || doneA.Load() < int64(a) {
		if bDone == 0 && doneB.Load() == 100 {
			bDone = float64(time.Since(start).Milliseconds())
		}
		if time.Now().After(deadline) {
			return 0, 0, fmt.Errorf("timed out: %d of A, %d of B", doneA.Load(), doneB.Load())
		}
		time.Sleep(time.Millisecond)
	}
	if bDone == 0 {
		bDone = float64(time.Since(start).Milliseconds())
	}
	return bDone, float64(time.Since(start).Milliseconds()), nil
}

func keysCap(ctx context.Context, rdb *redis.Client) (most, rate float64, err error) {
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		return 0, 0, err
	}
	const q, n = "keys-cap", 400
	if err := enqueueKeyed(ctx, rdb, q, n, func(int) string { return "one" }); err != nil {
		return 0, 0, err
	}
	var running, top, done atomic.Int64
	h := work.HandlerFunc(func(context.Context, *work.Job) error {
		now := running.Add(1)
		for t := top.Load(); now > t && !top.CompareAndSwap(t, now); t = top.Load() {
		}
		time.Sleep(20 * time.Millisecond)
		running.Add(-1)
		done.Add(1)
		return nil
	})
	start := time.Now()
	stop := runners(ctx, rdb, q, 4, 4, work.KeyCaps{Default: 3}, h)
	defer stop()
	deadline := time.Now().Add(runTimeout)
	for done.Load() < n {
		if time.Now().After(deadline) {
			return 0, 0, fmt.Errorf("timed out after %d of %d jobs", done.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
	return float64(top.Load()), n / time.Since(start).Seconds(), nil
}

// keysCost is the rate of n no-op jobs over 1,000 keys, and of the same
// jobs without keys, each drained by one holder of concurrency 10.
func keysCost(ctx context.Context, rdb *redis.Client, n int) (keyed, plain float64, err error) {
	rate := func(key func(int) string) (float64, error) {
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			return 0, err
		}
		const q = "keys-cost"
		if err := enqueueKeyed(ctx, rdb, q, n, key); err != nil {
			return 0, err
		}
		c := newCounter(n)
		start := time.Now()
		stop := runners(ctx, rdb, q, 1, 10, work.KeyCaps{}, work.HandlerFunc(func(context.Context, *work.Job) error { c.hit(); return nil }))
		defer stop()
		if err := c.wait(nil); err != nil {
			return 0, err
		}
		return float64(n) / c.at.Sub(start).Seconds(), nil
	}
	// Keyed, plain, plain, keyed: a machine that speeds up or slows down
	// during the run weighs on both alike. Each is the mean of its two.
	keys, none := func(i int) string { return fmt.Sprint("k", i%1000) }, func(int) string { return "" }
	var rates [4]float64
	for i, key := range []func(int) string{keys, none, none, keys} {
		if rates[i], err = rate(key); err != nil {
			return 0, 0, err
		}
	}
	return (rates[0] + rates[3]) / 2, (rates[1] + rates[2]) / 2, nil
}
