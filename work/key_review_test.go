package work

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/lock"
	"github.com/redis/go-redis/v9"
)

// A holder that acknowledges a key stream entry drops its job's index
// entry only while the index still names that entry: a job that ran
// twice (claimed past the visibility timeout, retried by the claimer and
// parked again under a newer entry) keeps the index entry of the new one,
// which `baton job`, cancel and chains read, when the first holder's late
// acknowledgement comes.
func TestKeyAckKeepsIndexOfJobParkedAgain(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	k := KeysFor("q")
	s := k.KeyStream(PriorityNormal, "a")
	job := enqueueKeyed(t, rdb, "a", 1)[0]
	// Holder A reads it (entry e1 = the job id) and stalls.
	readAs(t, rdb, "A", s)
	e1 := job
	// Holder B claims it, runs it, and it fails: its retry settles e1 and,
	// once due, puts it in the level stream, whose read parks it again.
	m, err := rdb.XRange(ctx, s, e1, e1).Result()
	if err != nil || len(m) != 1 {
		t.Fatalf("entry %s: %v %v", e1, m, err)
	}
	rdb.XClaim(ctx, &redis.XClaimArgs{Stream: s, Group: Group, Consumer: "B", Messages: []string{e1}})
	rdb.XAck(ctx, s, Group, e1)
	rdb.XDel(ctx, s, e1)
	if err := ensureGroup(ctx, rdb, k.Stream); err != nil {
		t.Fatal(err)
	}
	le, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: k.Stream, Values: m[0].Values}).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: Group, Consumer: "B", Streams: []string{k.Stream, ">"}, Count: 1}).Err(); err != nil {
		t.Fatal(err)
	}
	v, err := runScript(ctx, rdb, keyParkScript, []string{k.High, k.Stream, k.Low, k.KeyJobs()},
		Group, "B", k.keyBase(), 2, le, "a", job, 1).Slice()
	if err != nil || len(v) != 1 || v[0] != int64(0) {
		t.Fatalf("park: %v %v", v, err)
	}
	parked := rdb.HGet(ctx, k.KeyJobs(), job).Val()
	if strings.HasPrefix(parked, e1+"\n") {
		t.Fatalf("index still names %s after the park: %q", e1, parked)
	}
	// Holder A's job ends: it acknowledges e1, with the job's index entry,
	// as ackStreams sends it (job id, entry id).
	keys, args := keyAckArgs(k, []string{s}, []string{e1}, []string{job})
	if err := runScript(ctx, rdb, keyAckScript, keys, args...).Err(); err != nil {
		t.Fatal(err)
	}
	if got := rdb.HGet(ctx, k.KeyJobs(), job).Val(); got != parked {
		t.Fatalf("index entry of %s after the late ack of %s: %q, want %q", job, e1, got, parked)
	}
	loc, err := Locate(ctx, rdb, "q", job)
	if err != nil {
		t.Fatal(err)
	}
	if loc.State != StateWaiting || loc.Key != "a" {
		t.Fatalf("located %s as %+v, want waiting in key a's stream", job, loc)
	}
}

// keyAckArgs are keyAckScript's keys and arguments as ackStreams sends
// them for one entry of each of streams, with no retention.
func keyAckArgs(k Keys, streams, entries, jobs []string) ([]string, []any) {
	var keys []string
	args := []any{len(streams)}
	var body, index []any
	for i, s := range streams {
		keys = append(keys, s, k.Stats, k.Done, k.Waiters, k.Results)
		args = append(args, 5, 6, 1)
		body = append(body, Group, 1, 0, 0, 0, entries[i])
		index = append(index, jobs[i], entries[i])
	}
	return append(keys, k.KeyJobs()), append(append(args, body...), index...)
}

