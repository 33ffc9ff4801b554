package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/baton-run/baton/work"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// The enqueue group: jobs per second a producer adds, baton's client against
// asynq's, with no options, with a unique key per job, delayed by an hour,
// and at high priority (for asynq, a queue of its own that its server
// weighs). baton sends 1,000 jobs per round trip (EnqueueMany, what `baton
// enqueue` does); asynq's client has no batch call, so it enqueues from 8
// goroutines, as asynqFill does. xadd_batch is the bare pipelined XADD that
// baton's enqueue was before it had options: the bar for the plain case,
// measured in turns with it (plainVsXadd).

// enqueueKind is one way of enqueueing.
type enqueueKind int

const (
	plainJobs enqueueKind = iota
	uniqueJobs
	delayedJobs
	highJobs // priority high; asynq's nearest is a queue of its own ("critical")
)

func (b *bench) enqueue(ctx context.Context) []contender {
	n := b.cfg.Jobs
	rate := func(f func() error) (float64, error) {
		rdb := b.srv.Client(0)
		defer rdb.Close()
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			return 0, err
		}
		start := time.Now()
		if err := f(); err != nil {
			return 0, err
		}
		return float64(n) / time.Since(start).Seconds(), nil
	}
	baton := func(k enqueueKind) func() (float64, error) {
		return func() (float64, error) { return rate(func() error { return batonEnqueue(ctx, b.srv, n, k) }) }
	}
	asq := func(k enqueueKind) func() (float64, error) {
		return func() (float64, error) {
			return rate(func() error {
				rdb := b.srv.Client(0)
				defer rdb.Close()
				return asynqEnqueue(rdb, n, k)
			})
		}
	}
	return []contender{
		{"asynq_enqueue_plain", "jobs/s", asq(plainJobs)},
		{"enqueue_unique", "jobs/s", baton(uniqueJobs)},
		{"asynq_enqueue_unique", "jobs/s", asq(uniqueJobs)},
		{"enqueue_in", "jobs/s", baton(delayedJobs)},
		{"asynq_enqueue_in", "jobs/s", asq(delayedJobs)},
		{"enqueue_priority", "jobs/s", baton(highJobs)},
		{"asynq_enqueue_priority", "jobs/s", asq(highJobs)},
	}
}

// enqueueChunk is how many jobs plain enqueue and the bare XADDs take in
// turns: one round trip each.
const enqueueChunk = 1000

// plainVsXadd measures enqueue_plain against its bar, xadd_batch, in
// alternating chunks of enqueueChunk jobs on one stream (which goes first
// alternates too), so that the load of a shared machine falls on both
// alike: two contenders run one after the other differed by more than the
// 10% at stake from one run to the next. A chunk is a few milliseconds, so
// one preemption can double it: each rate is from the median chunk. It
// returns both rates in jobs per second, over n jobs each.
func plainVsXadd(ctx context.Context, srv *redisServer, n int) (plain, xadd float64, err error) {
	rdb := srv.Client(0)
	defer rdb.Close()
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		return 0, 0, err
	}
	msgs := make([]work.Message, enqueueChunk)
	for i := range msgs {
		msgs[i] = work.Message{Payload: payload}
	}
	var tPlain, tXadd []time.Duration
	for done, turn := 0, 0; done < n; done, turn = done+enqueueChunk, turn+1 {
		for k := range 2 {
			start := time.Now()
			if (turn+k)%2 == 0 {
				if _, err := work.EnqueueMany(ctx, rdb, "bench", msgs); err != nil {
					return 0, 0, fmt.Errorf("baton enqueue: %w", err)
				}
				tPlain = append(tPlain, time.Since(start))
			} else {
				if err := addJobs(ctx, rdb, "bench", enqueueChunk, string(payload)); err != nil {
					return 0, 0, err
				}
				tXadd = append(tXadd, time.Since(start))
			}
		}
	}
	rate := func(d []time.Duration) float64 {
		slices.Sort(d)
		return enqueueChunk / d[len(d)/2].Seconds()
	}
	return rate(tPlain), rate(tXadd), nil
}

// batonEnqueue adds n jobs with work.EnqueueMany, 1,000 per call.
func batonEnqueue(ctx context.Context, srv *redisServer, n int, k enqueueKind) error {
	rdb := srv.Client(0)
	defer rdb.Close()
	msgs := make([]work.Message, 0, 1000)
	for done := 0; done < n; {
		msgs = msgs[:0]
		for i := done; i < min(done+1000, n); i++ {
			m := work.Message{Payload: payload}
			switch k {
			case uniqueJobs:
				m.Options = []work.Option{work.UniqueKey("job-" + strconv.Itoa(i))}
			case delayedJobs:
				m.Options = []work.Option{work.In(time.Hour)}
			case highJobs:
				m.Options = []work.Option{work.WithPriority(work.PriorityHigh)}
			}
			msgs = append(msgs, m)
		}
		if _, err := work.EnqueueMany(ctx, rdb, "bench", msgs); err != nil {
			return fmt.Errorf("baton enqueue: %w", err)
		}
		done += len(msgs)
	}
	return nil
}

// asynqEnqueue adds n tasks with asynq's client from 8 goroutines. Unique
// tasks differ by payload (asynq's uniqueness key is type, queue and payload).
func asynqEnqueue(rdb redis.UniversalClient, n int, k enqueueKind) error {
	cl := asynq.NewClientFromRedisClient(rdb)
	const workers = 8
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				opts := []asynq.Option{asynq.Queue("bench")}
				p := payload
				switch k {
				case uniqueJobs:
					p = []byte(string(payload) + strconv.Itoa(i))
					opts = append(opts, asynq.Unique(time.Hour))
				case delayedJobs:
					opts = append(opts, asynq.ProcessIn(time.Hour))
				case highJobs:
					opts = []asynq.Option{asynq.Queue("bench-critical")}
				}
				if _, err := cl.Enqueue(asynq.NewTask("noop", p), opts...); err != nil {
					mu.Lock()
					first = cmp.Or(first, fmt.Errorf("asynq enqueue: %w", err))
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}
