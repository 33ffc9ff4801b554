package work

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/faultproxy"
	"github.com/baton-run/baton/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// The move order: a move whose destination cannot be written (a key of the
// wrong type here) leaves the entry pending, and the job is not lost; once
// the key is fixed, the slot's next holder settles it.
func TestMoveToWrongTypeKeyLeavesJobPending(t *testing.T) {
	for _, tc := range []struct {
		name, key   string
		maxAttempts int
	}{
		{"retry set", KeysFor("q").Retry, 5},
		{"retry jobs", KeysFor("q").RetryJobs, 5},
		{"dead letters", KeysFor("q").Dead, 1},
		{"dead index", KeysFor("q").DeadIndex, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb := redistest.Start(t).Client()
			ctx := context.Background()
			ids := enqueue(t, rdb, "q", 1)
			if err := rdb.Set(ctx, tc.key, "not a "+tc.name, 0).Err(); err != nil {
				t.Fatal(err)
			}
			var runs atomic.Int64
			fails := HandlerFunc(func(context.Context, *Job) error { runs.Add(1); return errors.New("boom") })
			c := testConfig(rdb, fails)
			c.MaxAttempts = tc.maxAttempts
			st := new(Stats)
			runUntil(t, c, st, func() bool { return runs.Load() == 1 && st.Failed.Load() == 1 })
			if p := pending(t, rdb, "q"); p != 1 {
				t.Fatalf("after a refused move: %d pending, want the job still pending", p)
			}
			if n := rdb.XLen(ctx, KeysFor("q").Stream).Val(); n != 1 {
				t.Fatalf("stream holds %d entries, want the job's", n)
			}
			// Nothing was written anywhere: no stray record, no index entry.
			for _, k := range []string{KeysFor("q").RetryJobs, KeysFor("q").DeadIndex} {
				if k != tc.key && rdb.Exists(ctx, k).Val() != 0 {
					t.Fatalf("a refused move left %s behind", k)
				}
			}
			// Fixed: the next holder of the slot replays it and, this time, it works.
			rdb.Del(ctx, tc.key)
			var got []*Job
			ok := HandlerFunc(func(_ context.Context, j *Job) error { got = append(got, j); return nil })
			st = new(Stats)
			runUntil(t, testConfig(rdb, ok), st, func() bool { return st.Done.Load() == 1 })
			if len(got) != 1 || got[0].ID != ids[0] || got[0].Attempt != 2 {
				t.Fatalf("replayed %+v, want job %s at attempt 2", got, ids[0])
			}
			settled(t, rdb, "q")
		})
	}
}

// Retries carry every byte of every field: a payload and a producer's own
// field holding '|', NUL and invalid UTF-8 come back exactly, and the job
// keeps its id.
func TestRetryKeepsEveryByteAndField(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	payload := "a|b|c\x00\xff|" + strings.Repeat("|", 10)
	trace := "t|1|\x00|2"
	id, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: KeysFor("q").Stream, Values: []any{PayloadField, payload, "trace", trace}}).Result()
	if err != nil {
		t.Fatal(err)
	}
	var runs []*Job
	h := HandlerFunc(func(_ context.Context, j *Job) error {
		runs = append(runs, j)
		if len(runs) < 3 {
			return errors.New("again")
		}
		return nil
	})
	st := new(Stats)
	var seen []map[string]any
	c := fastRetry(testConfig(rdb, HandlerFunc(func(ctx context.Context, j *Job) error {
		m, _ := rdb.XRange(ctx, KeysFor("q").Stream, j.Entry, j.Entry).Result()
		if len(m) == 1 {
			seen = append(seen, m[0].Values)
		}
		return h(ctx, j)
	})))
	runUntil(t, c, st, func() bool { return st.Done.Load() == 1 })
	if len(runs) != 3 {
		t.Fatalf("%d runs, want 3", len(runs))
	}
	for i, j := range runs {
		if string(j.Payload) != payload || j.ID != id || j.Attempt != i+1 {
			t.Fatalf("run %d: id %s payload %q attempt %d; want id %s payload %q", i, j.ID, j.Payload, j.Attempt, id, payload)
		}
		if seen[i]["trace"] != trace {
			t.Fatalf("run %d: producer field trace = %q, want %q", i, seen[i]["trace"], trace)
		}
	}
	if runs[1].Entry == runs[0].Entry {
		t.Fatal("a retry must come back as a new entry")
	}
	settled(t, rdb, "q")
	if n := rdb.HLen(ctx, KeysFor("q").RetryJobs).Val(); n != 0 {
		t.Fatalf("%d retry records left", n)
	}
}

