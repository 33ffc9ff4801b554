package work

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// A delayed job waits in the scheduled set, keeps the id Enqueue returned,
// and runs once due, about one keeper tick late at most.
func TestDelayedJob(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	const delay = 700 * time.Millisecond
	start := time.Now()
	id, err := Enqueue(ctx, rdb, "q", []byte("later"), In(delay))
	if err != nil {
		t.Fatal(err)
	}
	now, err := Enqueue(ctx, rdb, "q", []byte("now"), At(time.Now().Add(-time.Hour)))
	if err != nil {
		t.Fatal(err)
	}
	if n := rdb.ZCard(ctx, KeysFor("q").Scheduled).Val(); n != 1 {
		t.Fatalf("%d scheduled, want the delayed job only (a time in the past runs now)", n)
	}
	var mu sync.Mutex
	ran := map[string]time.Duration{}
	st := new(Stats)
	runUntil(t, testConfig(rdb, HandlerFunc(func(_ context.Context, j *Job) error {
		mu.Lock()
		ran[j.ID+" "+string(j.Payload)] = time.Since(start)
		mu.Unlock()
		return nil
	})), st, func() bool { return st.Done.Load() == 2 })
	late, ok := ran[id+" later"]
	if !ok || ran[now+" now"] == 0 {
		t.Fatalf("ran %v; want %s later and %s now", ran, id, now)
	}
	if late < delay || late > delay+keepEvery+2*time.Second {
		t.Fatalf("delayed job ran after %v, want %v plus at most a keeper tick (generous bound)", late, delay)
	}
	if ran[now+" now"] > delay+time.Second { // holder start-up included
		t.Fatalf("a job at a past time waited %v", ran[now+" now"])
	}
	settled(t, rdb, "q")
	if n := rdb.HLen(ctx, KeysFor("q").ScheduledJobs).Val(); n != 0 {
		t.Fatalf("%d scheduled records left", n)
	}
}

// A second job with the same unique key adds nothing while the first is
// queued; once the first is done the key is free again.
func TestUniqueJob(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	first, err := Enqueue(ctx, rdb, "q", []byte("a"), UniqueKey("img-1"))
	if err != nil {
		t.Fatal(err)
	}
	again, err := Enqueue(ctx, rdb, "q", []byte("b"), UniqueKey("img-1"), In(time.Hour))
	if !errors.Is(err, ErrDuplicate) || again != first {
		t.Fatalf("duplicate: id %q err %v, want %q and ErrDuplicate", again, err, first)
	}
	if n := rdb.XLen(ctx, KeysFor("q").Stream).Val(); n != 1 {
		t.Fatalf("stream holds %d, want 1", n)
	}
	// Failing once keeps the key (the job is retrying), success frees it.
	var runs atomic.Int64
	st := new(Stats)
	runUntil(t, fastRetry(testConfig(rdb, HandlerFunc(func(_ context.Context, j *Job) error {
		if runs.Add(1) == 1 {
			if _, err := Enqueue(ctx, rdb, "q", []byte("c"), UniqueKey("img-1")); !errors.Is(err, ErrDuplicate) {
				t.Errorf("while running: %v, want ErrDuplicate", err)
			}
			return errors.New("once")
		}
		return nil
	}))), st, func() bool { return st.Done.Load() == 1 })
	if n := rdb.Exists(ctx, KeysFor("q").Unique("img-1")).Val(); n != 0 {
		t.Fatal("unique key still held after the job was done")
	}
	next, err := Enqueue(ctx, rdb, "q", []byte("d"), UniqueKey("img-1"))
	if err != nil || next == first {
		t.Fatalf("after done: %q %v, want a new job", next, err)
	}
}

