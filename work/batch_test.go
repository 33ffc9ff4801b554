package work

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/lock"
	"github.com/redis/go-redis/v9"
)

// callbacks records the batch callbacks a handler ran, by batch id.
type callbacks struct {
	mu  sync.Mutex
	got map[string][]*BatchSummary
}

func (c *callbacks) record(j *Job) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.got == nil {
		c.got = map[string][]*BatchSummary{}
	}
	c.got[j.Batch.ID] = append(c.got[j.Batch.ID], j.Batch)
}

func (c *callbacks) count(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.got[id])
}

func messages(n int, prefix string) []Message {
	m := make([]Message, n)
	for i := range m {
		m[i] = Message{Payload: []byte(fmt.Sprintf("%s-%d", prefix, i))}
	}
	return m
}

// A batch of 50 members, one of which always fails: the callback runs once,
// after all of them, with 49 done, 1 dead and the dead member's id; Wait
// returns the same summary.
func TestBatchCallbackOnce(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	b, err := NewBatch(ctx, rdb, "q", BatchCallback([]byte("cb"), ""), BatchName("nightly"))
	if err != nil {
		t.Fatal(err)
	}
	ids, err := b.AddAndClose(ctx, messages(50, "job")...)
	if err != nil || len(ids) != 50 {
		t.Fatal(len(ids), err)
	}
	var cb callbacks
	var members atomic.Int64
	var late atomic.Bool
	h := HandlerFunc(func(ctx context.Context, j *Job) error {
		if j.Batch != nil {
			if members.Load() != 51 { // job-7 ran twice
				late.Store(true)
			}
			cb.record(j)
			return nil
		}
		members.Add(1)
		if string(j.Payload) == "job-7" {
			return errors.New("boom")
		}
		return nil
	})
	c := fastRetry(testConfig(rdb, h))
	c.MaxAttempts, c.Concurrency = 2, 4
	st := new(Stats)
	runUntil(t, c, st, func() bool { return cb.count(b.ID()) == 1 && st.Done.Load() == 50 })
	if late.Load() {
		t.Fatal("the callback ran before every member had run")
	}
	sum, err := b.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Total != 50 || sum.Done != 49 || sum.Dead != 1 || len(sum.DeadIDs) != 1 || sum.DeadIDs[0] != ids[7] || sum.Name != "nightly" {
		t.Fatalf("summary %+v", sum)
	}
	got := cb.got[b.ID()][0]
	if got.Done != 49 || got.Dead != 1 || got.DeadIDs[0] != ids[7] {
		t.Fatalf("callback's summary %+v", got)
	}
	info, err := GetBatch(ctx, rdb, "q", b.ID())
	if err != nil || !info.Complete || info.CallbackState != "enqueued" || info.CallbackID == "" || info.Waiting != 0 {
		t.Fatalf("%+v %v", info, err)
	}
}

// An empty batch closed fires its callback at once, with zero counts; a
// second close does nothing.
func TestBatchEmpty(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	b, err := NewBatch(ctx, rdb, "q", BatchCallback([]byte("cb"), ""))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(ctx); err != nil {
		t.Fatalf("second close: %v", err)
	}
	sum, err := b.Wait(ctx)
	if err != nil || sum.Total != 0 || sum.Done != 0 || sum.Dead != 0 || sum.DeadIDs == nil {
		t.Fatalf("%+v %v", sum, err)
	}
	msgs := rdb.XRange(ctx, KeysFor("q").Stream, "-", "+").Val()
	if len(msgs) != 1 || msgs[0].Values[batchCallbackField] != b.ID() {
		t.Fatalf("stream %v, want the callback", msgs)
	}
	if _, err := b.Add(ctx, Message{Payload: []byte("late")}); !errors.Is(err, ErrBatchClosed) {
		t.Fatalf("add to a closed batch: %v", err)
	}
	if n := rdb.XLen(ctx, KeysFor("q").Stream).Val(); n != 1 {
		t.Fatalf("the refused add wrote %d entries", n-1)
	}
}

