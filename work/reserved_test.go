package work

import (
	"context"
	"errors"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// Two entries that claim one job id (a producer's raw XADD whose orig names
// a job that is queued) both fail once: neither is lost. The first keeps
// the id and is retried; the second is dead-lettered as malformed, saying
// why, never written over the first one's retry record.
func TestTwoEntriesClaimingOneIDLoseNothing(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	s := KeysFor("q").Stream
	a := rdb.XAdd(ctx, &redis.XAddArgs{Stream: s, Values: []any{PayloadField, "real"}}).Val()
	b := rdb.XAdd(ctx, &redis.XAddArgs{Stream: s, Values: []any{PayloadField, "impostor", jobField, a}}).Val()
	var mu sync.Mutex
	ok := map[string]string{} // payload → job id it succeeded as
	h := HandlerFunc(func(_ context.Context, j *Job) error {
		if j.Attempt == 1 {
			return errors.New("first run fails")
		}
		mu.Lock()
		defer mu.Unlock()
		ok[string(j.Payload)] = j.ID
		return nil
	})
	c := fastRetry(testConfig(rdb, h))
	st := new(Stats)
	runUntil(t, c, st, func() bool { return st.Done.Load()+st.Dead.Load() == 2 })
	// Every payload is accounted for: done, or in the dead letters.
	mu.Lock()
	defer mu.Unlock()
	if ok["real"] != a {
		t.Fatalf("the job enqueued first did not run again as %s: %v", a, ok)
	}
	letters := deadLetters(t, rdb, "q")
	// Dead-lettered under its own entry id, so that its letter does not
	// take the other's id either; the error names the id it claimed.
	if len(letters) != 1 || letters[0].Values[PayloadField] != "impostor" || letters[0].Values[jobField] != b ||
		letters[0].Values[deadReason] != ReasonMalformed || !strings.Contains(letters[0].Values[deadError].(string), a) {
		t.Fatalf("dead letters %v, want the second claimant as malformed under %s, naming %s", letters, b, a)
	}
	settled(t, rdb, "q")
	if n := rdb.HLen(ctx, KeysFor("q").RetryJobs).Val(); n != 0 {
		t.Fatalf("%d retry records left", n)
	}
}

// Two entries claiming one job id both fail for good: each gets its own
// dead letter, the second under its own entry id, and the job id still
// names the first one's letter.
func TestTwoDeadLettersClaimingOneID(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	s := KeysFor("q").Stream
	a := rdb.XAdd(ctx, &redis.XAddArgs{Stream: s, Values: []any{PayloadField, "real"}}).Val()
	b := rdb.XAdd(ctx, &redis.XAddArgs{Stream: s, Values: []any{PayloadField, "impostor", jobField, a}}).Val()
	c := testConfig(rdb, HandlerFunc(func(context.Context, *Job) error { return errors.New("fails") }))
	c.MaxAttempts = 1
	st := new(Stats)
	runUntil(t, c, st, func() bool { return st.Dead.Load() == 2 })
	letters := deadLetters(t, rdb, "q")
	if len(letters) != 2 || letters[0].Values[jobField] != a || letters[1].Values[jobField] != b ||
		!strings.Contains(letters[1].Values[deadError].(string), a) {
		t.Fatalf("dead letters %v, want %s's, then the impostor's under %s", letters, a, b)
	}
	d, err := GetDead(ctx, rdb, "q", a)
	if err != nil || string(d.Payload) != "real" {
		t.Fatalf("dead letter of %s: %+v %v", a, d, err)
	}
	settled(t, rdb, "q")
}

// The retry script never writes over another job's retry record: the
// collision is reported (-2) and the entry stays pending, unmoved.
func TestRetryNeverOverwritesARecord(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	k := KeysFor("q")
	if err := Prepare(ctx, rdb, k); err != nil {
		t.Fatal(err)
	}
	ids := enqueue(t, rdb, "q", 2)
	rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: Group, Consumer: "c", Streams: []string{k.Stream, ">"}, Count: 2})
	keys := []string{k.Stream, k.Retry, k.RetryJobs, k.Stats}
	if n, err := retryScript.Run(ctx, rdb, keys, Group, ids[0], "c", 10000, ids[0], 1, "failed:error").Int64(); n != 1 {
		t.Fatalf("first retry: %d %v", n, err)
	}
	before := rdb.HGet(ctx, k.RetryJobs, ids[0]).Val()
	n, err := retryScript.Run(ctx, rdb, keys, Group, ids[1], "c", 10000, ids[0], 1, "failed:error").Int64()
	if err != nil || n != -2 {
		t.Fatalf("second entry claiming %s: %d %v, want -2", ids[0], n, err)
	}
	if after := rdb.HGet(ctx, k.RetryJobs, ids[0]).Val(); after != before {
		t.Fatal("the first job's retry record was written over")
	}
	if p := pending(t, rdb, "q"); p != 1 {
		t.Fatalf("%d pending, want the second entry still pending", p)
	}
}