// A retry scheduled by baton before 0.2 ("<entry>|<attempts>|<orig>|<payload>")
// still comes back.
func TestLegacyRetryMemberComesBack(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	member := "1-0|2|1-0|old|payload"
	if err := rdb.ZAdd(ctx, KeysFor("q").Retry, redis.Z{Score: 0, Member: member}).Err(); err != nil {
		t.Fatal(err)
	}
	var got *Job
	st := new(Stats)
	runUntil(t, testConfig(rdb, HandlerFunc(func(_ context.Context, j *Job) error { got = j; return nil })), st,
		func() bool { return st.Done.Load() == 1 })
	if got.ID != "1-0" || string(got.Payload) != "old|payload" || got.Attempt != 3 {
		t.Fatalf("legacy retry came back as %+v", got)
	}
}

// With EVALSHA renamed away no job could ever be acknowledged: Run refuses
// to start, and runs nothing.
func TestScriptingDisabledRefusesToRun(t *testing.T) {
	srv := redistest.Start(t, redistest.Option{"--rename-command", "EVALSHA", "", "--rename-command", "EVAL", ""})
	rdb := srv.Client()
	enqueue(t, rdb, "q", 3)
	var runs atomic.Int64
	st := new(Stats)
	err := Run(context.Background(), testConfig(rdb, HandlerFunc(func(context.Context, *Job) error { runs.Add(1); return nil })), st)
	if !errors.Is(err, ErrNoScripting) {
		t.Fatalf("Run: %v, want ErrNoScripting", err)
	}
	if runs.Load() != 0 || st.Done.Load() != 0 {
		t.Fatalf("ran %d jobs, reported %d done; want none", runs.Load(), st.Done.Load())
	}
}

// At maxmemory with noeviction, a holder starts (the group exists) and works
// through what is queued: acknowledging frees memory.
func TestOOMKeepsWorkingTheQueue(t *testing.T) {
	rdb := redistest.Start(t, redistest.Option{"--maxmemory-policy", "noeviction"}).Client()
	ctx := context.Background()
	enqueue(t, rdb, "q", 50)
	if err := Prepare(ctx, rdb, KeysFor("q")); err != nil {
		t.Fatal(err)
	}
	fillToOOM(t, rdb)
	if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: KeysFor("q").Stream, Values: []any{PayloadField, "x"}}).Err(); !IsOOM(err) {
		t.Fatalf("XADD at maxmemory: %v, want OOM", err)
	}
	st := new(Stats)
	err := runUntil(t, testConfig(rdb, HandlerFunc(func(context.Context, *Job) error { return nil })), st,
		func() bool { return st.Done.Load() == 50 })
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	settled(t, rdb, "q")

	// A queue with no group yet cannot be created at maxmemory: a clear error.
	err = Prepare(ctx, rdb, KeysFor("other"))
	if !errors.Is(err, ErrOOM) {
		t.Fatalf("Prepare of a new queue at maxmemory: %v, want ErrOOM", err)
	}
}

// fillToOOM writes 2 MiB of junk, then sets maxmemory 1 MiB below what
// Redis uses: every write that needs memory is refused from then on.
func fillToOOM(tb testing.TB, rdb *redis.Client) {
	tb.Helper()
	ctx := context.Background()
	junk := strings.Repeat("j", 16<<10)
	for i := 0; i < 128; i++ {
		if err := rdb.Set(ctx, "junk:"+strconv.Itoa(i), junk, 0).Err(); err != nil {
			tb.Fatal(err)
		}
	}
	used, err := strconv.ParseInt(rdb.InfoMap(ctx, "memory").Val()["Memory"]["used_memory"], 10, 64)
	if err != nil {
		tb.Fatal(err)
	}
	if err := rdb.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used-1<<20, 10)).Err(); err != nil {
		tb.Fatal(err)
	}
}

