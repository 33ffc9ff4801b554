package work_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/work"
	"github.com/redis/go-redis/v9"
)

// exampleRedis is a throwaway redis-server for the Examples that print.
var exampleRedis string

func TestMain(m *testing.M) {
	addr, stop, err := redistest.StartMain()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	exampleRedis = addr
	code := m.Run()
	stop()
	os.Exit(code)
}

// Enqueue adds a job and returns its id for life; options make it delayed,
// unique, or give it its own attempts and timeout.
func ExampleEnqueue() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleRedis})
	defer rdb.Close()

	id, err := work.Enqueue(ctx, rdb, "thumbs", []byte("/srv/img/1.jpg"),
		work.UniqueKey("img-1"), work.In(10*time.Minute), work.MaxAttempts(3))
	if err != nil {
		fmt.Println(err)
		return
	}
	// The same unique key again: nothing is added, the first job's id comes back.
	again, err := work.Enqueue(ctx, rdb, "thumbs", []byte("/srv/img/1.jpg"), work.UniqueKey("img-1"))
	fmt.Println(errors.Is(err, work.ErrDuplicate), again == id)
	// Output: true true
}

// EnqueueMany sends many jobs in one round trip; a bad option adds none.
func ExampleEnqueueMany() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleRedis})
	defer rdb.Close()

	ids, err := work.EnqueueMany(ctx, rdb, "mail", []work.Message{
		{Payload: []byte(`{"to":"a@example.com"}`)},
		{Payload: []byte(`{"to":"b@example.com"}`), Options: []work.Option{work.Timeout(30 * time.Second)}},
	})
	fmt.Println(len(ids), err)

	_, err = work.EnqueueMany(ctx, rdb, "mail", []work.Message{
		{Payload: []byte("fine")},
		{Payload: []byte("bad"), Options: []work.Option{work.In(-time.Minute)}},
	})
	fmt.Println(err)
	// Output:
	// 2 <nil>
	// job 2: bad job option: delay -1m0s is negative
}

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

// A Go handler hands back a result with SetResult and reports progress
// with Progress, from the context it was given; a producer blocks on Wait
// until the job is done (or dead), and Result reads the result later, for
// the queue's retention.
func ExampleWait() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleRedis})
	defer rdb.Close()

	id, err := work.Enqueue(ctx, rdb, "resize", []byte("/srv/img/2.jpg"))
	if err != nil {
		fmt.Println(err)
		return
	}
	h := work.HandlerFunc(func(ctx context.Context, j *work.Job) error {
		_ = work.Progress(ctx, 50, "resizing") // shown by baton job and status
		return work.SetResult(ctx, []byte("/srv/thumbs/2.jpg"))
	})
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error)
	go func() {
		ran <- work.Run(runCtx, work.Config{Client: rdb, Queue: "resize", Consumer: "web1/run-0", Handler: h,
			Retention: time.Hour}, nil)
	}()
	defer func() { stop(); <-ran }()

	res, err := work.Wait(ctx, rdb, "resize", id) // blocks until done or dead
	fmt.Printf("%s %v\n", res, err)
	again, err := work.Result(ctx, rdb, "resize", id)
	fmt.Printf("%s %v\n", again, err)
	// Output:
	// /srv/thumbs/2.jpg <nil>
	// /srv/thumbs/2.jpg <nil>
}

// Wait of a job that was dead-lettered returns a *DeadError with its
// reason; a cancelled job's matches ErrCancelled.
func ExampleDeadError() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleRedis})
	defer rdb.Close()

	id, _ := work.Enqueue(ctx, rdb, "reports", []byte("q3"))
	_, _ = work.CancelWith(ctx, rdb, "reports", work.CancelOptions{Reason: "wrong quarter"}, id)

	_, err := work.Wait(ctx, rdb, "reports", id)
	var dead *work.DeadError
	fmt.Println(errors.Is(err, work.ErrCancelled), errors.As(err, &dead) && dead.Reason == work.ReasonCancelled, dead.Err)
	// Output: true true wrong quarter
}
