package work_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/work"
	"github.com/redis/go-redis/v9"
)

// The tests of this file build the key streams by hand, as docs/keys.md
// lays them out (a stream per key and level, its group, the index, the
// ring, the set of streams), and look at them from outside a holder:
// Locate, Cancel, ReadCounts, ReadKeys.

// keyedByHand puts job id in key's stream of level p as an enqueue writes
// it: the job's fields plus orig, under its own id; the index, the ring
// and the set of key streams. Extra fields are field, value pairs.
func keyedByHand(t *testing.T, rdb *redis.Client, q string, p work.Priority, key, id string, extra ...string) {
	t.Helper()
	ctx := context.Background()
	k := work.KeysFor(q)
	s := k.KeyStream(p, key)
	if n, _ := rdb.Exists(ctx, s).Result(); n == 0 {
		if err := rdb.XGroupCreateMkStream(ctx, s, work.Group, "0").Err(); err != nil {
			t.Fatal(err)
		}
	}
	values := []any{work.PayloadField, "job " + id, "key", key}
	if p != work.PriorityNormal {
		values = append(values, "priority", p.String())
	}
	for _, v := range extra {
		values = append(values, v)
	}
	values = append(values, "orig", id)
	if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: s, ID: id, Values: values}).Err(); err != nil {
		t.Fatal(err)
	}
	ring, in := k.KeyRing(p), k.Stream+":key:in:"+p.String()
	_, err := rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
		pl.HSet(ctx, k.KeyJobs(), id, id+"\n"+p.String()+"\n"+key)
		pl.SAdd(ctx, k.KeyStreams(), s)
		if n, _ := rdb.SIsMember(ctx, in, key).Result(); !n {
			pl.RPush(ctx, ring, key)
			pl.SAdd(ctx, in, key)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// runByHand makes the next n waiting jobs of key's stream of level p
// running: read (pending) by consumer c.
func runByHand(t *testing.T, rdb *redis.Client, q string, p work.Priority, key, c string, n int64) {
	t.Helper()
	err := rdb.XReadGroup(context.Background(), &redis.XReadGroupArgs{Group: work.Group, Consumer: c,
		Streams: []string{work.KeysFor(q).KeyStream(p, key), ">"}, Count: n}).Err()
	if err != nil {
		t.Fatal(err)
	}
}

func jobID(i int) string { return fmt.Sprintf("1700000000000-%d", i) }

// A keyed job is found in its key's stream: waiting (with the jobs ahead
// of it there and its key's counts) or running (its slot and deliveries,
// as a job of the level stream), at its level.
func TestKeyStreamLocate(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client()
	for i := 1; i <= 4; i++ {
		keyedByHand(t, rdb, "q", work.PriorityNormal, "tenant-1", jobID(i))
	}
	keyedByHand(t, rdb, "q", work.PriorityHigh, "tenant-1", jobID(5))
	runByHand(t, rdb, "q", work.PriorityNormal, "tenant-1", "web1/run-2", 1)
	runByHand(t, rdb, "q", work.PriorityHigh, "tenant-1", "web1/run-3", 1)

	loc, err := work.Locate(ctx, rdb, "q", jobID(1))
	if err != nil {
		t.Fatal(err)
	}
	if loc.State != work.StateRunning || loc.Consumer != "web1/run-2" || loc.Deliveries != 1 || loc.Entry != jobID(1) ||
		loc.Key != "tenant-1" || loc.KeyRunning != 2 || loc.KeyWaiting != 3 {
		t.Fatalf("running keyed job: %+v", loc)
	}
	loc, err = work.Locate(ctx, rdb, "q", jobID(4))
	if err != nil {
		t.Fatal(err)
	}
	if loc.State != work.StateWaiting || loc.Ahead != 2 || loc.Entry != jobID(4) || loc.Priority != "" ||
		loc.Key != "tenant-1" || loc.KeyRunning != 2 || loc.KeyWaiting != 3 {
		t.Fatalf("waiting keyed job: %+v", loc)
	}
	loc, err = work.Locate(ctx, rdb, "q", jobID(5))
	if err != nil {
		t.Fatal(err)
	}
	if loc.State != work.StateRunning || loc.Priority != "high" || loc.Consumer != "web1/run-3" || loc.KeyWaiting != 0 {
		t.Fatalf("running high keyed job: %+v", loc)
	}
}

// An index entry whose stream entry is gone (it outlived its job's
// settle) does not make the job look waiting: Locate finds it where the
// settle put it (done, a dead letter), or nowhere.
func TestKeyStreamLocateStaleIndex(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client()
	k := work.KeysFor("q")
	keyedByHand(t, rdb, "q", work.PriorityNormal, "tenant-1", jobID(1))
	keyedByHand(t, rdb, "q", work.PriorityNormal, "tenant-1", jobID(2))
	keyedByHand(t, rdb, "q", work.PriorityNormal, "tenant-1", jobID(3))
	s := k.KeyStream(work.PriorityNormal, "tenant-1")
	// 1 is done (its done record kept), 2 dead-lettered, 3 gone with its
	// stream: each entry deleted, the index left behind.
	now := time.Now()
	if err := rdb.XDel(ctx, s, jobID(1), jobID(2)).Err(); err != nil {
		t.Fatal(err)
	}
	rdb.ZAdd(ctx, k.Done, redis.Z{Score: float64(now.UnixMilli()), Member: jobID(1)})
	letter := rdb.XAdd(ctx, &redis.XAddArgs{Stream: k.Dead, Values: []any{work.PayloadField, "x", "orig", jobID(2),
		"reason", "failed", "error", "boom", "attempts", "3", "id", jobID(2), "failed_at", fmt.Sprint(now.UnixMilli())}}).Val()
	rdb.HSet(ctx, k.DeadIndex, jobID(2), letter)
	for i, want := range []string{work.StateDone, work.StateDead} {
		loc, err := work.Locate(ctx, rdb, "q", jobID(i+1))
		if err != nil {
			t.Fatal(err)
		}
		if loc.State != want || loc.Key != "" {
			t.Fatalf("job %s: %+v, want %s", jobID(i+1), loc, want)
		}
	}
	rdb.Del(ctx, s)
	loc, err := work.Locate(ctx, rdb, "q", jobID(3))
	if err != nil {
		t.Fatal(err)
	}
	if loc.State != work.StateUnknown {
		t.Fatalf("job 3, its stream gone: %+v", loc)
	}
	// An index value that names another job's entry does not either.
	keyedByHand(t, rdb, "q", work.PriorityNormal, "tenant-2", jobID(7))
	rdb.HSet(ctx, k.KeyJobs(), jobID(8), jobID(7)+"\nnormal\ntenant-2")
	if loc, err := work.Locate(ctx, rdb, "q", jobID(8)); err != nil || loc.State != work.StateUnknown {
		t.Fatalf("job 8 named by another's entry: %+v, %v", loc, err)
	}
}

// Cancelling a waiting keyed job dead-letters it at once with its own
// fields, takes its entry and index entry out, frees its unique key, and
// deletes its key's stream when that was its last job; `dead requeue`
// brings it back into its level's stream with its key.
func TestKeyStreamCancelWaiting(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client()
	k := work.KeysFor("q")
	s := k.KeyStream(work.PriorityNormal, "tenant-1")
	keyedByHand(t, rdb, "q", work.PriorityNormal, "tenant-1", jobID(1), "unique", "u1")
	keyedByHand(t, rdb, "q", work.PriorityNormal, "tenant-1", jobID(2))
	rdb.Set(ctx, k.Unique("u1"), jobID(1), 0)

	res, err := work.Cancel(ctx, rdb, "q", jobID(1))
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || res[0].Outcome != work.CancelDone || res[0].State != work.StateWaiting || res[0].Letter == "" {
		t.Fatalf("cancel = %+v, want done from waiting", res)
	}
	if n := rdb.XLen(ctx, s).Val(); n != 1 {
		t.Fatalf("key stream holds %d entries, want the other job's", n)
	}
	if rdb.HExists(ctx, k.KeyJobs(), jobID(1)).Val() || rdb.Exists(ctx, k.Unique("u1")).Val() != 0 {
		t.Fatal("index entry or unique key left")
	}
	d, err := work.GetDead(ctx, rdb, "q", jobID(1))
	if err != nil {
		t.Fatal(err)
	}
	if d.Reason != work.ReasonCancelled || string(d.Payload) != "job "+jobID(1) || d.Fields["key"] != "tenant-1" {
		t.Fatalf("dead letter: %+v", d)
	}
	if !rdb.SIsMember(ctx, k.KeyStreams(), s).Val() {
		t.Fatal("stream taken out of the key streams while a job waits in it")
	}

	// The last job: the stream goes with it.
	if res, err = work.Cancel(ctx, rdb, "q", jobID(2)); err != nil || res[0].Outcome != work.CancelDone {
		t.Fatalf("cancel = %+v, %v", res, err)
	}
	if rdb.Exists(ctx, s).Val() != 0 || rdb.SIsMember(ctx, k.KeyStreams(), s).Val() {
		t.Fatal("empty key stream left, or still listed")
	}
	if loc, err := work.Locate(ctx, rdb, "q", jobID(2)); err != nil || loc.State != work.StateDead {
		t.Fatalf("cancelled job: %+v, %v", loc, err)
	}

	if _, err := work.RequeueDead(ctx, rdb, "q", d.ID); err != nil {
		t.Fatal(err)
	}
	msgs := rdb.XRange(ctx, k.Stream, "-", "+").Val()
	if len(msgs) != 1 || msgs[0].Values["key"] != "tenant-1" || msgs[0].Values["orig"] != jobID(1) {
		t.Fatalf("requeued into the level stream: %+v", msgs)
	}
}

// Cancelling a running keyed job (pending in its key's stream) asks its
// holder to stop it, leaving the entry for the holder to settle.
func TestKeyStreamCancelRunning(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client()
	k := work.KeysFor("q")
	keyedByHand(t, rdb, "q", work.PriorityLow, "tenant-1", jobID(1))
	runByHand(t, rdb, "q", work.PriorityLow, "tenant-1", "web1/run-1", 1)
	res, err := work.CancelWith(ctx, rdb, "q", work.CancelOptions{Reason: "not needed"}, jobID(1))
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || res[0].Outcome != work.CancelRequested || res[0].State != work.StateRunning || res[0].Slot != "web1/run-1" {
		t.Fatalf("cancel = %+v, want requested of web1/run-1", res)
	}
	if why := rdb.HGet(ctx, k.Cancel, jobID(1)).Val(); why != "not needed" {
		t.Fatalf("cancel request %q", why)
	}
	if n := rdb.XLen(ctx, k.KeyStream(work.PriorityLow, "tenant-1")).Val(); n != 1 || !rdb.HExists(ctx, k.KeyJobs(), jobID(1)).Val() {
		t.Fatal("a running job's entry or index entry was taken out")
	}
	if n := rdb.XLen(ctx, k.Dead).Val(); n != 0 {
		t.Fatalf("%d dead letters, want none before its holder stops it", n)
	}
}

// A keyed job that another job waits for (After) holds it back while it
// is in its key's stream; cancelling it fails the dependent as its
// dependency's dead letter does.
func TestKeyStreamAfterKeyedJob(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client()
	keyedByHand(t, rdb, "q", work.PriorityNormal, "tenant-1", jobID(1))
	id, err := work.Enqueue(ctx, rdb, "q", []byte("next"), work.After(jobID(1)))
	if err != nil {
		t.Fatal(err)
	}
	if loc, err := work.Locate(ctx, rdb, "q", id); err != nil || loc.State != work.StateBlocked {
		t.Fatalf("dependent of a waiting keyed job: %+v, %v", loc, err)
	}
	if _, err := work.Cancel(ctx, rdb, "q", jobID(1)); err != nil {
		t.Fatal(err)
	}
	if loc, err := work.Locate(ctx, rdb, "q", id); err != nil || loc.State != work.StateDead {
		t.Fatalf("dependent of a cancelled keyed job: %+v, %v", loc, err)
	}
}

// Counts and status read the key streams: waiting = XLEN − pending,
// running = pending, summed over keys and levels; the busiest keys first,
// and the keys at their cap.
func TestKeyStreamCountsAndStatus(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client()
	k := work.KeysFor("q")
	n := 0
	add := func(p work.Priority, key string, jobs int) {
		for range jobs {
			n++
			keyedByHand(t, rdb, "q", p, key, jobID(n))
		}
	}
	add(work.PriorityNormal, "big", 10)
	add(work.PriorityHigh, "big", 2)
	add(work.PriorityNormal, "capped", 4)
	add(work.PriorityNormal, "small", 1)
	runByHand(t, rdb, "q", work.PriorityNormal, "big", "h/run-1", 3)
	runByHand(t, rdb, "q", work.PriorityHigh, "big", "h/run-1", 1)
	runByHand(t, rdb, "q", work.PriorityNormal, "capped", "h/run-2", 2)
	// A stream listed but gone (deleted after its last job) counts nothing.
	rdb.SAdd(ctx, k.KeyStreams(), k.KeyStream(work.PriorityLow, "gone"))
	if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: k.Stream, Values: []any{work.PayloadField, "plain"}}).Err(); err != nil {
		t.Fatal(err)
	}

	c, err := work.ReadCounts(ctx, rdb, "q")
	if err != nil {
		t.Fatal(err)
	}
	if c.Keyed != 11 || c.Waiting != 12 || c.Pending != 6 || c.KeyedRunning != 6 {
		t.Fatalf("counts: keyed %d, waiting %d, pending %d; want 11, 12, 6", c.Keyed, c.Waiting, c.Pending)
	}

	caps := work.KeyCaps{Default: 5, Limits: map[string]int{"capped": 2}}
	rep, err := work.ReadKeys(ctx, rdb, "q", caps, 10)
	if err != nil {
		t.Fatal(err)
	}
	want := []work.KeyLoad{
		{Key: "big", Waiting: 8, Running: 4, Cap: 5},
		{Key: "capped", Waiting: 2, Running: 2, Cap: 2, AtCap: true},
		{Key: "small", Waiting: 1, Cap: 5},
	}
	if rep == nil || rep.Keys != 3 || rep.Waiting != 11 || rep.Running != 6 || rep.NAtCap != 1 ||
		strings.Join(rep.AtCap, ",") != "capped" || fmt.Sprint(rep.Top) != fmt.Sprint(want) || rep.Partial {
		t.Fatalf("keys report: %+v", rep)
	}
	if rep, err := work.ReadKeys(ctx, rdb, "q", caps, 1); err != nil || len(rep.Top) != 1 || len(rep.AtCap) != 1 {
		t.Fatalf("top 1: %+v, %v", rep, err)
	}
	if rep, err := work.ReadKeys(ctx, redistest.Start(t).Client(), "q", caps, 10); err != nil || rep != nil {
		t.Fatalf("no keys: %+v, %v", rep, err)
	}
}

