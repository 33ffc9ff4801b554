package work

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// enqueueKeyed enqueues n jobs of key k, payload "<k>-<i>".
func enqueueKeyed(tb testing.TB, rdb *redis.Client, k string, n int, opts ...Option) []string {
	tb.Helper()
	msgs := make([]Message, n)
	for i := range msgs {
		msgs[i] = Message{Payload: fmt.Appendf(nil, "%s-%d", k, i), Options: append([]Option{Key(k)}, opts...)}
	}
	ids, err := EnqueueMany(context.Background(), rdb, "q", msgs)
	if err != nil {
		tb.Fatal(err)
	}
	return ids
}

// keysClean asserts that nothing of keys is left once every job is done:
// no key stream, index entry or set of them (an idle key costs nothing).
// A ring may still name a key whose stream is gone: the next turn drops
// it, as a holder's next read does (the holders here have stopped).
func keysClean(tb testing.TB, rdb *redis.Client) {
	tb.Helper()
	ctx := context.Background()
	k := KeysFor("q")
	rings := map[string]bool{}
	for _, p := range readOrder {
		rings[k.KeyRing(p)], rings[k.keyRingIn(p)] = true, true
	}
	// Index entries are dropped with the holder's next read or as it leaves.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var left []string
		keys, _ := rdb.Keys(ctx, k.keyBase()+"*").Result()
		for _, n := range keys {
			if !rings[n] {
				left = append(left, n)
			}
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			tb.Fatalf("keys left behind: %v", left)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// keyPending counts the entries pending in queue q's key streams.
func keyPending(tb testing.TB, rdb *redis.Client, q string) int64 {
	tb.Helper()
	ctx := context.Background()
	var n int64
	for _, s := range rdb.SMembers(ctx, KeysFor(q).KeyStreams()).Val() {
		p, err := rdb.XPending(ctx, s, Group).Result()
		if err != nil {
			tb.Fatal(err)
		}
		n += p.Count
	}
	return n
}

// capCounter counts running jobs by key, the most ever seen at once.
type capCounter struct {
	mu      sync.Mutex
	running map[string]int
	most    map[string]int
}

func (c *capCounter) enter(k string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running == nil {
		c.running, c.most = map[string]int{}, map[string]int{}
	}
	c.running[k]++
	c.most[k] = max(c.most[k], c.running[k])
}

func (c *capCounter) leave(k string) {
	c.mu.Lock()
	c.running[k]--
	c.mu.Unlock()
}

// At most key_concurrency jobs of a key run at once across holders (here
// three runners of concurrency 4, one Redis), a key_limits override
// holds too, and every job runs once with its key.
func TestKeyCapAcrossHolders(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ids := map[string]bool{}
	for _, k := range []string{"a", "b", "tight"} {
		for _, id := range enqueueKeyed(t, rdb, k, 40) {
			ids[id] = true
		}
	}
	var cc capCounter
	var done atomic.Int64
	var mu sync.Mutex
	ran := map[string]int{}
	h := HandlerFunc(func(_ context.Context, j *Job) error {
		cc.enter(j.Key)
		defer cc.leave(j.Key)
		if !strings.HasPrefix(string(j.Payload), j.Key+"-") {
			t.Errorf("job %s of key %q has payload %q", j.ID, j.Key, j.Payload)
		}
		time.Sleep(5 * time.Millisecond)
		mu.Lock()
		ran[j.ID]++
		mu.Unlock()
		done.Add(1)
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range 3 {
		c := testConfig(rdb, h)
		c.Consumer = fmt.Sprintf("h/run-%d", i)
		c.Concurrency = 4
		c.KeyCaps = KeyCaps{Default: 3, Limits: map[string]int{"tight": 1}}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := Run(ctx, c, nil); err != nil && !errors.Is(err, context.Canceled) {
				t.Error(err)
			}
		}()
	}
	waitWithin(t, 30*time.Second, func() bool { return done.Load() >= 120 })
	cancel()
	wg.Wait()
	for id := range ids {
		if ran[id] != 1 {
			t.Errorf("job %s ran %d times", id, ran[id])
		}
	}
	if cc.most["a"] > 3 || cc.most["b"] > 3 || cc.most["tight"] > 1 {
		t.Fatalf("most running at once: %v; want a, b ≤ 3, tight ≤ 1", cc.most)
	}
	if cc.most["a"] < 2 {
		t.Errorf("key a never ran more than %d at once: the cap is not used", cc.most["a"])
	}
	levelsSettled(t, rdb)
	keysClean(t, rdb)
}

// waitWithin polls cond until it holds or d passes.
func waitWithin(tb testing.TB, d time.Duration, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("condition not reached in %s", d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Keys take turns: a key that enqueues a few jobs behind another key's
// backlog has them run long before the backlog is drained.
func TestKeyFairTurns(t *testing.T) {
	rdb := redistest.Start(t).Client()
	enqueueKeyed(t, rdb, "big", 2000)
	enqueueKeyed(t, rdb, "small", 20)
	var mu sync.Mutex
	var order []string
	st := new(Stats)
	c := testConfig(rdb, HandlerFunc(func(_ context.Context, j *Job) error {
		mu.Lock()
		order = append(order, j.Key)
		mu.Unlock()
		return nil
	}))
	runUntil(t, c, st, func() bool { return st.Done.Load() == 2020 })
	last := 0
	for i, k := range order {
		if k == "small" {
			last = i
		}
	}
	// Turns: the 20 small jobs alternate with big ones, all within the
	// first ~40 runs plus a read batch (128) of slack.
	if last > 40+128 {
		t.Fatalf("small's last job ran as number %d of %d: no fair turns", last+1, len(order))
	}
	levelsSettled(t, rdb)
	keysClean(t, rdb)
}

// A key's cap counts its running jobs of every level: with jobs of one key
// waiting at high, normal and low priority, and holders with room for
// many, at most the cap run at once (not the cap per level).
func TestKeyCapAcrossLevels(t *testing.T) {
	rdb := redistest.Start(t).Client()
	var n int
	for _, p := range []Priority{PriorityHigh, PriorityNormal, PriorityLow} {
		n += len(enqueueKeyed(t, rdb, "k", 15, WithPriority(p)))
	}
	var cc capCounter
	var done atomic.Int64
	h := HandlerFunc(func(_ context.Context, j *Job) error {
		cc.enter(j.Key)
		defer cc.leave(j.Key)
		time.Sleep(10 * time.Millisecond)
		done.Add(1)
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range 2 {
		c := testConfig(rdb, h)
		c.Consumer = fmt.Sprintf("h/run-%d", i)
		c.Concurrency = 8
		c.KeyCaps = KeyCaps{Default: 2}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := Run(ctx, c, nil); err != nil && !errors.Is(err, context.Canceled) {
				t.Error(err)
			}
		}()
	}
	waitWithin(t, 30*time.Second, func() bool { return done.Load() >= int64(n) })
	cancel()
	wg.Wait()
	if cc.most["k"] > 2 {
		t.Fatalf("%d jobs of key k at once across its levels, cap 2", cc.most["k"])
	}
	levelsSettled(t, rdb)
	keysClean(t, rdb)
}

// The ack of a key stream's entries trims them (XTRIM MINID), and deletes
// exactly them: an older entry still running stays, and so do the entries
// not yet delivered; once nothing is left, the stream and its place in the
// set of key streams go.
func TestKeyAckTrimsOnlyAcknowledged(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	k := KeysFor("q")
	s := k.KeyStream(PriorityNormal, "a")
	ids := enqueueKeyed(t, rdb, "a", 6)
	if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: Group, Consumer: "c", Streams: []string{s, ">"}, Count: 5}).Err(); err != nil {
		t.Fatal(err)
	}
	ack := func(entries ...string) {
		t.Helper()
		args := []any{Group, len(entries), 0, 0, 0}
		for _, e := range entries {
			args = append(args, e)
		}
		if err := runScript(ctx, rdb, ackScript, []string{s, k.Stats, k.Done, k.Waiters, k.Results}, args...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	left := func() []string {
		var out []string
		for _, m := range rdb.XRange(ctx, s, "-", "+").Val() {
			out = append(out, m.ID)
		}
		return out
	}
	ack(ids[1], ids[3], ids[4]) // ids[0] and ids[2] still running, ids[5] waiting
	if got, want := left(), []string{ids[0], ids[2], ids[5]}; !slices.Equal(got, want) {
		t.Fatalf("entries left %v, want %v", got, want)
	}
	ack(ids[0])
	if got, want := left(), []string{ids[2], ids[5]}; !slices.Equal(got, want) {
		t.Fatalf("entries left %v, want %v", got, want)
	}
	ack(ids[2])
	if got, want := left(), []string{ids[5]}; !slices.Equal(got, want) {
		t.Fatalf("entries left %v, want %v", got, want)
	}
	if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: Group, Consumer: "c", Streams: []string{s, ">"}, Count: 5}).Err(); err != nil {
		t.Fatal(err)
	}
	ack(ids[5])
	if n := rdb.Exists(ctx, s).Val(); n != 0 {
		t.Errorf("the emptied key stream still exists (%v)", left())
	}
	if rdb.SIsMember(ctx, k.KeyStreams(), s).Val() {
		t.Error("the deleted key stream is still in the set of key streams")
	}
}
