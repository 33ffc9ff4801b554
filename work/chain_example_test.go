package work_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/baton-run/baton/work"
	"github.com/redis/go-redis/v9"
)

// After chains jobs: "build" waits, blocked, until "fetch" is done, and
// "ship" until both "build" and "test" are; a job that is not on the queue
// is refused before anything is added.
func ExampleAfter() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleRedis})
	defer rdb.Close()

	fetch, _ := work.Enqueue(ctx, rdb, "ci", []byte("fetch"))
	build, _ := work.Enqueue(ctx, rdb, "ci", []byte("build"), work.After(fetch))
	test, _ := work.Enqueue(ctx, rdb, "ci", []byte("test"), work.After(fetch))
	ship, _ := work.Enqueue(ctx, rdb, "ci", []byte("ship"), work.After(build, test))

	loc, _ := work.Locate(ctx, rdb, "ci", ship)
	fmt.Println(loc.State, len(loc.WaitingFor))
	_, err := work.Enqueue(ctx, rdb, "ci", []byte("late"), work.After("1-0"))
	fmt.Println(errors.Is(err, work.ErrNoDependency))
	// Output:
	// blocked 2
	// true
}

// AfterIn chains a job to a job of another queue, which may live on
// another Redis Cluster node: "ship" of queue deploy waits for "compile"
// of queue build; a holder of build releases it once compile is done.
func ExampleAfterIn() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleRedis})
	defer rdb.Close()

	compile, _ := work.Enqueue(ctx, rdb, "build", []byte("compile"))
	ship, _ := work.Enqueue(ctx, rdb, "deploy", []byte("ship"), work.AfterIn("build", compile))

	loc, _ := work.Locate(ctx, rdb, "deploy", ship)
	fmt.Println(loc.State, loc.WaitingFor[0] == "build:"+compile)
	// Output:
	// blocked true
}