// Reserved fields a producer wrote with values baton never writes are not
// trusted: the entry is dead-lettered as malformed, unrun, under its own
// entry id (a well-formed orig beside the bad field is not trusted either),
// saying which field, and the queue goes on.
func TestBadReservedFieldsAreMalformed(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	s := KeysFor("q").Stream
	type entry struct{ name, field, value, id string }
	var bad []*entry
	for _, e := range []entry{
		{"attempts overflow", attemptsField, strconv.FormatInt(math.MaxInt64, 10), ""},
		{"attempts absurd", attemptsField, "4294967296", ""},
		{"attempts negative", attemptsField, "-1", ""},
		{"attempts not a number", attemptsField, "1e3", ""},
		{"orig not an id", jobField, "nonsense", ""},
		{"orig three parts", jobField, "1-2-3", ""},
		{"orig newer than its entry", jobField, "99999999999999-0", ""},
		{"max_attempts zero", maxAttemptsField, "0", ""},
		{"max_attempts huge", maxAttemptsField, strconv.FormatInt(math.MaxInt64, 10), ""},
		{"max_attempts not a number", maxAttemptsField, "five", ""},
		{"timeout not a number", timeoutField, "1h", ""},
		{"timeout overflow", timeoutField, strconv.FormatInt(math.MaxInt64, 10), ""},
		{"priority unknown", priorityField, "urgent", ""},
	} {
		for _, orig := range []bool{false, true} {
			if orig && e.field == jobField {
				continue
			}
			e := e
			values := []any{PayloadField, "bad " + e.name, e.field, e.value}
			if orig {
				e.name += " with an orig"
				values = []any{PayloadField, "bad " + e.name, e.field, e.value, jobField, "1-0"}
			}
			e.id = rdb.XAdd(ctx, &redis.XAddArgs{Stream: s, Values: values}).Val()
			bad = append(bad, &e)
		}
	}
	rdb.XAdd(ctx, &redis.XAddArgs{Stream: s, Values: []any{PayloadField, "fine"}})
	var mu sync.Mutex
	var ran []string
	h := HandlerFunc(func(_ context.Context, j *Job) error {
		mu.Lock()
		defer mu.Unlock()
		ran = append(ran, string(j.Payload))
		return errors.New("fails")
	})
	c := fastRetry(testConfig(rdb, h))
	c.MaxAttempts = 2
	st := new(Stats)
	runUntil(t, c, st, func() bool { return st.Dead.Load() == int64(len(bad))+1 })
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(ran, ",") != "fine,fine" {
		t.Fatalf("ran %v: no bad entry may run", ran)
	}
	letters := map[string]redis.XMessage{}
	for _, m := range deadLetters(t, rdb, "q") {
		letters[m.Values[PayloadField].(string)] = m
	}
	for _, e := range bad {
		got := letters["bad "+e.name]
		if got.Values[deadReason] != ReasonMalformed || got.Values[jobField] != e.id ||
			!strings.Contains(got.Values[deadError].(string), strconv.Quote(e.field)) {
			t.Errorf("%s: dead letter %v, want malformed under its entry id %s, naming %q", e.name, got.Values, e.id, e.field)
		}
	}
	settled(t, rdb, "q")
}

