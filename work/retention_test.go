package work

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// With a retention, every done job is remembered under its id for life,
// whatever its level, its unique key, or its retries: Locate says done, at
// about now, and the record set expires after the retention.
func TestRetentionRecordsDoneJobs(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	ids, err := EnqueueMany(ctx, rdb, "q", []Message{
		{Payload: []byte("high"), Options: []Option{WithPriority(PriorityHigh)}},
		{Payload: []byte("normal")},
		{Payload: []byte("low"), Options: []Option{WithPriority(PriorityLow)}},
		{Payload: []byte("unique"), Options: []Option{UniqueKey("u1"), WithPriority(PriorityLow)}},
		{Payload: []byte("retried")}, // done under another entry id than its job id
		{Payload: []byte("delayed"), Options: []Option{In(10 * time.Millisecond), WithPriority(PriorityHigh)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	failed := false
	c := testConfig(rdb, HandlerFunc(func(_ context.Context, j *Job) error {
		mu.Lock()
		defer mu.Unlock()
		if string(j.Payload) == "retried" && !failed {
			failed = true
			return errors.New("once")
		}
		return nil
	}))
	c.RetryBackoff, c.RetryBackoffMax = 10*time.Millisecond, 10*time.Millisecond
	c.Retention = time.Hour
	c.Concurrency = 4
	st := new(Stats)
	start := time.Now()
	runUntil(t, c, st, func() bool { return st.Done.Load() == int64(len(ids)) })
	for _, id := range ids {
		l, err := Locate(ctx, rdb, "q", id)
		if err != nil {
			t.Fatal(err)
		}
		if l.State != StateDone || l.DoneAt.Before(start.Add(-time.Second)) || time.Since(l.DoneAt) > 30*time.Second {
			t.Errorf("job %s: %+v, want done since %s", id, l, start.Format(time.StampMilli))
		}
	}
	k := KeysFor("q")
	if n := rdb.ZCard(ctx, k.Done).Val(); n != int64(len(ids)) {
		t.Errorf("%d done records, want %d", n, len(ids))
	}
	if ttl := rdb.PTTL(ctx, k.Done).Val(); ttl <= 59*time.Minute || ttl > time.Hour {
		t.Errorf("done records expire in %s, want about the retention (1h)", ttl)
	}
	if n := rdb.Exists(ctx, k.Unique("u1")).Val(); n != 0 {
		t.Errorf("unique key still held after its job was done")
	}
	for _, s := range []string{k.Stream, k.High, k.Low} {
		if n := rdb.XLen(ctx, s).Val(); n != 0 {
			t.Errorf("%s holds %d entries after all were done", s, n)
		}
	}
	// With a backlog, a done job is told from its record: no stream scan.
	enqueue(t, rdb, "q", 3000)
	rdb.ConfigResetStat(ctx)
	if l, err := Locate(ctx, rdb, "q", ids[4]); err != nil || l.State != StateDone {
		t.Errorf("job %s behind a backlog: %+v (%v), want done", ids[4], l, err)
	}
	if info := rdb.Info(ctx, "commandstats").Val(); strings.Contains(info, "cmdstat_xrevrange") {
		t.Errorf("locating a done job scanned a stream:\n%s", info)
	}
}

// With retention 0 (the default) the ack script writes no done record.
func TestNoRetentionRecordsNothing(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	ids := enqueue(t, rdb, "q", 20)
	st := new(Stats)
	runUntil(t, testConfig(rdb, HandlerFunc(func(context.Context, *Job) error { return nil })), st,
		func() bool { return st.Done.Load() == 20 })
	if n := rdb.Exists(ctx, KeysFor("q").Done).Val(); n != 0 {
		t.Fatalf("retention 0 wrote the done records")
	}
	if l, err := Locate(ctx, rdb, "q", ids[0]); err != nil || l.State != StateUnknown {
		t.Fatalf("done job with retention 0: %+v, %v; want unknown", l, err)
	}
}

// At each ack, records older than the retention are dropped, and beyond
// retention_max the oldest go first; the key's TTL is the retention.
func TestRetentionBounds(t *testing.T) {
	now := time.Now().UnixMilli()
	for _, tc := range []struct {
		name   string
		max    int
		seeded map[string]int64 // job id → done at (ms)
		kept   []string         // seeded records left after the ack
	}{
		{"older than the retention", 100,
			map[string]int64{"1-0": now - 2*time.Hour.Milliseconds(), "2-0": now - 61*time.Minute.Milliseconds(), "3-0": now - 59*time.Minute.Milliseconds()},
			[]string{"3-0"}},
		{"beyond retention_max", 3,
			map[string]int64{"1-0": now - 50*60000, "2-0": now - 40*60000, "3-0": now - 30*60000, "4-0": now - 20*60000, "5-0": now - 10*60000},
			[]string{"5-0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb := redistest.Start(t).Client()
			ctx := context.Background()
			k := KeysFor("q")
			for id, at := range tc.seeded {
				rdb.ZAdd(ctx, k.Done, redis.Z{Score: float64(at), Member: id})
			}
			ids := enqueue(t, rdb, "q", 2)
			c := testConfig(rdb, HandlerFunc(func(context.Context, *Job) error { return nil }))
			c.Retention, c.RetentionMax = time.Hour, tc.max
			st := new(Stats)
			runUntil(t, c, st, func() bool { return st.Done.Load() == 2 })
			got := rdb.ZRange(ctx, k.Done, 0, -1).Val()
			want := append(slices.Clone(tc.kept), ids...)
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("done records %v, want %v", got, want)
			}
			if ttl := rdb.PTTL(ctx, k.Done).Val(); ttl <= 59*time.Minute || ttl > time.Hour {
				t.Errorf("done records expire in %s, want about the retention (1h)", ttl)
			}
		})
	}
}

// The ack script's arguments: the job ids come after the unique keys' ids,
// and a retention under the records' age leaves only the new ones.
func TestAckScriptRecordsJobIDs(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	k := KeysFor("q")
	if err := EnsureGroup(ctx, rdb, k); err != nil {
		t.Fatal(err)
	}
	entries := enqueue(t, rdb, "q", 2)
	if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: Group, Consumer: "c", Streams: []string{k.Stream, ">"}}).Err(); err != nil {
		t.Fatal(err)
	}
	rdb.Set(ctx, k.Unique("a"), "job-a", 0)
	rdb.ZAdd(ctx, k.Done, redis.Z{Score: 1, Member: "old-0"})
	n, err := ackScript.Run(ctx, rdb, []string{k.Stream, k.Stats, k.Done, k.Waiters, k.Results, k.Unique("a")},
		Group, 2, 0, 60000, 10, entries[0], entries[1], "job-a", "job-a", "job-b").Int()
	if err != nil || n != 2 {
		t.Fatalf("acked %d: %v", n, err)
	}
	if got := rdb.ZRange(ctx, k.Done, 0, -1).Val(); !slices.Equal(got, []string{"job-a", "job-b"}) {
		t.Errorf("done records %v, want the two job ids", got)
	}
	if rdb.Exists(ctx, k.Unique("a")).Val() != 0 {
		t.Errorf("unique key not freed")
	}
	at := rdb.ZScore(ctx, k.Done, "job-a").Val()
	if d := time.Since(time.UnixMilli(int64(at))); d < -time.Second || d > 10*time.Second {
		t.Errorf("done at %s, want Redis' now", strconv.FormatFloat(at, 'f', 0, 64))
	}
}
