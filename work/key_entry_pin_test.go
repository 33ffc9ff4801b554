package work

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/redistest"
)

// A holder killed right after its take script (before it read the key
// streams the script named) leaves an uncapped key's jobs undelivered in
// their stream, the key in the ring, and a capped key's job pending for its
// slot, counting against the cap. Another holder runs the uncapped key's
// jobs, each once; the capped key stays at its cap (the dead holder's entry
// counts) until the slot's next holder replays that job. And when the
// killed holder capped nothing (a config change between holders), its turn
// read nothing: the other holder runs every job, the key it caps under its
// cap, none lost.
func TestKeyFedEntriesOutliveTheirHolder(t *testing.T) {
	for name, killed := range map[string]KeyCaps{
		"same caps":     {Default: 0, Limits: map[string]int{"c": 1}},
		"no caps there": {},
	} {
		t.Run(name, func(t *testing.T) {
			rdb := redistest.Start(t).Client()
			ctx := context.Background()
			k := KeysFor("q")
			if err := EnsureGroup(ctx, rdb, k); err != nil {
				t.Fatal(err)
			}
			ids := append(enqueueKeyed(t, rdb, "u", 6), enqueueKeyed(t, rdb, "c", 3)...)
			// the killed holder's take script, never followed by its read
			keys := []string{k.High, k.Stream, k.Low, k.KeyRing(PriorityHigh), k.KeyRing(PriorityNormal), k.KeyRing(PriorityLow), k.KeyJobs()}
			if err := keyTakeScript.Run(ctx, rdb, keys, Group, "h/run-9", 10, k.keyBase(), killed.Default, packLimits(killed.Limits), "").Err(); err != nil {
				t.Fatal(err)
			}
			left := keyPending(t, rdb, "q") // the capped job, pending for h/run-9
			if want := int64(len(killed.Limits)); left != want {
				t.Fatalf("%d entries pending after the take script, want %d", left, want)
			}
			var cc capCounter
			if left == 1 {
				cc.enter("c") // running, as far as anyone knows, till replayed
			}
			var mu sync.Mutex
			ran := map[string]int{}
			replayed := make(chan struct{})
			h := func(slot string) Handler {
				return HandlerFunc(func(_ context.Context, j *Job) error {
					if j.Key == "c" && slot == "h/run-9" && j.Attempt > 1 {
						cc.leave("c") // the killed holder's job, replayed: the same run
						close(replayed)
					}
					cc.enter(j.Key)
					defer cc.leave(j.Key)
					time.Sleep(5 * time.Millisecond)
					mu.Lock()
					ran[j.ID]++
					mu.Unlock()
					return nil
				})
			}
			caps := KeyCaps{Default: 0, Limits: map[string]int{"c": 1}}
			c := testConfig(rdb, h("h/run-0"))
			c.Concurrency, c.KeyCaps = 4, caps
			st := runFor(t, c)
			if left == 0 {
				waitFor(t, "the other holder runs every job", func() bool { return st.Done.Load() == int64(len(ids)) })
			} else {
				// key c at its cap meanwhile: only u's jobs run
				waitFor(t, "the other holder runs u's jobs", func() bool { return st.Done.Load() == 6 })
				z := testConfig(rdb, h("h/run-9"))
				z.Consumer, z.KeyCaps = "h/run-9", caps
				zs := runFor(t, z)
				waitFor(t, "the slot's next holder replays its job, then c's others run", func() bool {
					return st.Done.Load()+zs.Done.Load() == int64(len(ids))
				})
				select {
				case <-replayed:
				case <-time.After(time.Second):
					t.Error("the killed holder's job was not replayed by its slot")
				}
			}
			mu.Lock()
			defer mu.Unlock()
			for _, id := range ids {
				if ran[id] != 1 {
					t.Errorf("job %s ran %d times, want once", id, ran[id])
				}
			}
			if cc.most["c"] > 1 {
				t.Errorf("%d jobs of key c at once, cap 1", cc.most["c"])
			}
			levelsSettled(t, rdb)
			keysClean(t, rdb)
		})
	}
}

// A holder that leaves gives back the jobs it read and never started, an
// uncapped key's and a capped key's alike: to the level's stream, with
// their own fields, and the next holder runs each once (parked first), a
// capped key under its cap.
func TestKeyEntriesGivenBack(t *testing.T) {
	for _, key := range []string{"c", "u"} {
		t.Run(key, func(t *testing.T) {
			rdb := redistest.Start(t).Client()
			ctx := context.Background()
			ids := enqueueKeyed(t, rdb, key, 10)
			var cc capCounter
			var mu sync.Mutex
			ran := map[string]int{}
			started := make(chan struct{}, 1)
			release := make(chan struct{})
			caps := KeyCaps{Limits: map[string]int{"c": 3}}
			h := func(first bool) Handler {
				return HandlerFunc(func(_ context.Context, j *Job) error {
					cc.enter(j.Key)
					defer cc.leave(j.Key)
					if !strings.HasPrefix(string(j.Payload), j.Key+"-") {
						t.Errorf("job %s of key %q has payload %q", j.ID, j.Key, j.Payload)
					}
					if first {
						select {
						case started <- struct{}{}:
						default:
						}
						<-release
					}
					mu.Lock()
					ran[j.ID]++
					mu.Unlock()
					return nil
				})
			}
			c := testConfig(rdb, h(true))
			c.Concurrency, c.KeyCaps = 1, caps
			runCtx, cancel := context.WithCancel(ctx)
			errc := make(chan error, 1)
			go func() { errc <- Run(runCtx, c, nil) }()
			<-started
			// one running, one read ahead
			waitFor(t, "the holder read more than it runs", func() bool { return keyPending(t, rdb, "q") >= 2 })
			cancel() // leave: what was read and not started goes back
			close(release)
			if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
				t.Fatal(err)
			}
			// Given back to the level's stream (parked from there into the
			// key's stream by the next reader), with the job's own fields.
			back, err := rdb.XRange(ctx, KeysFor("q").Stream, "-", "+").Result()
			if err != nil {
				t.Fatal(err)
			}
			// (or, read as the holder left, run, or pending for the slot's
			// next holder in the key's stream)
			mu.Lock()
			left := len(ids) - len(ran)
			mu.Unlock()
			if n := rdb.XLen(ctx, KeysFor("q").KeyStream(PriorityNormal, key)).Val(); len(back)+int(n) != left {
				t.Errorf("%d entries given back, %d in the key's stream; want %d in all", len(back), n, left)
			}
			for _, m := range back {
				if p, _ := m.Values[PayloadField].(string); !strings.HasPrefix(p, key+"-") || m.Values[keyField] != key {
					t.Errorf("given back as %v; want the job's own fields", m.Values)
				}
			}
			c = testConfig(rdb, h(false))
			c.Concurrency, c.KeyCaps = 4, caps
			st := new(Stats)
			runUntil(t, c, st, func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(ran) == len(ids)
			})
			mu.Lock()
			defer mu.Unlock()
			for _, id := range ids {
				if ran[id] != 1 {
					t.Errorf("job %s ran %d times, want once", id, ran[id])
				}
			}
			if cc.most["c"] > 3 {
				t.Errorf("%d jobs of key c at once, cap 3", cc.most["c"])
			}
			levelsSettled(t, rdb)
			keysClean(t, rdb)
		})
	}
}