// A dead-lettered job frees its unique key; UniqueFor bounds the key.
func TestUniqueKeyFreedWhenDeadAndByTTL(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	if _, err := Enqueue(ctx, rdb, "q", []byte("a"), UniqueKey("k"), MaxAttempts(1)); err != nil {
		t.Fatal(err)
	}
	st := new(Stats)
	runUntil(t, testConfig(rdb, HandlerFunc(func(context.Context, *Job) error { return errors.New("no") })), st,
		func() bool { return st.Dead.Load() == 1 })
	if n := rdb.Exists(ctx, KeysFor("q").Unique("k")).Val(); n != 0 {
		t.Fatal("unique key still held after the job was dead-lettered")
	}
	if _, err := Enqueue(ctx, rdb, "q", []byte("b"), UniqueKey("t"), UniqueFor(100*time.Millisecond), In(time.Hour)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if _, err := Enqueue(ctx, rdb, "q", []byte("c"), UniqueKey("t")); err != nil {
		t.Fatalf("after unique-for: %v", err)
	}
}

// Per-job max attempts and timeout override the queue's; ErrSkipRetry
// dead-letters at once as rejected.
func TestPerJobOptionsAndSkipRetry(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	ids, err := EnqueueMany(ctx, rdb, "q", []Message{
		{Payload: []byte("once"), Options: []Option{MaxAttempts(1)}},
		{Payload: []byte("slow"), Options: []Option{Timeout(50 * time.Millisecond), MaxAttempts(1)}},
		{Payload: []byte("reject")},
	})
	if err != nil || len(ids) != 3 {
		t.Fatal(ids, err)
	}
	st := new(Stats)
	c := testConfig(rdb, HandlerFunc(func(ctx context.Context, j *Job) error {
		switch string(j.Payload) {
		case "slow":
			<-ctx.Done()
			return ctx.Err()
		case "reject":
			return fmt.Errorf("bad input: %w", ErrSkipRetry)
		}
		return errors.New("failed")
	}))
	c.MaxAttempts = 5
	runUntil(t, c, st, func() bool { return st.Dead.Load() == 3 })
	want := map[string]string{ids[0]: ReasonFailed, ids[1]: ReasonTimeout, ids[2]: ReasonRejected}
	for _, d := range deadLetters(t, rdb, "q") {
		if want[d.Values["orig"].(string)] != d.Values["reason"] || d.Values["attempts"] != "1" {
			t.Errorf("dead letter %v", d.Values)
		}
	}
	if st.Failed.Load() != 3 {
		t.Fatalf("%d runs failed, want 3 (each job ran once)", st.Failed.Load())
	}
}

// Bad options are refused before anything is sent.
func TestBadOptionsAddNothing(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	for _, opts := range [][]Option{
		{In(-time.Second)}, {UniqueKey("")}, {UniqueFor(time.Second)}, {MaxAttempts(0)}, {Timeout(0)},
		{UniqueKey("k"), UniqueFor(500 * time.Microsecond)},
	} {
		_, err := EnqueueMany(ctx, rdb, "q", []Message{{Payload: []byte("ok")}, {Payload: []byte("bad"), Options: opts}})
		if !errors.Is(err, ErrBadOption) {
			t.Errorf("%v: want ErrBadOption", err)
		}
	}
	if n := rdb.XLen(ctx, KeysFor("q").Stream).Val(); n != 0 {
		t.Fatalf("%d jobs added", n)
	}
}

// A Redis that lost the enqueue script (a restart, SCRIPT FLUSH) gets it again.
func TestEnqueueAfterScriptFlush(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	rdb.ScriptFlush(ctx)
	ids, err := EnqueueMany(ctx, rdb, "q", []Message{{Payload: []byte("a")}, {Payload: []byte("b"), Options: []Option{MaxAttempts(2)}}})
	if err != nil || ids[0] == "" || ids[1] == "" {
		t.Fatal(ids, err)
	}
	if n := rdb.XLen(ctx, KeysFor("q").Stream).Val(); n != 2 {
		t.Fatalf("stream holds %d, want 2", n)
	}
}

// Locate finds a job in every place it can be, by its id for life.
func TestLocate(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	ids, err := EnqueueMany(ctx, rdb, "q", []Message{
		{Payload: []byte("fails")}, {Payload: []byte("runs")}, {Payload: []byte("dies")},
		{Payload: []byte("waits")}, {Payload: []byte("later"), Options: []Option{In(time.Hour)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	state := func(id string) *Location {
		t.Helper()
		l, err := Locate(ctx, rdb, "q", id)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	if l := state(ids[3]); l.State != StateWaiting || l.Ahead != 3 {
		t.Fatalf("before any holder: %+v, want waiting with 3 ahead", l)
	}
	if l := state(ids[4]); l.State != StateScheduled || time.Until(l.Due) < 59*time.Minute {
		t.Fatalf("delayed: %+v", l)
	}
	running := make(chan struct{})
	release := make(chan struct{})
	c := testConfig(rdb, HandlerFunc(func(_ context.Context, j *Job) error {
		switch string(j.Payload) {
		case "fails":
			return errors.New("once")
		case "dies":
			return fmt.Errorf("never: %w", ErrSkipRetry)
		case "runs":
			close(running)
			<-release
		case "waits":
			<-release
		}
		return nil
	}))
	c.RetryBackoff, c.RetryBackoffMax = time.Hour, time.Hour
	c.Concurrency = 4 // two jobs block until release
	st := new(Stats)
	done := make(chan struct{})
	go func() {
		defer close(done)
		runUntil(t, c, st, func() bool { return st.Done.Load() == 2 })
	}()
	<-running
	if l := state(ids[1]); l.State != StateRunning || l.Consumer != "h/run-0" || l.Entry != ids[1] {
		t.Fatalf("running: %+v", l)
	}
	// Failed counts a failure before its move is written: wait for the
	// moves themselves.
	for end := time.Now().Add(20 * time.Second); st.Dead.Load() != 1 || st.Failed.Load() != 2 ||
		state(ids[0]).State != StateRetrying || state(ids[2]).State != StateDead; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			close(release)
			t.Fatalf("dead %d failed %d, want 1 and 2", st.Dead.Load(), st.Failed.Load())
		}
	}
	if l := state(ids[0]); l.State != StateRetrying || l.Attempts != 1 || time.Until(l.Due) < 29*time.Minute {
		t.Fatalf("retrying: %+v", l)
	}
	if l := state(ids[2]); l.State != StateDead || l.Dead.Reason != ReasonRejected {
		t.Fatalf("dead: %+v", l)
	}
	close(release)
	<-done
	if l := state(ids[1]); l.State != StateUnknown {
		t.Fatalf("done: %+v, want unknown (done jobs are not kept)", l)
	}
	// A retried job back in the stream is found under its new entry.
	rdb.ZAdd(ctx, KeysFor("q").Retry, redis.Z{Score: 0, Member: ids[0]})
	runScript(ctx, rdb, dueScript, KeysFor("q").due(), 10)
	if l := state(ids[0]); l.State != StateWaiting || l.Entry == ids[0] || l.Entry == "" {
		t.Fatalf("retried, back in the stream: %+v", l)
	}
}

// EnqueueMany sends jobs from the first with options on in script calls of
// up to scriptBatch jobs (plain jobs among them), and keeps every answer in
// job order: a duplicate inside one call gets the id of the job added before
// it.
func TestEnqueueManyMixedBatches(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	const n = 3*scriptBatch + 50
	msgs := make([]Message, n)
	for i := range msgs {
		msgs[i].Payload = []byte(fmt.Sprint(i))
		switch {
		case i%7 == 0: // plain, breaking the runs
		case i%3 == 0:
			msgs[i].Options = []Option{WithPriority(PriorityHigh), In(time.Hour)}
		default:
			msgs[i].Options = []Option{UniqueKey(fmt.Sprint(i % 100))}
		}
	}
	ids, err := EnqueueMany(ctx, rdb, "q", msgs)
	var dup *DuplicateError
	if !errors.As(err, &dup) {
		t.Fatalf("err %v, want a DuplicateError", err)
	}
	first := map[string]string{} // unique key → id of the job that took it
	wantDup := 0
	for i, id := range ids {
		if id == "" {
			t.Fatalf("job %d has no id", i)
		}
		if i%7 != 0 && i%3 != 0 {
			k := fmt.Sprint(i % 100)
			if f, ok := first[k]; ok {
				wantDup++
				if id != f {
					t.Fatalf("duplicate job %d got %s, want %s", i, id, f)
				}
			} else {
				first[k] = id
			}
		}
	}
	if len(dup.Jobs) != wantDup {
		t.Fatalf("%d duplicates reported, want %d", len(dup.Jobs), wantDup)
	}
	c, err := ReadCounts(ctx, rdb, "q")
	if err != nil {
		t.Fatal(err)
	}
	plain, delayed := 0, 0
	for i := range n {
		switch {
		case i%7 == 0:
			plain++
		case i%3 == 0:
			delayed++
		}
	}
	if c.Waiting != int64(plain+len(first)) || c.Scheduled != int64(delayed) {
		t.Fatalf("counts %+v; want %d waiting, %d scheduled", c, plain+len(first), delayed)
	}
}

// A job of a script call whose writes fail (a key of the wrong type) is
// reported by its number; the other jobs of the call are added.
func TestEnqueueManyReportsAFailedJob(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	rdb.Set(ctx, KeysFor("q").ScheduledJobs, "not a hash", 0)
	ids, err := EnqueueMany(ctx, rdb, "q", []Message{
		{Payload: []byte("a"), Options: []Option{MaxAttempts(3)}},
		{Payload: []byte("b"), Options: []Option{In(time.Hour)}},
		{Payload: []byte("c"), Options: []Option{Timeout(time.Second)}},
	})
	if err == nil || !strings.Contains(err.Error(), "job 2: WRONGTYPE") {
		t.Fatalf("err %v, want job 2's WRONGTYPE", err)
	}
	if ids[0] == "" || ids[1] != "" || ids[2] == "" {
		t.Fatalf("ids %q; want jobs 1 and 3 added", ids)
	}
	if n := rdb.XLen(ctx, KeysFor("q").Stream).Val(); n != 2 {
		t.Fatalf("stream holds %d, want 2", n)
	}
}

// Payloads of every size form of the packed arguments (up to a 32-bit
// length), holding every byte value, reach the stream intact through each
// path of the enqueue script: another level, a unique key with options, and
// a delayed record moved when due.
func TestEnqueueScriptKeepsBinaryPayloads(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	k := KeysFor("q")
	var msgs []Message
	for n, size := range []int{0, 1, 31, 32, 255, 256, 65535, 65536, 70000} {
		p := make([]byte, size)
		for i := range p {
			p[i] = byte(i*7 + n)
		}
		msgs = append(msgs,
			Message{Payload: p, Options: []Option{WithPriority(PriorityHigh)}},
			Message{Payload: p, Options: []Option{UniqueKey(fmt.Sprint("u", n)), MaxAttempts(3), Timeout(time.Minute)}},
			Message{Payload: p, Options: []Option{In(time.Hour), WithPriority(PriorityLow)}})
	}
	ids, err := EnqueueMany(ctx, rdb, "q", msgs)
	if err != nil {
		t.Fatal(err)
	}
	for i := 2; i < len(ids); i += 3 {
		rdb.ZAdd(ctx, k.Scheduled, redis.Z{Score: 0, Member: ids[i]}) // the delayed jobs, due now
	}
	if err := runScript(ctx, rdb, dueScript, k.due(), time.Now().UnixMilli(), 100).Err(); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{} // job id → payload
	for _, stream := range []string{k.High, k.Stream, k.Low} {
		for _, m := range rdb.XRange(ctx, stream, "-", "+").Val() {
			id := m.ID
			if orig, ok := m.Values["orig"].(string); ok {
				id = orig
			}
			got[id], _ = m.Values[PayloadField].(string)
		}
	}
	for i, id := range ids {
		p, ok := got[id]
		if !ok || p != string(msgs[i].Payload) {
			t.Fatalf("job %d (%s, %d bytes): in the streams %v, payload intact %v", i, id, len(msgs[i].Payload), ok, p == string(msgs[i].Payload))
		}
	}
}

// A script call also ends at about scriptBytes of packed arguments (one
// Redis argument, bounded by proto-max-bulk-len): many calls, every job
// added, ids in job order.
func TestEnqueueSplitsLargeScriptCalls(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	defer func(n int) { scriptBytes = n }(scriptBytes)
	scriptBytes = 1000
	msgs := make([]Message, 50)
	for i := range msgs {
		msgs[i] = Message{Payload: []byte(strings.Repeat(fmt.Sprint(i%10), 300)), Options: []Option{WithPriority(PriorityHigh)}}
	}
	if err := enqueueScript.Load(ctx, rdb).Err(); err != nil {
		t.Fatal(err)
	}
	rdb.ConfigResetStat(ctx)
	ids, err := EnqueueMany(ctx, rdb, "q", msgs)
	if err != nil {
		t.Fatal(err)
	}
	info := rdb.Info(ctx, "commandstats").Val()
	if !regexp.MustCompile(`cmdstat_evalsha:calls=(1\d|[2-9]\d),`).MatchString(info) {
		t.Fatalf("want 10 or more script calls of about 1,000 bytes for 50 jobs of 300 bytes (not one):\n%s", info)
	}
	for i := 1; i < len(ids); i++ {
		if !parseID(t, ids[i-1]).less(parseID(t, ids[i])) {
			t.Fatalf("ids out of order: %s then %s", ids[i-1], ids[i])
		}
	}
	if n := rdb.XLen(ctx, KeysFor("q").High).Val(); n != int64(len(msgs)) {
		t.Fatalf("%d jobs in the high stream, want %d", n, len(msgs))
	}
}
