package work_test

import (
	"context"
	"fmt"
	"time"

	"github.com/baton-run/baton/work"
	"github.com/redis/go-redis/v9"
)

// Run drains a queue with a Go handler until the deadline; a nil error
// acknowledges the job, an error leaves it pending for the slot's next holder.
func ExampleRun() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	h := work.HandlerFunc(func(ctx context.Context, j *work.Job) error {
		fmt.Printf("job %s attempt %d: %s\n", j.ID, j.Attempt, j.Payload)
		return nil
	})
	err := work.Run(context.Background(), work.Config{
		Client: rdb, Queue: "thumbs", Consumer: "web1/run-0", Handler: h,
		Concurrency: 4, Deadline: time.Now().Add(5 * time.Minute),
	}, nil)
	if err != nil {
		fmt.Println(err)
	}
}
