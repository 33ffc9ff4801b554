package work

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// loseFedReply loses, once armed, the reply of the holder's next pipeline
// that reads fed jobs: the read of the jobs keys' turns fed to the stream
// (XREADGROUPs only), or the take script and the read sent with it. Redis
// runs it, the holder sees a broken connection.
type loseFedReply struct{ armed atomic.Bool }

func (*loseFedReply) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (*loseFedReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *loseFedReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		reads := 0
		for _, c := range cmds {
			switch c.Name() {
			case "xreadgroup":
				reads++
			case "evalsha":
			default:
				return next(ctx, cmds)
			}
		}
		if reads == 0 || !h.armed.CompareAndSwap(true, false) {
			return next(ctx, cmds)
		}
		if err := next(ctx, cmds); err != nil {
			return err
		}
		lost := errors.New("read tcp: connection reset by peer")
		for _, c := range cmds {
			switch c := c.(type) {
			case *redis.XStreamSliceCmd:
				c.SetVal(nil)
			case *redis.Cmd:
				c.SetVal(nil)
			}
			c.SetErr(lost)
		}
		return lost
	}
}

// The reply of the read of an uncapped key's fed jobs is lost: the jobs
// it delivered are pending for the holder's slot and never seen. The
// holder looks at its own pending entries after that error, as after any
// lost read, and runs them, each once, while it still holds the slot
// (not only when its next holder replays them). So for the read made
// after the take script (a cap on another key) and for the one sent with
// it (no caps: one round trip).
func TestKeyFedReadReplyLost(t *testing.T) {
	for name, caps := range map[string]KeyCaps{
		"after the script": {Limits: map[string]int{"other": 1}},
		"with the script":  {},
	} {
		t.Run(name, func(t *testing.T) {
			srv := redistest.Start(t)
			direct := srv.Client()
			ctx := context.Background()
			ids := enqueueKeyed(t, direct, "k", 3)
			if err := keyTakeScript.Load(ctx, direct).Err(); err != nil {
				t.Fatal(err)
			}
			rdb := srv.Client()
			h := &loseFedReply{}
			h.armed.Store(true)
			rdb.AddHook(h)
			var mu sync.Mutex
			ran := map[string]int{}
			c := testConfig(rdb, HandlerFunc(func(_ context.Context, j *Job) error {
				mu.Lock()
				ran[j.ID]++
				mu.Unlock()
				return nil
			}))
			c.KeyCaps = caps
			st := new(Stats)
			runUntil(t, c, st, func() bool { return st.Done.Load() == 3 })
			if h.armed.Load() {
				t.Fatal("no read of fed jobs was made")
			}
			for _, id := range ids {
				if ran[id] != 1 {
					t.Errorf("job %s ran %d times, want once", id, ran[id])
				}
			}
			levelsSettled(t, direct)
			keysClean(t, direct)
		})
	}
}

// A high keyed job waits for its turn in the high ring while the high
// stream does not exist yet (no high job ever ran): a holder without caps,
// which reads the normal stream in the same round trip as its take script,
// takes it before the normal backlog of jobs without a key, within a read
// or two; so too when Redis has not loaded the take script yet.
func TestKeyHighBeforeNormalBacklog(t *testing.T) {
	for _, loaded := range []bool{true, false} {
		t.Run(fmt.Sprint("script loaded ", loaded), func(t *testing.T) {
			rdb := redistest.Start(t).Client()
			ctx := context.Background()
			if err := EnsureGroup(ctx, rdb, KeysFor("q")); err != nil {
				t.Fatal(err)
			}
			if loaded {
				if err := keyTakeScript.Load(ctx, rdb).Err(); err != nil {
					t.Fatal(err)
				}
			}
			enqueue(t, rdb, "q", 600)
			high := enqueueKeyed(t, rdb, "k", 1, WithPriority(PriorityHigh))[0]
			var mu sync.Mutex
			at, n := -1, 0
			c := testConfig(rdb, HandlerFunc(func(_ context.Context, j *Job) error {
				mu.Lock()
				defer mu.Unlock()
				if j.ID == high {
					at = n
				}
				n++
				return nil
			}))
			c.Batch = 16
			st := new(Stats)
			runUntil(t, c, st, func() bool { return st.Done.Load() == 601 })
			if at < 0 || at > 3*c.Batch {
				t.Fatalf("the high keyed job ran as number %d of 601: after the normal backlog", at+1)
			}
			levelsSettled(t, rdb)
			keysClean(t, rdb)
		})
	}
}
