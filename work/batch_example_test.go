package work_test

import (
	"context"
	"fmt"
	"time"

	"github.com/baton-run/baton/work"
	"github.com/redis/go-redis/v9"
)

// NewBatch fans out, Wait fans in: the producer enqueues members, closes the
// batch, and blocks until every member is done or dead; a holder (here
// work.Run in the same process) runs the members and then the callback,
// which gets the summary as Job.Batch.
func ExampleNewBatch() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleRedis})
	defer rdb.Close()

	b, err := work.NewBatch(ctx, rdb, "resize", work.BatchName("album-7"),
		work.BatchCallback([]byte("zip album-7"), ""))
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := b.Add(ctx, work.Message{Payload: []byte("1.jpg")}, work.Message{Payload: []byte("2.jpg")}); err != nil {
		fmt.Println(err)
		return
	}
	if err := b.Close(ctx); err != nil {
		fmt.Println(err)
		return
	}

	called := make(chan string, 1)
	run, stop := context.WithCancel(ctx)
	defer stop()
	go work.Run(run, work.Config{Client: rdb, Queue: "resize", Consumer: "example/run-0",
		Handler: work.HandlerFunc(func(ctx context.Context, j *work.Job) error {
			if j.Batch != nil { // the callback
				called <- fmt.Sprintf("callback %s: %d of %d done", j.Payload, j.Batch.Done, j.Batch.Total)
			}
			return nil
		}), Deadline: time.Now().Add(time.Minute)}, nil)

	sum, err := b.Wait(ctx) // blocks in Redis until the batch is complete
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(sum.Name, sum.Done, sum.Dead, sum.Success())
	fmt.Println(<-called)
	// Output:
	// album-7 2 0 true
	// callback zip album-7: 2 of 2 done
}