// Bad input: an unknown batch id, a malformed one, a member with a unique
// key or a delay: an error, nothing written.
func TestBatchBadInput(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	if _, err := OpenBatch(ctx, rdb, "q", "bnosuchbatch"); !errors.Is(err, ErrNoBatch) {
		t.Fatalf("unknown batch: %v", err)
	}
	if _, err := OpenBatch(ctx, rdb, "q", "1700000000000-0"); !errors.Is(err, ErrNoBatch) {
		t.Fatalf("malformed batch id: %v", err)
	}
	if _, err := WaitBatch(ctx, rdb, "q", "bnosuchbatch"); !errors.Is(err, ErrNoBatch) {
		t.Fatalf("wait for an unknown batch: %v", err)
	}
	b, err := NewBatch(ctx, rdb, "q")
	if err != nil {
		t.Fatal(err)
	}
	for _, opt := range []Option{UniqueKey("k"), In(time.Hour)} {
		if _, err := b.Add(ctx, Message{Payload: []byte("x")}, Message{Payload: []byte("y"), Options: []Option{opt}}); !errors.Is(err, ErrBadOption) {
			t.Fatalf("member with an option a batch refuses: %v", err)
		}
	}
	if n := rdb.XLen(ctx, KeysFor("q").Stream).Val(); n != 0 {
		t.Fatalf("refused adds wrote %d entries", n)
	}
	// A producer's own XADD with a bad batch field is malformed: dead, unrun.
	rdb.XAdd(ctx, &redis.XAddArgs{Stream: KeysFor("q").Stream, Values: []any{PayloadField, "p", batchField, "not a batch"}})
	st := new(Stats)
	runUntil(t, testConfig(rdb, HandlerFunc(func(context.Context, *Job) error { t.Error("ran"); return nil })), st,
		func() bool { return st.Dead.Load() == 1 })
}

// on-success-only: a member died, so the callback is dead-lettered as
// batch_failed with the summary; dead requeue runs it, with the summary.
func TestBatchOnSuccessOnly(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	b, err := NewBatch(ctx, rdb, "q", BatchCallback([]byte("cb"), ""), OnSuccessOnly())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.AddAndClose(ctx, messages(3, "job")...); err != nil {
		t.Fatal(err)
	}
	var cb callbacks
	h := HandlerFunc(func(ctx context.Context, j *Job) error {
		if j.Batch != nil {
			cb.record(j)
			return nil
		}
		if string(j.Payload) == "job-1" {
			return ErrSkipRetry
		}
		return nil
	})
	st := new(Stats)
	runUntil(t, testConfig(rdb, h), st, func() bool { return st.Done.Load() == 2 && st.Dead.Load() == 1 })
	if _, err := b.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	var letter *DeadLetter
	dead, _ := ListDead(ctx, rdb, "q", "", 10)
	for i := range dead {
		if dead[i].Reason == ReasonBatchFailed {
			letter = &dead[i]
		}
	}
	if letter == nil || cb.count(b.ID()) != 0 {
		t.Fatalf("no batch_failed letter in %+v (callback ran %d times)", dead, cb.count(b.ID()))
	}
	if _, err := RequeueDead(ctx, rdb, "q", letter.ID); err != nil {
		t.Fatal(err)
	}
	runUntil(t, testConfig(rdb, h), st, func() bool { return cb.count(b.ID()) == 1 })
	if s := cb.got[b.ID()][0]; s.Dead != 1 || s.Done != 2 {
		t.Fatalf("requeued callback's summary %+v", s)
	}
}

// A lost reply: the holder's ack script ran but its reply never came, so
// it runs again. The second run finds the entry acknowledged and counts
// nothing: the member is counted once and the callback enqueued once.
func TestBatchAckReplayed(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	if err := Prepare(ctx, rdb, KeysFor("q")); err != nil {
		t.Fatal(err)
	}
	b, _ := NewBatch(ctx, rdb, "q", BatchCallback([]byte("cb"), ""))
	ids, err := b.AddAndClose(ctx, messages(3, "job")...)
	if err != nil {
		t.Fatal(err)
	}
	rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: Group, Consumer: "c", Streams: []string{KeysFor("q").Stream, ">"}, Count: 3})
	r := &runner{c: Config{Client: rdb, Queue: "q", Logger: testLogger(), RedisDownExit: time.Second}, st: new(Stats), keys: KeysFor("q"), active: map[entryKey]*Job{}}
	// Each call replayed three times (as after a lost reply); the second
	// call carries the first's member again beside a new one.
	for i, call := range [][]string{ids[:1], ids[:2], ids[2:]} {
		for range 3 {
			var m batchAcks
			for _, id := range call {
				m.add(&Job{ID: id, Entry: id, bat: &jobBatch{member: b.ID()}}, time.Millisecond)
			}
			r.ackBatchMembers(entryKey{level: PriorityNormal}, &m)
		}
		if info, _ := GetBatch(ctx, rdb, "q", b.ID()); info.Done != int64(i+1) || info.Complete != (i == 2) {
			t.Fatalf("after call %d: %+v", i+1, info)
		}
	}
	info, err := GetBatch(ctx, rdb, "q", b.ID())
	if err != nil || info.Done != 3 || info.Dead != 0 || !info.Complete {
		t.Fatalf("%+v %v", info, err)
	}
	n := 0
	for _, m := range rdb.XRange(ctx, KeysFor("q").Stream, "-", "+").Val() {
		if m.Values[batchCallbackField] == b.ID() {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d callbacks enqueued, want 1", n)
	}
}

