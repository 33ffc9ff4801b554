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

// The holder's side of key streams (a keyed job lives in its key's own
// stream): entries put there by hand, as enqueue writes them, and left
// pending as a killed holder leaves them; the reads of key streams in
// normal operation are key_read.go's.

var keyStreamSeq atomic.Int64

// putKeyStream adds one entry per payload to key's stream at level p, as
// enqueue writes a keyed job there (its fields, orig = its job id, the
// entry under that id; the group made at id 0 with the stream; the stream
// in KeyStreams), and with consumer != "" reads them as that consumer:
// pending. fields, when set, replace the key field (nil: key = key).
// Returns the job ids.
func putKeyStream(tb testing.TB, rdb *redis.Client, q string, p Priority, key, consumer string, fields []any, payloads ...string) []string {
	tb.Helper()
	ctx := context.Background()
	k := KeysFor(q)
	s := k.KeyStream(p, key)
	if err := rdb.XGroupCreateMkStream(ctx, s, Group, "0").Err(); err != nil && err.Error() != "BUSYGROUP Consumer Group name already exists" {
		tb.Fatal(err)
	}
	if err := rdb.SAdd(ctx, k.KeyStreams(), s).Err(); err != nil {
		tb.Fatal(err)
	}
	var ids []string
	for _, pl := range payloads {
		id := fmt.Sprintf("1700000000000-%d", keyStreamSeq.Add(1))
		v := []any{PayloadField, pl}
		if fields == nil {
			v = append(v, keyField, key)
		} else {
			v = append(v, fields...)
		}
		if p != PriorityNormal {
			v = append(v, priorityField, p.String())
		}
		v = append(v, jobField, id)
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: s, ID: id, Values: v}).Err(); err != nil {
			tb.Fatal(err)
		}
		ids = append(ids, id)
	}
	if consumer != "" {
		if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: Group, Consumer: consumer, Streams: []string{s, ">"}, Count: int64(len(ids))}).Err(); err != nil {
			tb.Fatal(err)
		}
	}
	return ids
}

// keyStreamGone asserts key's stream is deleted and out of KeyStreams.
func keyStreamGone(tb testing.TB, rdb *redis.Client, q string, p Priority, key string) {
	tb.Helper()
	ctx := context.Background()
	k := KeysFor(q)
	if n := rdb.Exists(ctx, k.KeyStream(p, key)).Val(); n != 0 {
		tb.Errorf("key %q's %s stream still exists (%d entries)", key, p, rdb.XLen(ctx, k.KeyStream(p, key)).Val())
	}
	if rdb.SIsMember(ctx, k.KeyStreams(), k.KeyStream(p, key)).Val() {
		tb.Errorf("key %q's %s stream still in KeyStreams", key, p)
	}
}

// A holder killed with entries of key streams pending: the slot's next
// holder replays them (high first, each as a new delivery, with its job
// id and key), acks them where they are, and deletes the streams it
// empties; a stream with a job still waiting stays, and the pass deletes
// an empty stream and forgets a name whose stream is gone.
func TestReplayKeyStreamsLeftPending(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	k := KeysFor("q")
	a := putKeyStream(t, rdb, "q", PriorityNormal, "a", "h/run-0", nil, "a-1", "a-2")
	b := putKeyStream(t, rdb, "q", PriorityHigh, "b", "h/run-0", nil, "b-1")
	c := putKeyStream(t, rdb, "q", PriorityNormal, "c", "h/run-0", nil, "c-1")
	putKeyStream(t, rdb, "q", PriorityNormal, "c", "", nil, "c-2")         // waiting: not the replay's
	putKeyStream(t, rdb, "q", PriorityLow, "other", "h/run-5", nil, "o-1") // another slot's
	putKeyStream(t, rdb, "q", PriorityNormal, "empty", "", nil)            // nothing left in it
	rdb.SAdd(ctx, k.KeyStreams(), k.KeyStream(PriorityNormal, "gone"))     // deleted, name left

	var mu sync.Mutex
	var ran []*Job
	h := HandlerFunc(func(ctx context.Context, j *Job) error {
		mu.Lock()
		ran = append(ran, j)
		mu.Unlock()
		return nil
	})
	st := new(Stats)
	if err := runUntil(t, testConfig(rdb, h), st, func() bool { return st.Done.Load() == 4 }); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
	want := map[string]string{a[0]: "a", a[1]: "a", b[0]: "b", c[0]: "c"}
	if len(ran) != 4 || ran[0].ID != b[0] {
		t.Fatalf("ran %d jobs, first %v; want 4, the high one first", len(ran), ran[0].ID)
	}
	for _, j := range ran {
		if want[j.ID] != j.Key || j.Entry != j.ID || j.Attempt != 2 || !j.inKey {
			t.Errorf("job %s (entry %s, key %q, attempt %d, inKey %v): want key %q, attempt 2, in its key's stream", j.ID, j.Entry, j.Key, j.Attempt, j.inKey, want[j.ID])
		}
	}
	keyStreamGone(t, rdb, "q", PriorityNormal, "a")
	keyStreamGone(t, rdb, "q", PriorityHigh, "b")
	keyStreamGone(t, rdb, "q", PriorityNormal, "empty")
	keyStreamGone(t, rdb, "q", PriorityNormal, "gone")
	cs := k.KeyStream(PriorityNormal, "c")
	if n, p := rdb.XLen(ctx, cs).Val(), rdb.XPending(ctx, cs, Group).Val(); n != 1 || p.Count != 0 || !rdb.SIsMember(ctx, k.KeyStreams(), cs).Val() {
		t.Errorf("key c's stream: %d entries, %d pending; want its waiting job only, still listed", n, p.Count)
	}
	if p := rdb.XPending(ctx, k.KeyStream(PriorityLow, "other"), Group).Val(); p.Count != 1 {
		t.Errorf("another slot's entry: %d pending, want 1, left to it", p.Count)
	}
	if n := rdb.HGet(ctx, k.Stats, StatFailedPrefix+FailedCrashed).Val(); n != "4" {
		t.Errorf("failed:crashed = %q, want 4", n)
	}
	if n := rdb.HGet(ctx, k.Stats, StatDone).Val(); n != "4" {
		t.Errorf("done = %q, want 4", n)
	}
}

