package work

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// streamID is a stream entry id read as numbers, to compare ids.
type streamID struct{ ms, seq uint64 }

func parseID(tb testing.TB, id string) streamID {
	tb.Helper()
	ms, seq, ok := strings.Cut(id, "-")
	m, err1 := strconv.ParseUint(ms, 10, 64)
	s, err2 := strconv.ParseUint(seq, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		tb.Fatalf("%q is not a stream id", id)
	}
	return streamID{m, s}
}

func (a streamID) less(b streamID) bool { return a.ms < b.ms || a.ms == b.ms && a.seq < b.seq }

// mixedJobs is n jobs of every kind the enqueue script handles, in turn:
// plain, delayed, high, low, delayed high, unique (a key of their own),
// normal with options, at a past time, delayed low with a unique key held
// for an hour at most.
func mixedJobs(tag string, n int) []Message {
	msgs := make([]Message, n)
	for i := range msgs {
		m := &msgs[i]
		m.Payload = []byte(tag + "-" + strconv.Itoa(i))
		switch i % 9 {
		case 1:
			m.Options = []Option{In(time.Hour)}
		case 2:
			m.Options = []Option{WithPriority(PriorityHigh)}
		case 3:
			m.Options = []Option{WithPriority(PriorityLow)}
		case 4:
			m.Options = []Option{In(time.Hour), WithPriority(PriorityHigh)}
		case 5:
			m.Options = []Option{UniqueKey(tag + "-" + strconv.Itoa(i))}
		case 6:
			m.Options = []Option{MaxAttempts(3), Timeout(time.Minute)}
		case 7:
			m.Options = []Option{At(time.Now().Add(-time.Hour))}
		case 8:
			m.Options = []Option{In(time.Hour), WithPriority(PriorityLow), UniqueKey(tag + "-" + strconv.Itoa(i)), UniqueFor(time.Hour)}
		}
	}
	return msgs
}

// Job ids never collide, whatever the level and delay, when several clients
// enqueue at once; they grow in enqueue order within a call (the first
// calls included, which find the script missing and send their jobs with
// options again) and from one call to the next; a later entry of the
// normal stream sorts after them all; and Locate finds each job by the id
// enqueue returned.
func TestJobIDsUniqueAndOrdered(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	const producers, calls, perCall = 4, 15, 90
	var (
		mu  sync.Mutex
		all = map[string]string{} // id → payload
		wg  sync.WaitGroup
	)
	errs := make(chan error, producers)
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rdb := srv.Client()
			var prev streamID
			for c := range calls {
				msgs := mixedJobs(fmt.Sprintf("p%d-c%d", p, c), perCall)
				ids, err := EnqueueMany(ctx, rdb, "q", msgs)
				if err != nil {
					errs <- fmt.Errorf("producer %d call %d: %w", p, c, err)
					return
				}
				for i, id := range ids {
					cur := parseID(t, id)
					if !prev.less(cur) {
						errs <- fmt.Errorf("producer %d call %d job %d: id %s does not sort after the one before", p, c, i, id)
						return
					}
					prev = cur
					mu.Lock()
					if was, ok := all[id]; ok {
						errs <- fmt.Errorf("id %s given to %s and %s", id, was, msgs[i].Payload)
					}
					all[id] = string(msgs[i].Payload)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(all) != producers*calls*perCall {
		t.Fatalf("%d ids, want %d", len(all), producers*calls*perCall)
	}
	rdb := srv.Client()
	after := parseID(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: KeysFor("q").Stream, Values: []any{PayloadField, "raw"}}).Val())
	for id := range all {
		if !parseID(t, id).less(after) {
			t.Fatalf("a raw XADD got %v, not after job %s", after, id)
		}
	}
	c, err := ReadCounts(ctx, rdb, "q")
	if err != nil {
		t.Fatal(err)
	}
	// Per 9 jobs: 3 delayed, 6 waiting (the raw entry adds one).
	if n := producers * calls * perCall / 9; c.Scheduled != int64(3*n) || c.Waiting != int64(6*n+1) {
		t.Fatalf("counts %+v, want %d scheduled and %d waiting", c, 3*n, 6*n+1)
	}
	// Locate finds jobs of every kind by their ids (a sample: a located
	// high or low job costs a scan).
	want := map[int]struct{ state, priority string }{
		0: {StateWaiting, ""}, 1: {StateScheduled, ""}, 2: {StateWaiting, "high"}, 3: {StateWaiting, "low"},
		4: {StateScheduled, ""}, 5: {StateWaiting, ""}, 6: {StateWaiting, ""}, 7: {StateWaiting, ""}, 8: {StateScheduled, ""},
	}
	n := 0
	for id, payload := range all {
		if n++; n%10 != 0 {
			continue
		}
		i, _ := strconv.Atoi(payload[strings.LastIndexByte(payload, '-')+1:])
		l, err := Locate(ctx, rdb, "q", id)
		if err != nil {
			t.Fatal(err)
		}
		if w := want[i%9]; l.State != w.state || l.Priority != w.priority {
			t.Fatalf("job %s (%s): %+v, want %s %q", id, payload, l, w.state, w.priority)
		}
	}
}

