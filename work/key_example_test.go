package work_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/baton-run/baton/work"
	"github.com/redis/go-redis/v9"
)

// Key gives jobs a key: a holder runs at most the key's cap of them at
// once (KeyCaps; key_concurrency in baton's config), fleet-wide, and takes
// keys in turns.
func ExampleKey() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleRedis})
	defer rdb.Close()

	for _, customer := range []string{"customer-42", "customer-42", "customer-7"} {
		if _, err := work.Enqueue(ctx, rdb, "api-keys", []byte("refund"), work.Key(customer)); err != nil {
			fmt.Println(err)
			return
		}
	}
	var mu sync.Mutex
	done := map[string]int{}
	st := new(work.Stats)
	runCtx, cancel := context.WithCancel(ctx)
	go func() {
		for st.Done.Load() < 3 {
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
	}()
	_ = work.Run(runCtx, work.Config{Client: rdb, Queue: "api-keys", Consumer: "example/run-0", Concurrency: 4,
		KeyCaps: work.KeyCaps{Default: 5, Limits: map[string]int{"customer-7": 1}},
		Handler: work.HandlerFunc(func(_ context.Context, j *work.Job) error {
			mu.Lock()
			done[j.Key]++
			mu.Unlock()
			return nil
		})}, st)
	fmt.Println(done["customer-42"], done["customer-7"])

	// A bad key is refused before anything is sent.
	_, err := work.Enqueue(ctx, rdb, "api-keys", []byte("x"), work.Key("a{b"))
	fmt.Println(errors.Is(err, work.ErrBadKey))
	// Output:
	// 2 1
	// true
}