// An entry of a key stream that a consumer gone for good left pending is
// claimed after the visibility timeout, run, and acked there.
func TestClaimKeyStreamEntryOfAGoneConsumer(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ids := putKeyStream(t, rdb, "q", PriorityNormal, "a", "gone/run-9", nil, "a-1")
	var got atomic.Pointer[Job]
	h := HandlerFunc(func(ctx context.Context, j *Job) error { got.Store(j); return nil })
	c := testConfig(rdb, h)
	c.VisibilityTimeout = 300 * time.Millisecond
	st := new(Stats)
	runUntil(t, c, st, func() bool { return st.Done.Load() == 1 })
	if j := got.Load(); j.ID != ids[0] || j.Key != "a" || j.Attempt != 2 {
		t.Fatalf("claimed job %s key %q attempt %d; want %s, key a, attempt 2", j.ID, j.Key, j.Attempt, ids[0])
	}
	keyStreamGone(t, rdb, "q", PriorityNormal, "a")
}

// An entry of a key stream read and never started (its handler could not
// start it) goes back to its level's stream, with its fields, job id and
// runs made, and no delivery counted: the next read parks it in its key's
// stream again. The key stream it left empty is deleted.
func TestGiveBackKeyStreamEntryToItsLevel(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	k := KeysFor("q")
	ids := putKeyStream(t, rdb, "q", PriorityHigh, "a", "h/run-0", nil, "a-1")
	h := HandlerFunc(func(ctx context.Context, j *Job) error { return fmt.Errorf("child still starting: %w", errUnstarted) })
	c := testConfig(rdb, h)
	c.MaxJobs = 1 // it reads the replayed entry, then stops reading
	c.Deadline = time.Now().Add(20 * time.Second)
	if err := Run(ctx, c, nil); err != nil {
		t.Fatalf("Run = %v", err)
	}
	keyStreamGone(t, rdb, "q", PriorityHigh, "a")
	m := rdb.XRange(ctx, k.High, "-", "+").Val()
	if len(m) != 1 {
		t.Fatalf("high stream holds %d entries, want the job given back", len(m))
	}
	v := m[0].Values
	if v[jobField] != ids[0] || v[keyField] != "a" || v[PayloadField] != "a-1" || v[attemptsField] != "1" || v[priorityField] != "high" {
		t.Fatalf("given back as %v; want job %s, key a, 1 run made", v, ids[0])
	}
	if p := rdb.XPending(ctx, k.High, Group).Val(); p != nil && p.Count != 0 {
		t.Fatalf("%d pending in the high stream, want 0", p.Count)
	}
}