// A Go handler's context is cancelled at JobTimeout; its error counts as a
// timeout: retried, then dead-lettered as "timeout".
func TestJobTimeoutForGoHandlers(t *testing.T) {
	rdb := redistest.Start(t).Client()
	enqueue(t, rdb, "q", 1)
	var runs atomic.Int64
	h := HandlerFunc(func(ctx context.Context, j *Job) error {
		runs.Add(1)
		<-ctx.Done()
		if !errors.Is(context.Cause(ctx), ErrJobTimeout) {
			t.Errorf("cause %v, want ErrJobTimeout", context.Cause(ctx))
		}
		return ctx.Err()
	})
	c := fastRetry(testConfig(rdb, h))
	c.JobTimeout, c.MaxAttempts = 50*time.Millisecond, 2
	st := new(Stats)
	start := time.Now()
	runUntil(t, c, st, func() bool { return st.Dead.Load() == 1 })
	if runs.Load() != 2 {
		t.Fatalf("%d runs, want 2", runs.Load())
	}
	d := deadLetters(t, rdb, "q")
	if len(d) != 1 || d[0].Values["reason"] != ReasonTimeout {
		t.Fatalf("dead letters %v, want one with reason timeout", d)
	}
	if el := time.Since(start); el > 20*time.Second {
		t.Fatalf("took %v", el)
	}
}

// A holder's heartbeat keeps its own running entries fresh, and never takes
// back an entry another holder claimed meanwhile (after a stall longer than
// visibility_timeout): one job must not run in two places at once.
func TestHeartbeatNeverTakesAnEntryBack(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	ids := enqueue(t, rdb, "q", 2)
	if err := Prepare(ctx, rdb, KeysFor("q")); err != nil {
		t.Fatal(err)
	}
	stream := KeysFor("q").Stream
	if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: Group, Consumer: "a", Streams: []string{stream, ">"}, Count: 2}).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // both entries idle that long
	// Holder b claims the first entry, as after a stall of holder a.
	if err := rdb.XClaim(ctx, &redis.XClaimArgs{Stream: stream, Group: Group, Consumer: "b", Messages: ids[:1]}).Err(); err != nil {
		t.Fatal(err)
	}
	r := &runner{c: Config{Client: rdb, Consumer: "a"}, keys: KeysFor("q"), active: map[entryKey]*Job{{level: PriorityNormal, id: ids[0]}: {}, {level: PriorityNormal, id: ids[1]}: {}}}
	if err := r.heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	pend, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: Group, Start: "-", End: "+", Count: 10}).Result()
	if err != nil {
		t.Fatal(err)
	}
	owner := map[string]string{}
	for _, p := range pend {
		owner[p.ID] = p.Consumer
		if p.ID == ids[1] && p.Idle >= 250*time.Millisecond {
			t.Errorf("a's own entry not refreshed: idle %v", p.Idle)
		}
	}
	if owner[ids[0]] != "b" || owner[ids[1]] != "a" {
		t.Fatalf("owners %v, want %s with b and %s with a", owner, ids[0], ids[1])
	}
}

// An ack batch part of which another holder claimed and settled first
// counts the acked jobs as done, and adds its durations to the histogram
// only when all of it was acked: the other holder counted its part.
func TestPartialAckLeavesHistogramToTheOtherHolder(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	k := KeysFor("q")
	if err := Prepare(ctx, rdb, k); err != nil {
		t.Fatal(err)
	}
	ids := enqueue(t, rdb, "q", 2)
	rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: Group, Consumer: "a", Streams: []string{k.Stream, ">"}, Count: 2})
	rdb.XClaim(ctx, &redis.XClaimArgs{Stream: k.Stream, Group: Group, Consumer: "b", Messages: ids[1:]})
	rdb.XAck(ctx, k.Stream, Group, ids[1]) // b ran it too, and settled it first
	r := &runner{c: Config{Client: rdb, Consumer: "a", Logger: testLogger(), RedisDownExit: time.Second}, keys: k,
		st: new(Stats), active: map[entryKey]*Job{}, space: make(chan struct{}, 1)}
	var b ackBatch
	for _, id := range ids {
		b.ids = append(b.ids, id)
		b.hist.add(time.Millisecond)
	}
	r.ack(entryKey{level: PriorityNormal}, &b)
	stats := rdb.HGetAll(ctx, k.Stats).Val()
	if stats[StatDone] != "1" || stats[StatDurSumUS] != "" {
		t.Fatalf("stats %v: want done 1 and no durations", stats)
	}
}