// Values baton itself writes in reserved fields are read as before.
func TestGoodReservedFieldsAreKept(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	s := KeysFor("q").Stream
	first := rdb.XAdd(ctx, &redis.XAddArgs{Stream: s, Values: []any{PayloadField, "x"}}).Val()
	rdb.XDel(ctx, s, first)
	rdb.XAdd(ctx, &redis.XAddArgs{Stream: s, Values: []any{PayloadField, "y", jobField, first, attemptsField, "2",
		maxAttemptsField, "1000", timeoutField, "0", priorityField, "normal"}})
	var got *Job
	st := new(Stats)
	runUntil(t, testConfig(rdb, HandlerFunc(func(_ context.Context, j *Job) error { got = j; return nil })), st,
		func() bool { return st.Done.Load() == 1 })
	if got.ID != first || got.Attempt != 3 || got.maxAttempts != 1000 || got.Timeout != 0 {
		t.Fatalf("job %+v", got)
	}
}

// The backoff never overflows nor panics, whatever the attempt count and
// the configured delays.
func TestBackoffNeverOverflows(t *testing.T) {
	for _, c := range []Config{
		{RetryBackoff: time.Second, RetryBackoffMax: 10 * time.Minute},
		{RetryBackoff: time.Hour, RetryBackoffMax: 1000 * time.Hour},
		{RetryBackoff: math.MaxInt64 / 3, RetryBackoffMax: math.MaxInt64},
		{RetryBackoff: time.Nanosecond, RetryBackoffMax: math.MaxInt64},
	} {
		r := &runner{c: c}
		for _, attempt := range []int{math.MinInt, -1, 0, 1, 2, 39, 40, 41, 62, 63, 64, 65, 1000, math.MaxInt32, math.MaxInt} {
			d := r.backoff(attempt)
			if d < 0 || d > c.RetryBackoffMax {
				t.Fatalf("backoff(%d) with %v..%v = %v, want within [0, max]", attempt, c.RetryBackoff, c.RetryBackoffMax, d)
			}
			if attempt <= 1 && d > c.RetryBackoff {
				t.Fatalf("backoff(%d) = %v, want at most the first delay %v", attempt, d, c.RetryBackoff)
			}
		}
	}
}

// panicky is an error whose Error method panics: a handler's bug.
type panicky struct{}

func (panicky) Error() string { panic("Error() of a broken error type") }

// A panic while settling a job (here a handler's error whose Error method
// panics) never takes the holder down: it is logged, the other jobs are
// settled, and the job stays pending, so the slot's next holder finds it and
// dead-letters it as crashed after max_attempts deliveries.
func TestSettlerSurvivesAPanic(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ids := enqueue(t, rdb, "q", 3)
	var mu sync.Mutex
	var ran []string
	h := HandlerFunc(func(_ context.Context, j *Job) error {
		mu.Lock()
		defer mu.Unlock()
		ran = append(ran, string(j.Payload))
		if j.ID == ids[1] {
			return panicky{}
		}
		return nil
	})
	c := testConfig(rdb, h)
	c.MaxAttempts = 1
	st := new(Stats)
	if err := runUntil(t, c, st, func() bool { return st.Done.Load() == 2 }); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if p := pending(t, rdb, "q"); p != 1 {
		t.Fatalf("%d pending, want the job whose settling panicked", p)
	}
	// The slot's next holder replays it: delivered twice, never finished.
	st = new(Stats)
	runUntil(t, c, st, func() bool { return st.Dead.Load() == 1 })
	letters := deadLetters(t, rdb, "q")
	if len(letters) != 1 || letters[0].Values[jobField] != ids[1] || letters[0].Values[deadReason] != ReasonCrashed {
		t.Fatalf("dead letters %v", letters)
	}
	mu.Lock()
	defer mu.Unlock()
	sort.Strings(ran)
	if strings.Join(ran, ",") != "job-0,job-1,job-2" {
		t.Fatalf("ran %v", ran)
	}
	settled(t, rdb, "q")
}