// Status reads at most MaxKeyStreamsRead key streams, and says so.
func TestKeyStreamStatusBounded(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client()
	k := work.KeysFor("q")
	total := work.MaxKeyStreamsRead + 50
	for from := 0; from < total; from += 1000 {
		_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := from; i < min(from+1000, total); i++ {
				s := k.KeyStream(work.PriorityNormal, fmt.Sprint("k", i))
				p.XAdd(ctx, &redis.XAddArgs{Stream: s, ID: jobID(i + 1), Values: []any{work.PayloadField, "x", "orig", jobID(i + 1)}})
				p.XGroupCreate(ctx, s, work.Group, "0")
				p.SAdd(ctx, k.KeyStreams(), s)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	rep, err := work.ReadKeys(ctx, rdb, "q", work.KeyCaps{}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Partial || rep.Keys != work.MaxKeyStreamsRead || rep.Waiting != int64(work.MaxKeyStreamsRead) {
		t.Fatalf("keys report over %d streams: keys %d, waiting %d, partial %v", total, rep.Keys, rep.Waiting, rep.Partial)
	}
	c, err := work.ReadCounts(ctx, rdb, "q")
	if err != nil || c.Keyed != int64(work.MaxKeyStreamsRead) {
		t.Fatalf("counts: %+v, %v", c, err)
	}
}

// A producer waiting for a keyed job (Wait) learns of its cancel at once.
func TestKeyStreamWaitCancelled(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client()
	keyedByHand(t, rdb, "q", work.PriorityNormal, "tenant-1", jobID(1))
	done := make(chan error, 1)
	go func() {
		_, err := work.Wait(ctx, rdb, "q", jobID(1))
		done <- err
	}()
	// Wait registers, then looks: cancel once it has registered.
	waitUntil(t, func() bool { return rdb.Exists(ctx, work.KeysFor("q").Waiters).Val() == 1 })
	if _, err := work.Cancel(ctx, rdb, "q", jobID(1)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, work.ErrCancelled) {
			t.Fatalf("Wait: %v, want ErrCancelled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait still blocked 10 s after its keyed job was cancelled")
	}
}

// A batch member in its key's stream that is cancelled is counted dead in
// the same step: the batch completes.
func TestKeyStreamCancelBatchMember(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client()
	k := work.KeysFor("q")
	b, err := work.NewBatch(ctx, rdb, "q", work.BatchCallback([]byte("cb"), ""))
	if err != nil {
		t.Fatal(err)
	}
	ids, err := b.AddAndClose(ctx, work.Message{Payload: []byte("m")})
	if err != nil {
		t.Fatal(err)
	}
	// Move the member into a key stream, as an enqueue with a key puts it.
	m := rdb.XRange(ctx, k.Stream, ids[0], ids[0]).Val()
	if len(m) != 1 {
		t.Fatalf("member %s not in the stream: %v", ids[0], m)
	}
	var extra []string
	for f, v := range m[0].Values {
		if f != work.PayloadField && f != "orig" {
			extra = append(extra, f, v.(string))
		}
	}
	rdb.XDel(ctx, k.Stream, ids[0])
	keyedByHand(t, rdb, "q", work.PriorityNormal, "tenant-1", ids[0], extra...)
	res, err := work.Cancel(ctx, rdb, "q", ids[0])
	if err != nil || res[0].Outcome != work.CancelDone {
		t.Fatalf("cancel: %+v %v", res, err)
	}
	info, err := work.GetBatch(ctx, rdb, "q", b.ID())
	if err != nil {
		t.Fatal(err)
	}
	if !info.Complete || info.Dead != 1 || info.CallbackState != "enqueued" {
		t.Fatalf("batch after its only member was cancelled: %+v", info)
	}
}

func waitUntil(t *testing.T, ok func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); !ok(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("condition not met within 10 s")
		}
	}
}

// The oldest waiting job counts the key streams: a keyed job waiting
// since before the rest is the oldest, and a running one (pending) is not
// waiting.
func TestKeyOldestWaiting(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client()
	k := work.KeysFor("q")
	for _, key := range []string{"a", "b"} {
		if _, err := work.Enqueue(ctx, rdb, "q", []byte("old"), work.Key(key)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(1200 * time.Millisecond)
	if _, err := work.Enqueue(ctx, rdb, "q", []byte("new"), work.Key("a")); err != nil {
		t.Fatal(err)
	}
	if c, err := work.ReadCounts(ctx, rdb, "q"); err != nil || c.OldestWaiting < time.Second {
		t.Fatalf("oldest waiting %v, %v; want a's and b's first jobs' age, over 1s", c.OldestWaiting, err)
	}
	// a's and b's first jobs start: only a's new one waits
	for _, key := range []string{"a", "b"} {
		s := k.KeyStream(work.PriorityNormal, key)
		if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: work.Group, Consumer: "h/run-0", Streams: []string{s, ">"}, Count: 1}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	c, err := work.ReadCounts(ctx, rdb, "q")
	if err != nil || c.Waiting != 1 || c.OldestWaiting >= time.Second {
		t.Fatalf("with the old jobs running: %d waiting, the oldest for %v, %v; want 1, under 1s", c.Waiting, c.OldestWaiting, err)
	}
}
