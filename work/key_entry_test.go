package work

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// A producer's raw entry in the form the keys' take script writes (orig,
// record) whose record is not one array of field and value strings naming
// that same job is dead-lettered as malformed, its record kept as it was,
// never run and never a script error: nothing is left pending, and the jobs
// behind it run.
func TestKeyRecordEntryMalformed(t *testing.T) {
	bad := map[string]string{
		"not msgpack":    "\xff\x00zz",
		"a nil inside":   "\x94\xa7payload\xc0\xa1b\xa1c",
		"a map":          "\x82\xa7payload\xa1x\xa4orig\xa31-1",
		"empty":          "\x90",
		"two objects":    "\x94\xa7payload\xa1x\xa4orig\xa31-1\x92\xa1a\xa1b",
		"a number":       "\x94\xa7payload\x01\xa4orig\xa31-1",
		"another orig":   "\x94\xa7payload\xa1x\xa4orig\xa31-2",
		"no orig inside": "\x92\xa7payload\xa1x",
	}
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	if err := EnsureGroup(ctx, rdb, KeysFor("q")); err != nil {
		t.Fatal(err)
	}
	entries := map[string]string{} // entry id → its record
	for _, rec := range bad {
		id, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: KeysFor("q").Stream, Values: []any{"orig", "1-1", "record", rec}}).Result()
		if err != nil {
			t.Fatal(err)
		}
		entries[id] = rec
	}
	enqueue(t, rdb, "q", 3)
	st := new(Stats)
	c := testConfig(rdb, HandlerFunc(func(_ context.Context, j *Job) error {
		if string(j.Payload) == "x" {
			t.Errorf("a malformed record ran: %s", j.Entry)
		}
		return nil
	}))
	c.KeyCaps = KeyCaps{Default: 2}
	runUntil(t, c, st, func() bool { return st.Dead.Load() == int64(len(bad)) && st.Done.Load() == 3 })
	letters, err := ListDead(ctx, rdb, "q", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range letters {
		rec, ok := entries[d.Entry]
		if !ok || d.Reason != ReasonMalformed || d.Fields[recordField] != rec || len(d.Payload) != 0 {
			t.Errorf("dead letter %+v: want the entry's record kept, as malformed, no payload", d)
		}
		delete(entries, d.Entry)
	}
	if len(entries) > 0 {
		t.Errorf("entries with no dead letter: %q", entries)
	}
	settled(t, rdb, "q")
}

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

// A producer's entry in the record form with its fields the other way
// round (record, then orig) reads as the job it holds everywhere: its
// reader sees no field order, and its retry keeps its fields, so it runs
// again as the same job rather than as a malformed entry.
func TestKeyRecordEntryFieldOrder(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	if err := EnsureGroup(ctx, rdb, KeysFor("q")); err != nil {
		t.Fatal(err)
	}
	rec := "\x94\xa7payload\xa1p\xa4orig\xa31-1"
	if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: KeysFor("q").Stream, Values: []any{"record", rec, "orig", "1-1"}}).Err(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var runs []string
	c := testConfig(rdb, HandlerFunc(func(_ context.Context, j *Job) error {
		mu.Lock()
		defer mu.Unlock()
		runs = append(runs, fmt.Sprintf("%s %s %d", j.ID, j.Payload, j.Attempt))
		if j.Attempt == 1 {
			return errors.New("fails once")
		}
		return nil
	}))
	c.RetryBackoff, c.RetryBackoffMax = 10*time.Millisecond, 20*time.Millisecond
	st := new(Stats)
	runUntil(t, c, st, func() bool { return st.Done.Load()+st.Dead.Load() == 1 })
	mu.Lock()
	defer mu.Unlock()
	if st.Done.Load() != 1 || len(runs) != 2 || runs[0] != "1-1 p 1" || runs[1] != "1-1 p 2" {
		t.Fatalf("runs %q, done %d, dead %d; want job 1-1 run twice with payload p", runs, st.Done.Load(), st.Dead.Load())
	}
	settled(t, rdb, "q")
}