// A member that runs twice (claimed from a holder that stalled, at least
// once): both runs ack, one is counted. A fenced holder's ack counts nothing
// and leaves the member for the slot's next holder, whose ack counts it.
func TestBatchRunTwiceAndFenced(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	ctx := context.Background()
	if _, err := lock.MarkFresh(ctx, rdb, "q"); err != nil {
		t.Fatal(err)
	}
	b, _ := NewBatch(ctx, rdb, "q", BatchCallback([]byte("cb"), ""))
	if _, err := b.AddAndClose(ctx, messages(1, "job")...); err != nil {
		t.Fatal(err)
	}
	set, err := lock.NewLeaseSet(rdb, "q", lock.RoleRun, 1, lock.LeaseOptions{Host: "a", TTL: 10 * time.Second, Renew: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	sl, ok, err := set.TryAcquire()
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	key, token := sl.(lock.Fencer).Fence()
	var cb callbacks
	var runs atomic.Int64
	var once sync.Once
	h := HandlerFunc(func(ctx context.Context, j *Job) error {
		if j.Batch != nil {
			cb.record(j)
			return nil
		}
		runs.Add(1)
		once.Do(func() { // taken over mid-job: this holder's ack is fenced
			rdb.HSet(ctx, key, "expires", 1)
		})
		return nil
	})
	c := testConfig(rdb, h)
	c.Fence = &Fence{Key: key, Token: token}
	c.RedisDownExit = time.Second
	st := new(Stats)
	runUntil(t, c, st, func() bool { return runs.Load() == 1 && pending(t, rdb, "q") == 1 })
	time.Sleep(100 * time.Millisecond) // let the fenced ack fail
	if info, _ := GetBatch(ctx, rdb, "q", b.ID()); info.Done != 0 || info.Complete {
		t.Fatalf("fenced ack counted: %+v", info)
	}
	// The slot's next holder (no fence here) replays it and counts it, once.
	runUntil(t, testConfig(rdb, h), st, func() bool { return cb.count(b.ID()) == 1 })
	if info, _ := GetBatch(ctx, rdb, "q", b.ID()); info.Done != 1 || info.Total != 1 {
		t.Fatalf("%+v", info)
	}
	// A stale second run's ack of the same member: counts nothing more.
	r := &runner{c: Config{Client: rdb, Queue: "q", Logger: testLogger(), RedisDownExit: time.Second}, st: new(Stats), keys: KeysFor("q"), active: map[entryKey]*Job{}}
	var m batchAcks
	m.add(&Job{ID: "1-0", Entry: "1-0", bat: &jobBatch{member: b.ID()}}, 0)
	r.ackBatchMembers(entryKey{level: PriorityNormal}, &m)
	if info, _ := GetBatch(ctx, rdb, "q", b.ID()); info.Done != 1 || cb.count(b.ID()) != 1 {
		t.Fatalf("%+v, callbacks %d", info, cb.count(b.ID()))
	}
	_ = sl.Release()
}

// A dead member requeued: of an incomplete batch it counts again (dead,
// then done); of a complete batch it runs but fires nothing again.
func TestBatchRequeuedDeadMember(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	b, _ := NewBatch(ctx, rdb, "q", BatchCallback([]byte("cb"), ""))
	ids, err := b.Add(ctx, messages(2, "job")...) // not closed yet
	if err != nil {
		t.Fatal(err)
	}
	var cb callbacks
	var fail atomic.Bool
	fail.Store(true)
	h := HandlerFunc(func(ctx context.Context, j *Job) error {
		if j.Batch != nil {
			cb.record(j)
			return nil
		}
		if string(j.Payload) == "job-0" && fail.Load() {
			return ErrSkipRetry
		}
		return nil
	})
	st := new(Stats)
	runUntil(t, testConfig(rdb, h), st, func() bool { return st.Done.Load() == 1 && st.Dead.Load() == 1 })
	if info, _ := GetBatch(ctx, rdb, "q", b.ID()); info.Dead != 1 || info.Done != 1 || info.Complete {
		t.Fatalf("%+v", info)
	}
	fail.Store(false)
	dead, _ := ListDead(ctx, rdb, "q", "", 10)
	if _, err := RequeueDead(ctx, rdb, "q", dead[0].ID); err != nil {
		t.Fatal(err)
	}
	runUntil(t, testConfig(rdb, h), st, func() bool { return st.Done.Load() == 2 })
	if info, _ := GetBatch(ctx, rdb, "q", b.ID()); info.Dead != 0 || info.Done != 2 || info.Complete {
		t.Fatalf("requeued member of an incomplete batch: %+v", info)
	}
	fail.Store(true)
	ids2, err := b.AddAndClose(ctx, messages(1, "job")...) // job-0 again: dies
	if err != nil {
		t.Fatal(err)
	}
	runUntil(t, testConfig(rdb, h), st, func() bool { return cb.count(b.ID()) == 1 })
	sum, _ := b.Wait(ctx)
	if sum.Done != 2 || sum.Dead != 1 || sum.DeadIDs[0] != ids2[0] {
		t.Fatalf("%+v (members %v %v)", sum, ids, ids2)
	}
	fail.Store(false)
	dead, _ = ListDead(ctx, rdb, "q", "", 10)
	if _, err := RequeueDead(ctx, rdb, "q", dead[0].ID); err != nil {
		t.Fatal(err)
	}
	runUntil(t, testConfig(rdb, h), st, func() bool { return st.Done.Load() == 4 })
	time.Sleep(100 * time.Millisecond) // a second callback would be queued by now
	runUntil(t, testConfig(rdb, h), st, func() bool { return rdb.XLen(ctx, KeysFor("q").Stream).Val() == 0 })
	if info, _ := GetBatch(ctx, rdb, "q", b.ID()); cb.count(b.ID()) != 1 || info.Done != 2 || info.Dead != 1 {
		t.Fatalf("requeued member of a complete batch: callbacks %d, %+v", cb.count(b.ID()), info)
	}
}

// Several waiters, one before and one after completion, all return; a
// waiter whose context is cancelled returns ctx.Err() at once.
func TestBatchWait(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	b, _ := NewBatch(ctx, rdb, "q")
	if _, err := b.Add(ctx, messages(1, "job")...); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { _, err := b.Wait(cctx); errc <- err }()
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) || time.Since(start) > time.Second {
		t.Fatalf("cancelled wait: %v after %s", err, time.Since(start))
	}
	got := make(chan *BatchSummary, 3)
	for range 3 {
		go func() {
			s, err := b.Wait(ctx)
			if err != nil {
				t.Error(err)
			}
			got <- s
		}()
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	st := new(Stats)
	runUntil(t, testConfig(rdb, HandlerFunc(func(context.Context, *Job) error { return nil })), st, func() bool { return st.Done.Load() == 1 })
	for range 3 {
		select {
		case s := <-got:
			if s == nil || s.Done != 1 {
				t.Fatalf("%+v", s)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("a waiter did not return")
		}
	}
	if s, err := b.Wait(ctx); err != nil || s.Done != 1 { // already complete
		t.Fatal(s, err)
	}
}

// A callback in another queue, on a Cluster where the two queues live on
// different nodes: the completing script puts the batch in its queue's
// outbox and the holder forwards it, once, whatever repeats the forward.
func TestBatchCallbackOtherQueueOnCluster(t *testing.T) {
	cc := clusterClient(t, 3)
	ctx := context.Background()
	src := "q"
	dst := queueOnOtherNode(ctx, cc, src, "cb")
	b, err := NewBatch(ctx, cc, src, BatchCallback([]byte("done!"), dst))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.AddAndClose(ctx, messages(20, "job")...); err != nil {
		t.Fatal(err)
	}
	c := testConfig(nil, HandlerFunc(func(context.Context, *Job) error { return nil }))
	c.Client = cc
	st := new(Stats)
	runUntil(t, c, st, func() bool { return st.Done.Load() == 20 })
	sum, err := b.Wait(ctx)
	if err != nil || sum.Done != 20 {
		t.Fatal(sum, err)
	}
	var info *BatchInfo
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if info, _ = GetBatch(ctx, cc, src, b.ID()); info.CallbackState == "enqueued" {
			break
		}
	}
	if info.CallbackState != "enqueued" || info.CallbackQueue != dst {
		t.Fatalf("%+v", info)
	}
	// A forwarder killed after the callback's enqueue, before the outbox
	// was cleared: the next forward finds the marker, adds nothing.
	cc.SAdd(ctx, KeysFor(src).batchOutbox(), b.ID())
	if _, err := ForwardBatches(ctx, cc, src); err != nil {
		t.Fatal(err)
	}
	msgs := cc.XRange(ctx, KeysFor(dst).Stream, "-", "+").Val()
	if len(msgs) != 1 || msgs[0].ID != info.CallbackID || !strings.Contains(msgs[0].Values[batchSummaryField].(string), `"done":20`) {
		t.Fatalf("callback queue holds %v, want the one callback %s", msgs, info.CallbackID)
	}
	var cb callbacks
	c2 := testConfig(nil, HandlerFunc(func(_ context.Context, j *Job) error { cb.record(j); return nil }))
	c2.Client, c2.Queue = cc, dst
	runUntil(t, c2, st, func() bool { return cb.count(b.ID()) == 1 })
}

// A member cancelled while waiting is dead (cancelled) for its batch, counted
// in the cancel's script: the batch completes without it.
func TestBatchCancelledMember(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	b, _ := NewBatch(ctx, rdb, "q", BatchCallback([]byte("cb"), ""))
	ids, err := b.AddAndClose(ctx, messages(2, "job")...)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Cancel(ctx, rdb, "q", ids[0])
	if err != nil || res[0].Outcome != CancelDone {
		t.Fatal(res, err)
	}
	if _, err := Cancel(ctx, rdb, "q", ids[0]); err != nil { // again: nothing more
		t.Fatal(err)
	}
	var cb callbacks
	st := new(Stats)
	runUntil(t, testConfig(rdb, HandlerFunc(func(_ context.Context, j *Job) error {
		if j.Batch != nil {
			cb.record(j)
		}
		return nil
	})), st, func() bool { return cb.count(b.ID()) == 1 })
	if s := cb.got[b.ID()][0]; s.Done != 1 || s.Dead != 1 || s.DeadIDs[0] != ids[0] {
		t.Fatalf("%+v", s)
	}
}

// A callback's entry gives the job its summary: Job.Batch, the exec
// environment and the worker protocol's job frame; a member's gives none.
func TestBatchCallbackFields(t *testing.T) {
	sum := `{"id":"bx1","name":"n","queue":"q","total":2,"done":1,"dead":1,"dead_ids":["1-0"],"completed_at":5}`
	r := &runner{c: Config{Queue: "q", MaxPayload: 1 << 20, MaxAttempts: 3}}
	j := r.toJob(redis.XMessage{ID: "9-0", Values: map[string]any{PayloadField: "cb", batchCallbackField: "bx1", batchSummaryField: sum}}, 1, PriorityNormal)
	if j.verdict != "" || j.Batch == nil || j.Batch.ID != "bx1" || j.Batch.Dead != 1 || j.Batch.DeadIDs[0] != "1-0" {
		t.Fatalf("callback job %+v (verdict %q: %s)", j.Batch, j.verdict, j.problem)
	}
	if env := j.batchEnv(); len(env) != 2 || env[0] != "BATON_BATCH=bx1" || env[1] != "BATON_BATCH_SUMMARY="+sum {
		t.Fatalf("env %q", env)
	}
	f := jobFrame(j)
	if head := string(f.encode()[0]); !strings.Contains(head, `"batch":"bx1"`) || !strings.Contains(head, `"batch_summary":`+sum) {
		t.Fatalf("frame header %s", head)
	}
	m := r.toJob(redis.XMessage{ID: "8-0", Values: map[string]any{PayloadField: "m", batchField: "bx1"}}, 1, PriorityNormal)
	mf := jobFrame(m)
	if m.Batch != nil || m.inBatch() != "bx1" || m.batchEnv() != nil || strings.Contains(string(mf.encode()[0]), "batch") {
		t.Fatalf("member %+v", m)
	}
	bad := r.toJob(redis.XMessage{ID: "7-0", Values: map[string]any{PayloadField: "cb", batchCallbackField: "bx1", batchSummaryField: "{"}}, 1, PriorityNormal)
	if bad.verdict != ReasonMalformed {
		t.Fatalf("a callback with a bad summary: verdict %q", bad.verdict)
	}
}