// A stream whose sequence numbers are too large for Lua's numbers (a
// producer's own explicit ids) still gets distinct, growing ids: one XADD
// and XDEL each.
func TestJobIDsAfterHugeSequence(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	k := KeysFor("q")
	huge := fmt.Sprintf("%d-%d", time.Now().Add(time.Hour).UnixMilli(), uint64(1)<<62)
	if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: k.Stream, ID: huge, Values: []any{PayloadField, "own"}}).Err(); err != nil {
		t.Fatal(err)
	}
	ids, err := EnqueueMany(ctx, rdb, "q", mixedJobs("j", 27))
	if err != nil {
		t.Fatal(err)
	}
	prev := parseID(t, huge)
	for _, id := range ids {
		cur := parseID(t, id)
		if !prev.less(cur) {
			t.Fatalf("ids %q do not grow after %s", ids, huge)
		}
		prev = cur
	}
	if c, _ := ReadCounts(ctx, rdb, "q"); c.Scheduled != 9 || c.Waiting != 19 {
		t.Fatalf("counts %+v, want 9 scheduled and 19 waiting", c)
	}
	for i, ttl := range map[int]time.Duration{5: -1, 8: time.Hour} {
		key := k.Unique("j-" + strconv.Itoa(i))
		if got, held := rdb.TTL(ctx, key).Val(), rdb.Get(ctx, key).Val(); got > ttl || got < ttl-time.Minute || held != ids[i] {
			t.Fatalf("unique key of job %d names %q with TTL %v, want %s and %v", i, held, got, ids[i], ttl)
		}
	}
}

// A delayed job's record, packed by the client, is what cmsgpack.pack makes
// of the same strings (so the due script, Locate and old records agree), in
// every string and array size form.
func TestPackRecordIsCmsgpack(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	for _, n := range []int{0, 1, 31, 32, 255, 256, 65535, 65536} {
		for _, count := range []int{2, 16} {
			fields := []any{PayloadField, bytes.Repeat([]byte("p"), n)}
			for i := 2; i < count; i++ {
				fields = append(fields, "f"+strconv.Itoa(i))
			}
			args := make([]any, len(fields))
			copy(args, fields)
			want, err := rdb.Eval(ctx, "return cmsgpack.pack(ARGV)", nil, args...).Text()
			if err != nil {
				t.Fatal(err)
			}
			got := appendArrayHeader(nil, len(fields))
			for _, f := range fields {
				switch f := f.(type) {
				case string:
					got = appendPackedString(got, f)
				case []byte:
					got = appendPackedString(got, f)
				}
			}
			if !bytes.Equal(got, []byte(want)) {
				t.Fatalf("payload %d bytes, %d fields: packed %x, cmsgpack %x", n, count, got[:min(8, len(got))], want[:min(8, len(want))])
			}
		}
	}
	// Enqueued, the record holds the fields and the id, and the due script
	// moves it into the stream intact.
	id, err := Enqueue(ctx, rdb, "q", bytes.Repeat([]byte("x"), 300), In(time.Hour), MaxAttempts(4), WithPriority(PriorityLow))
	if err != nil {
		t.Fatal(err)
	}
	k := KeysFor("q")
	rdb.ZAdd(ctx, k.Scheduled, redis.Z{Score: 0, Member: id})
	if err := runScript(ctx, rdb, dueScript, k.due(), time.Now().UnixMilli(), 10).Err(); err != nil {
		t.Fatal(err)
	}
	msgs := rdb.XRange(ctx, k.Low, "-", "+").Val()
	if len(msgs) != 1 {
		t.Fatalf("low stream holds %v", msgs)
	}
	v := msgs[0].Values
	if v[jobField] != id || v[PayloadField] != strings.Repeat("x", 300) || v[maxAttemptsField] != "4" || v[priorityField] != "low" {
		t.Fatalf("moved entry %v", v)
	}
}