// A job of a key stream that outlives the visibility timeout is kept fresh
// by its holder's heartbeat: another holder never claims it.
func TestHeartbeatKeepsKeyStreamEntry(t *testing.T) {
	rdb := redistest.Start(t).Client()
	putKeyStream(t, rdb, "q", PriorityNormal, "a", "h/run-0", nil, "a-1")
	var runs atomic.Int64
	h := HandlerFunc(func(ctx context.Context, j *Job) error {
		runs.Add(1)
		time.Sleep(2500 * time.Millisecond)
		return nil
	})
	a, b := testConfig(rdb, h), testConfig(rdb, h)
	b.Consumer = "h/run-1"
	a.VisibilityTimeout, b.VisibilityTimeout = time.Second, time.Second
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sa, sb := new(Stats), new(Stats)
	done := make(chan struct{}, 2)
	go func() { Run(ctx, a, sa); done <- struct{}{} }()
	deadline := time.Now().Add(30 * time.Second)
	for runs.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	go func() { Run(ctx, b, sb); done <- struct{}{} }()
	for sa.Done.Load()+sb.Done.Load() < 1 && time.Now().Before(deadline.Add(10*time.Second)) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	cancel()
	<-done
	<-done
	if runs.Load() != 1 || sa.Done.Load() != 1 {
		t.Fatalf("ran %d times (a done %d, b done %d): want once, by a", runs.Load(), sa.Done.Load(), sb.Done.Load())
	}
	keyStreamGone(t, rdb, "q", PriorityNormal, "a")
}

// An entry in key a's stream that names another key, or none, is
// dead-lettered as malformed, unrun, under its own entry id; the stream
// the dead letters left empty is deleted by the next holder's pass.
func TestReplayKeyStreamEntryOfAnotherKeyIsMalformed(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	k := KeysFor("q")
	other := putKeyStream(t, rdb, "q", PriorityNormal, "a", "", []any{keyField, "b"}, "x")
	none := putKeyStream(t, rdb, "q", PriorityNormal, "a", "", []any{"producer", "mine"}, "y")
	rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: Group, Consumer: "h/run-0", Streams: []string{k.KeyStream(PriorityNormal, "a"), ">"}, Count: 2})
	var ran atomic.Int64
	h := HandlerFunc(func(context.Context, *Job) error { ran.Add(1); return nil })
	st := new(Stats)
	runUntil(t, testConfig(rdb, h), st, func() bool { return st.Dead.Load() == 2 })
	if ran.Load() != 0 {
		t.Fatalf("a malformed entry ran")
	}
	dead := rdb.XRange(ctx, k.Dead, "-", "+").Val()
	if len(dead) != 2 {
		t.Fatalf("%d dead letters, want 2", len(dead))
	}
	for i, want := range []string{other[0], none[0]} {
		v := dead[i].Values
		if v[deadReason] != ReasonMalformed || v[jobField] != want || v[deadEntry] != want {
			t.Errorf("dead letter %v: want malformed, job %s", v, want)
		}
	}
	if v := dead[0].Values; v[keyField] != "b" {
		t.Errorf("dead letter lost its fields: %v", v)
	}
	// The next holder's pass deletes the stream the letters left empty.
	st = new(Stats)
	runUntil(t, testConfig(rdb, h), st, func() bool { return rdb.Exists(ctx, k.KeyStream(PriorityNormal, "a")).Val() == 0 })
	keyStreamGone(t, rdb, "q", PriorityNormal, "a")
}

// One heartbeat call keeps fresh this consumer's entries of the level
// streams and of key streams, and skips a key stream deleted meanwhile.
func TestHeartbeatCoversKeyStreams(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	k := KeysFor("q")
	if err := Prepare(ctx, rdb, k); err != nil {
		t.Fatal(err)
	}
	plain := enqueue(t, rdb, "q", 1)
	rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: Group, Consumer: "a", Streams: []string{k.Stream, ">"}, Count: 1})
	a := putKeyStream(t, rdb, "q", PriorityNormal, "a", "a", nil, "a-1")
	b := putKeyStream(t, rdb, "q", PriorityLow, "b", "a", nil, "b-1")
	time.Sleep(300 * time.Millisecond) // all idle that long
	rdb.Del(ctx, k.KeyStream(PriorityNormal, "gone"))
	r := &runner{c: Config{Client: rdb, Consumer: "a"}, keys: k, active: map[entryKey]*Job{
		{level: PriorityNormal, id: plain[0]}: {}, {PriorityNormal, "a", a[0]}: {}, {PriorityLow, "b", b[0]}: {},
		{PriorityNormal, "gone", "1-1"}: {}}}
	if err := r.heartbeat(ctx); err != nil {
		t.Fatalf("heartbeat: %v", err)
	}
	for s, id := range map[string]string{k.Stream: plain[0], k.KeyStream(PriorityNormal, "a"): a[0], k.KeyStream(PriorityLow, "b"): b[0]} {
		p := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: s, Group: Group, Start: id, End: id, Count: 1}).Val()
		if len(p) != 1 || p[0].Idle >= 250*time.Millisecond || p[0].RetryCount != 1 {
			t.Errorf("%s entry %s: %+v; want refreshed, no delivery counted", s, id, p)
		}
	}
}
