package work

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/lock"
	"github.com/redis/go-redis/v9"
)

// The read of the key streams a turn named (readFed) is a read like any
// other: a holder whose lease lapsed after the take script reads none of
// them, so they stay undelivered for whichever holder reads next, not
// pending, unseen, under the slot's consumer the next holder has already
// replayed.
func TestLapsedLeaseReadsNoFedJobs(t *testing.T) {
	// 2: the turn names them all.
	for _, n := range []int{6, 2} {
		t.Run(fmt.Sprint(n, " jobs"), func(t *testing.T) { lapseAfterTakeRun(t, n) })
	}
}

func lapseAfterTakeRun(t *testing.T, jobs int) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	ctx := context.Background()
	sl := runLease(t, rdb)
	enqueueKeyed(t, rdb, "a", jobs)
	if err := fenced[keyTakeScript].Load(ctx, rdb).Err(); err != nil { // EVALSHA: the hook knows it
		t.Fatal(err)
	}
	var ran atomic.Int64
	key, token := sl.Fence()
	// lapses once the keys' take script has run
	held := &lapsing{Holding: sl.(lock.Holding), on: func(c redis.Cmder) bool {
		a := c.Args()
		return c.Err() == nil && len(a) > 1 && a[1] == fenced[keyTakeScript].Hash()
	}}
	hooked := srv.Client()
	hooked.AddHook(held)
	c := testConfig(hooked, HandlerFunc(func(context.Context, *Job) error { ran.Add(1); return nil }))
	c.Consumer = "fleet/run-0"
	// A cap on another key: the take script's two steps, not the piped read.
	c.KeyCaps = KeyCaps{Limits: map[string]int{"other": 1}}
	c.Fence = &Fence{Key: key, Token: token, Held: held}
	runUntilLapsed(t, c, 15*time.Second)
	if !held.lapsed.Load() {
		t.Fatal("no take script ran")
	}
	if n := ran.Load(); n != 0 {
		t.Errorf("%d jobs started with the lease lapsed", n)
	}
	if n := keyPending(t, rdb, "q"); n != 0 {
		t.Errorf("%d of key a's jobs read by the lapsed holder (pending under the slot's consumer), want none: undelivered for any holder", n)
	}
	if n := rdb.XLen(ctx, KeysFor("q").KeyStream(PriorityNormal, "a")).Val(); n != int64(jobs) {
		t.Errorf("key a's stream holds %d entries, want its %d jobs", n, jobs)
	}
}

// A holder whose lease Redis says is another's (its token is not the
// lease's) while its own clock still says held: the take script refuses
// (FENCED) before it reads a capped key's jobs, and the holder stops as
// when its lease lapses. Nothing is read, nothing pending.
func TestKeyTakeFenced(t *testing.T) {
	rdb := redistest.Start(t).Client()
	sl := runLease(t, rdb)
	enqueueKeyed(t, rdb, "a", 3)
	var ran atomic.Int64
	key, token := sl.Fence()
	c := testConfig(rdb, HandlerFunc(func(context.Context, *Job) error { ran.Add(1); return nil }))
	c.Consumer = "fleet/run-0"
	c.KeyCaps = KeyCaps{Default: 2}
	c.Fence = &Fence{Key: key, Token: token + 1, Held: sl.(lock.Holding)}
	runUntilLapsed(t, c, 15*time.Second)
	if n := ran.Load(); n != 0 {
		t.Errorf("%d jobs started by a fenced holder", n)
	}
	if n := keyPending(t, rdb, "q"); n != 0 {
		t.Errorf("%d of key a's jobs read by a fenced holder, want none", n)
	}
}