// TestPrepareLoadsOnlyMissingScripts: Prepare asks Redis which scripts it
// has in one call and loads only the missing ones (a promoted standby
// prepares again as it starts work); after a SCRIPT FLUSH it loads them
// all again, and a job runs.
func TestPrepareLoadsOnlyMissingScripts(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	loads := func() int {
		info := rdb.Info(ctx, "commandstats").Val()
		for _, line := range strings.Split(info, "\n") {
			if rest, ok := strings.CutPrefix(line, "cmdstat_script|load:calls="); ok {
				n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
				return n
			}
		}
		return 0
	}
	k := KeysFor("q")
	if err := Prepare(ctx, rdb, k); err != nil {
		t.Fatal(err)
	}
	if n := loads(); n != len(scripts) {
		t.Fatalf("first Prepare: %d SCRIPT LOADs, want %d", n, len(scripts))
	}
	if err := Prepare(ctx, rdb, k); err != nil {
		t.Fatal(err)
	}
	if n := loads(); n != len(scripts) {
		t.Fatalf("second Prepare loaded %d scripts again, want none", n-len(scripts))
	}
	rdb.ScriptFlush(ctx)
	enqueue(t, rdb, "q", 1)
	st := new(Stats)
	runUntil(t, testConfig(rdb, HandlerFunc(func(context.Context, *Job) error { return nil })), st,
		func() bool { return st.Done.Load() == 1 })
	if n := loads(); n != 2*len(scripts) {
		t.Fatalf("after SCRIPT FLUSH: %d SCRIPT LOADs in all, want %d", n, 2*len(scripts))
	}
}

// TestLostReadReplyIsNoCrash: a read whose reply is lost on the way (the
// entry is delivered, and pending for this slot, but the holder never saw
// it) is read again from the slot's own pending entries once Redis answers
// again, and runs once. Nobody crashed: failed:crashed stays at 0.
func TestLostReadReplyIsNoCrash(t *testing.T) {
	srv := redistest.Start(t)
	direct := srv.Client()
	ctx := context.Background()
	if err := EnsureGroup(ctx, direct, KeysFor("q")); err != nil {
		t.Fatal(err)
	}
	px, err := faultproxy.Start(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	rdb := redis.NewClient(&redis.Options{Addr: px.Addr, ReadTimeout: 300 * time.Millisecond, MaxRetries: -1})
	defer rdb.Close()
	var attempts []int
	var mu sync.Mutex
	h := HandlerFunc(func(_ context.Context, j *Job) error {
		mu.Lock()
		defer mu.Unlock()
		attempts = append(attempts, j.Attempt)
		return nil
	})
	c := testConfig(rdb, h)
	c.Block = time.Second
	st := new(Stats)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- Run(runCtx, c, st) }()
	// The holder waits in XREADGROUP BLOCK; its reply goes nowhere.
	for end := time.Now().Add(5 * time.Second); !strings.Contains(direct.Info(ctx, "clients").Val(), "blocked_clients:1"); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the holder never blocked in its read")
		}
	}
	px.Blackhole(true)
	enqueue(t, direct, "q", 1)
	for end := time.Now().Add(5 * time.Second); pending(t, direct, "q") != 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the entry was never delivered to the blocked read")
		}
	}
	time.Sleep(100 * time.Millisecond)
	px.Blackhole(false)
	px.Reset()
	for end := time.Now().Add(15 * time.Second); st.Done.Load() != 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("the job delivered into the lost reply never ran (attempts %v)", attempts)
		}
	}
	cancel()
	if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(attempts) != 1 {
		t.Fatalf("ran %d times (attempts %v), want once", len(attempts), attempts)
	}
	if n := direct.HGet(ctx, KeysFor("q").Stats, StatFailedPrefix+FailedCrashed).Val(); n != "" && n != "0" {
		t.Fatalf("failed:crashed = %q after a lost reply, want 0: nobody crashed", n)
	}
	settled(t, direct, "q")
}
