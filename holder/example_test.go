package holder_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/baton-run/baton/holder"
	"github.com/baton-run/baton/internal/config"
	"github.com/baton-run/baton/lock"
	"github.com/baton-run/baton/work"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
)

// A program that won a slot holds it: the holder works the queue with its
// handler until the lifetime ends, then releases the slot.
func ExampleHolder_Hold() {
	ctx := context.Background()
	cfg := config.Default()
	cfg.Queue, cfg.Host = "example", "web1"
	cfg.RedisURL = "redis://" + redisAddr + "/0"
	cfg.LockDir, _ = os.MkdirTemp("", "baton-example-")
	defer os.RemoveAll(cfg.LockDir)
	cfg.StandbySlots, cfg.MinSlots = 0, 1
	cfg.Lifetime, cfg.Jitter = config.Duration{Duration: 300 * time.Millisecond}, config.Duration{}

	run, err := lock.NewFileSet(cfg.LockDir, cfg.Queue, lock.RoleRun, cfg.Slots)
	if err != nil {
		fmt.Println(err)
		return
	}
	slot, ok, err := run.TryAcquire()
	if err != nil || !ok {
		fmt.Println("no slot", err)
		return
	}
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	if _, err := work.Enqueue(ctx, rdb, cfg.Queue, []byte("/srv/img/1.jpg")); err != nil {
		fmt.Println(err)
		return
	}

	h := holder.New(holder.Options{Settings: &cfg, Run: run, Log: zerolog.Nop(),
		Handler: work.HandlerFunc(func(_ context.Context, j *work.Job) error {
			fmt.Printf("%s runs %s\n", j.Slot, j.Payload)
			return nil
		}),
		Hooks: holder.Hooks{Connect: func(context.Context) (redis.UniversalClient, error) {
			return redis.NewClient(&redis.Options{Addr: redisAddr}), nil
		}}})
	defer h.Close()
	if err := h.Hold(ctx, slot); err != nil {
		fmt.Println(err)
	}
	fmt.Println("lifetime over, slot released")
	// Output:
	// web1/run-0 runs /srv/img/1.jpg
	// lifetime over, slot released
}
