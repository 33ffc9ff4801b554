package main

import (
	"context"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// asynqRate runs an asynq server with a no-op handler over n tasks enqueued
// beforehand on the same Redis, and returns tasks per second from Start to
// the n-th handler return. asynq's own defaults apply except the queue name,
// the concurrency and a silent logger.
func asynqRate(ctx context.Context, srv *redisServer, conc, n int) (float64, error) {
	rdb := srv.Client(0)
	defer rdb.Close()
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		return 0, err
	}
	if err := asynqFill(rdb, n); err != nil {
		return 0, err
	}
	c := newCounter(n)
	h := asynq.HandlerFunc(func(context.Context, *asynq.Task) error { c.hit(); return nil })
	s := asynq.NewServerFromRedisClient(rdb, asynq.Config{
		Concurrency: conc,
		Queues:      map[string]int{"bench": 1},
		Logger:      quiet{},
		LogLevel:    asynq.FatalLevel,
	})
	errc := make(chan error, 1)
	start := time.Now()
	if err := s.Start(h); err != nil {
		return 0, fmt.Errorf("asynq start: %w", err)
	}
	err := c.wait(errc)
	s.Shutdown()
	if err != nil {
		return 0, err
	}
	info, err := asynq.NewInspectorFromRedisClient(rdb).GetQueueInfo("bench")
	if err != nil {
		return 0, fmt.Errorf("asynq queue info: %w", err)
	}
	if info.Pending+info.Active+info.Retry != 0 {
		return 0, fmt.Errorf("asynq queue not drained: %+v", info)
	}
	return float64(n) / c.at.Sub(start).Seconds(), nil
}

// asynqFill enqueues n plain tasks with asynq's client, from 8 goroutines.
func asynqFill(rdb redis.UniversalClient, n int) error { return asynqEnqueue(rdb, n, plainJobs) }

// quiet is an asynq.Logger that drops everything.
type quiet struct{}

func (quiet) Debug(...any) {}
func (quiet) Info(...any)  {}
func (quiet) Warn(...any)  {}
func (quiet) Error(...any) {}
func (quiet) Fatal(...any) {}