// The acknowledgement of several key streams at once is made again after
// a lost reply (redisRetry), when the first call deleted a stream it
// emptied: the call again does nothing and succeeds. And one key stream
// gone before the call (its entry settled by a holder that claimed it)
// leaves the other streams' entries acknowledged, not pending to run again.
func TestKeyAckStreamGone(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	k := KeysFor("q")
	var streams, entries []string
	for _, key := range []string{"a", "b", "c"} {
		s := k.KeyStream(PriorityNormal, key)
		id := enqueueKeyed(t, rdb, key, 2)[0]
		readAs(t, rdb, "A", s)
		streams, entries = append(streams, s), append(entries, id)
	}
	// a's only other job is cancelled: a's ack below empties it.
	rest, _ := rdb.XRange(ctx, streams[0], "("+entries[0], "+").Result()
	rdb.XDel(ctx, streams[0], rest[0].ID)
	keys, args := keyAckArgs(k, streams[:2], entries[:2], entries[:2])
	for i := range 2 { // the second call: the first one's reply was lost
		if n, err := runScript(ctx, rdb, keyAckScript, keys, args...).Int64(); err != nil || n != int64(2-2*i) {
			t.Fatalf("ack call %d: acknowledged %d, %v; want %d", i+1, n, err, 2-2*i)
		}
	}
	if rdb.Exists(ctx, streams[0]).Val() != 0 {
		t.Fatalf("key stream %s left empty", streams[0])
	}
	// Gone before the call: a's stream; c's entry is still acknowledged.
	keys, args = keyAckArgs(k, []string{streams[0], streams[2]}, []string{entries[0], entries[2]}, []string{entries[0], entries[2]})
	if n, err := runScript(ctx, rdb, keyAckScript, keys, args...).Int64(); err != nil || n != 1 {
		t.Fatalf("ack with a stream gone: acknowledged %d, %v; want 1", n, err)
	}
	if p := rdb.XPending(ctx, streams[2], Group).Val(); p.Count != 0 {
		t.Fatalf("%d entries of %s still pending after their ack", p.Count, streams[2])
	}
}

// A key whose stream has nothing undelivered leaves its ring at its next
// turn, even when Redis overcounts the group's lag: here a waiting job is
// cancelled (an undelivered entry deleted) while the key's other job
// runs, which then fails into the retry schedule, leaving the stream with
// no entry (lag 1). The key stayed in the ring, and a holder with nothing
// to do kept taking turns (every keyPoll) until another holder's start
// swept the stream. (The rate limit keeps the holder from taking a turn
// between the cancel and the failure, as a long ring does.)
func TestKeyLeavesRingWhenLagOvercounts(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	k := KeysFor("q")
	ids := enqueueKeyed(t, rdb, "a", 2)
	started, release := make(chan struct{}), make(chan struct{})
	c := testConfig(rdb, HandlerFunc(func(_ context.Context, j *Job) error {
		if j.ID == ids[0] {
			close(started)
			<-release
		}
		return errors.New("fails")
	}))
	c.KeyCaps = KeyCaps{Default: 1}
	c.RateLimit = Rate{N: 1, Per: 3 * time.Second}
	c.RetryBackoff, c.RetryBackoffMax = time.Hour, time.Hour
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- Run(ctx, c, nil) }()
	<-started
	if res, err := Cancel(ctx, rdb, "q", ids[1]); err != nil || res[0].Outcome != CancelDone {
		t.Fatalf("cancel waiting job: %+v, %v", res, err)
	}
	close(release)
	waitWithin(t, 10*time.Second, func() bool { return rdb.ZCard(ctx, k.Retry).Val() == 1 })
	deadline := time.Now().Add(10 * time.Second)
	for rdb.LLen(ctx, k.KeyRing(PriorityNormal)).Val() != 0 {
		if time.Now().After(deadline) {
			s := k.KeyStream(PriorityNormal, "a")
			g, _ := rdb.XInfoGroups(ctx, s).Result()
			t.Fatalf("key a still in its ring, its stream of %d entries (groups %+v)", rdb.XLen(ctx, s).Val(), g)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}

// A give-back of a key stream's entry made again after a lost reply
// (redisRetry), when the first call emptied and deleted the stream, does
// nothing and succeeds: the entry went back to its level's stream once.
func TestKeyGiveBackAgainAfterStreamGone(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	k := KeysFor("q")
	s := k.KeyStream(PriorityNormal, "a")
	job := enqueueKeyed(t, rdb, "a", 1)[0]
	readAs(t, rdb, "A", s)
	for i := range 2 {
		n, err := runScript(ctx, rdb, backScript, []string{s, k.Stream}, Group, "A", job, 0, job).Int64()
		if err != nil || n != int64(1-i) {
			t.Fatalf("give-back call %d: %d, %v; want %d", i+1, n, err, 1-i)
		}
	}
	if n := rdb.XLen(ctx, k.Stream).Val(); n != 1 {
		t.Fatalf("level stream holds %d entries, want the job once", n)
	}
	if rdb.Exists(ctx, s).Val() != 0 {
		t.Fatal("emptied key stream left")
	}
}

// A keyed job dead-lettered leaves nothing of keys behind even when its
// holder never takes another turn (killed, or here fenced: its lease taken
// over before its next read): the dead letter drops the job's index entry
// and the key stream it emptied, instead of leaving the index entry to the
// holder's next take, which a lost holder never makes (one index entry
// kept for good per such job).
func TestKeyDeadLeavesNoIndexEntry(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	k := KeysFor("q")
	sl := runLease(t, rdb)
	job := enqueueKeyed(t, rdb, "a", 1)[0]
	key, token := sl.Fence()
	c := testConfig(rdb, HandlerFunc(func(context.Context, *Job) error { return ErrSkipRetry }))
	c.Consumer = "fleet/run-0"
	c.Fence = &Fence{Key: key, Token: token, Held: sl.(lock.Holding)}
	// no read (no take) for a while after the job's
	c.RateLimit = Rate{N: 1, Per: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- Run(ctx, c, nil) }()
	waitWithin(t, 10*time.Second, func() bool { return rdb.XLen(ctx, k.Dead).Val() == 1 })
	// The lease is another's now: this holder's writes are fenced.
	if err := rdb.HSet(ctx, key, "token", token+1000).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-errc:
	case <-time.After(20 * time.Second):
		t.Fatal("holder did not stop after its lease was taken over")
	}
	if v, err := rdb.HGet(ctx, k.KeyJobs(), job).Result(); err == nil {
		t.Fatalf("index entry of dead job %s left: %q", job, v)
	}
	keysClean(t, rdb)
}

