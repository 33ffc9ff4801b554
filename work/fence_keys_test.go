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

// lapseOnFeed is a real lease's Holding whose renew deadline passes the
// moment the keys' take script has fed an uncapped key's jobs to the
// stream (the stream was empty before): a holder stopped between that
// script and its read of the fed jobs.
type lapseOnFeed struct {
	lock.Holding
	rdb *redis.Client
}

func (l *lapseOnFeed) HeldFor() time.Duration {
	if l.rdb.XLen(context.Background(), KeysFor("q").Stream).Val() > 0 {
		return 0
	}
	return l.Holding.HeldFor()
}

// The read of the jobs a key's turn fed (readFed) is a read like any other:
// a holder whose lease lapsed after the take script reads none of them,
// so they stay undelivered for whichever holder reads next, not pending,
// unseen, under the slot's consumer the next holder has already replayed.
func TestLapsedLeaseReadsNoFedJobs(t *testing.T) {
	// 2: the turn feeds them all, and no key waits any more.
	for _, n := range []int{6, 2} {
		t.Run(fmt.Sprint(n, " jobs"), func(t *testing.T) { lapseOnFeedRun(t, n) })
	}
}

func lapseOnFeedRun(t *testing.T, jobs int) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	sl := runLease(t, rdb)
	enqueueKeyed(t, rdb, "a", jobs)
	var ran atomic.Int64
	key, token := sl.Fence()
	c := testConfig(rdb, HandlerFunc(func(context.Context, *Job) error { ran.Add(1); return nil }))
	c.Consumer = "fleet/run-0"
	// A cap on another key: the take script's two steps, not the piped read.
	c.KeyCaps = KeyCaps{Limits: map[string]int{"other": 1}}
	c.Fence = &Fence{Key: key, Token: token, Held: &lapseOnFeed{Holding: sl.(lock.Holding), rdb: rdb}}
	runUntilLapsed(t, c, 15*time.Second)
	if n := ran.Load(); n != 0 {
		t.Errorf("%d jobs started with the lease lapsed", n)
	}
	fed := rdb.XLen(ctx, KeysFor("q").Stream).Val()
	if fed == 0 {
		t.Fatal("the take script fed nothing")
	}
	if n := pending(t, rdb, "q"); n != 0 {
		t.Errorf("%d of the %d fed jobs read by the lapsed holder (pending under the slot's consumer), want none: undelivered for any holder", n, fed)
	}
}
