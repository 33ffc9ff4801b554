package work

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/lock"
	"github.com/redis/go-redis/v9"
)

// A read of several key streams fails NOGROUP (one was deleted since its
// turn) and the lease lapses before the streams are read again one by one:
// the holder reads none of them (as thenFed, which asks the lease before
// its read), so their jobs stay undelivered for whichever holder reads
// next, not pending, unseen, under the slot's consumer, which the slot's
// next holder has replayed already.
func TestKeyFedRereadAsksTheLease(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	ctx := context.Background()
	sl := runLease(t, rdb)
	k := KeysFor("q")
	enqueueKeyed(t, rdb, "a", 3)
	// lapses once a read of several key streams failed NOGROUP:
	// XREADGROUP GROUP g c COUNT n STREAMS s1 s2 > >
	held := &lapsing{Holding: sl.(lock.Holding), piped: true, on: func(c redis.Cmder) bool {
		return len(c.Args()) >= 11 && c.Args()[0] == "xreadgroup" && isNoGroup(c.Err())
	}}
	hooked := srv.Client()
	hooked.AddHook(held)
	r := &runner{keys: k, c: Config{Client: hooked, Consumer: "fleet/run-0", Queue: "q"}, held: held, stopped: make(chan struct{})}
	jobs, err := r.readFed(ctx, []any{k.KeyStream(PriorityNormal, "gone"), int64(2), k.KeyStream(PriorityNormal, "a"), int64(2)})
	if !held.lapsed.Load() {
		t.Fatal("the read of both streams did not fail NOGROUP")
	}
	if err != nil || len(jobs) != 0 {
		t.Errorf("read %d jobs, error %v; want none, no error", len(jobs), err)
	}
	if n := keyPending(t, rdb, "q"); n != 0 {
		t.Errorf("%d of key a's jobs read after the lease lapsed (pending under the slot's consumer), want none", n)
	}
	if !r.draining() {
		t.Error("the holder goes on reading: want it stopped, as at any lapse")
	}
}

// As TestKeyFedRereadAsksTheLease, but Redis is who says the lease is
// another's: the take script sent with the read refuses (FENCED). The
// streams of the read that failed NOGROUP are not read again: what a
// holder reads once fenced stays pending, unseen, under the slot's
// consumer.
func TestKeyFedRereadNotWhenFenced(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	sl := runLease(t, rdb)
	k := KeysFor("q")
	enqueueKeyed(t, rdb, "a", 3)
	if err := rdb.XGroupCreate(ctx, k.Stream, Group, "0").Err(); err != nil { // as a holder's start makes it
		t.Fatal(err)
	}
	if err := fenced[keyTakeScript].Load(ctx, rdb).Err(); err != nil {
		t.Fatal(err)
	}
	key, token := sl.Fence()
	held := sl.(lock.Holding)
	c := Config{Client: rdb, Consumer: "fleet/run-0", Queue: "q", Fence: &Fence{Key: key, Token: token + 1, Held: held}}
	r := &runner{keys: k, c: c, fence: token + 1, held: held, stopped: make(chan struct{})}
	plan := []any{k.KeyStream(PriorityNormal, "gone"), int64(2), k.KeyStream(PriorityNormal, "a"), int64(2)}
	jobs, _, _, _, err := r.takePipedOnce(ctx, 32, 32, plan)
	if err != nil || len(jobs) != 0 {
		t.Errorf("read %d jobs, error %v; want none, no error", len(jobs), err)
	}
	if !r.draining() {
		t.Error("a fenced holder goes on reading")
	}
	if n := keyPending(t, rdb, "q"); n != 0 {
		t.Errorf("%d of key a's jobs read by a fenced holder (pending under the slot's consumer), want none", n)
	}
}

// readAfterFirstTake is a go-redis hook: once the first piped take's
// round trip is back, another holder (consumer "other") reads streams
// meanwhile.
type readAfterFirstTake struct {
	other   *redis.Client
	streams []string
	done    atomic.Bool
}

func (h *readAfterFirstTake) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *readAfterFirstTake) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *readAfterFirstTake) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if len(cmds) > 0 && cmds[0].Args()[0] == "evalsha" && h.done.CompareAndSwap(false, true) {
			for _, s := range h.streams {
				h.other.XReadGroup(ctx, &redis.XReadGroupArgs{Group: Group, Consumer: "other", Streams: []string{s, ">"}, Count: 1, Block: -1})
			}
		}
		return err
	}
}

// The keys a take named are read by another holder before this one reads
// them, and the next take finds only drained keys: it is sent again at
// once (a sweep), and what it names then is read in the same read too,
// not after keyPoll: key z's jobs come with this one read.
func TestKeySweepAfterPlanReadEmpty(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	ctx := context.Background()
	k := KeysFor("q")
	hook := &readAfterFirstTake{other: rdb}
	for i := range 5 {
		key := "a" + strconv.Itoa(i)
		enqueueKeyed(t, rdb, key, 1)
		hook.streams = append(hook.streams, k.KeyStream(PriorityNormal, key))
	}
	for i := range 150 { // keys drained: no stream, still in the ring
		rdb.RPush(ctx, k.KeyRing(PriorityNormal), "d"+strconv.Itoa(i))
		rdb.SAdd(ctx, k.keyRingIn(PriorityNormal), "d"+strconv.Itoa(i))
	}
	ids := enqueueKeyed(t, rdb, "z", 5)
	if err := rdb.XGroupCreate(ctx, k.Stream, Group, "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := keyTakeScript.Load(ctx, rdb).Err(); err != nil {
		t.Fatal(err)
	}
	hooked := srv.Client()
	hooked.AddHook(hook)
	r := &runner{keys: k, c: Config{Client: hooked, Consumer: "h/run-0", Queue: "q"}, stopped: make(chan struct{})}
	jobs, _, _, err := r.takePiped(ctx, 32)
	if !hook.done.Load() {
		t.Fatal("no piped take ran")
	}
	if err != nil || len(jobs) != len(ids) {
		t.Fatalf("read %d jobs, %v; want z's %d", len(jobs), err, len(ids))
	}
}