// So for a batch member of a key stream, done: its acknowledgement drops
// its index entry and the stream it emptied, whatever its holder does next.
func TestKeyBatchMemberLeavesNoIndexEntry(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	k := KeysFor("q")
	sl := runLease(t, rdb)
	b, err := NewBatch(ctx, rdb, "q")
	if err != nil {
		t.Fatal(err)
	}
	ids, err := b.AddAndClose(ctx, Message{Payload: []byte("m"), Options: []Option{Key("a")}})
	if err != nil {
		t.Fatal(err)
	}
	key, token := sl.Fence()
	c := testConfig(rdb, HandlerFunc(func(context.Context, *Job) error { return nil }))
	c.Consumer = "fleet/run-0"
	c.Fence = &Fence{Key: key, Token: token, Held: sl.(lock.Holding)}
	c.RateLimit = Rate{N: 1, Per: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- Run(ctx, c, nil) }()
	waitWithin(t, 10*time.Second, func() bool { return rdb.HGet(ctx, k.Stats, "done").Val() == "1" })
	if err := rdb.HSet(ctx, key, "token", token+1000).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-errc:
	case <-time.After(20 * time.Second):
		t.Fatal("holder did not stop after its lease was taken over")
	}
	if v, err := rdb.HGet(ctx, k.KeyJobs(), ids[0]).Result(); err == nil {
		t.Fatalf("index entry of done member %s left: %q", ids[0], v)
	}
	keysClean(t, rdb)
}

// readAs reads one entry of stream s as consumer c (a holder's read).
func readAs(t *testing.T, rdb *redis.Client, c, s string) {
	t.Helper()
	if err := rdb.XReadGroup(context.Background(), &redis.XReadGroupArgs{Group: Group, Consumer: c, Streams: []string{s, ">"}, Count: 1}).Err(); err != nil {
		t.Fatal(err)
	}
}
