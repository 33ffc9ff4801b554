package work

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/tracing"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// recording is an SDK tracer provider that keeps its ended spans in
// memory, made the global one (Enqueue's producer spans) until the test
// ends.
func recording(tb testing.TB) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	otel.SetTracerProvider(tp)
	tb.Cleanup(func() { otel.SetTracerProvider(noop.NewTracerProvider()) })
	return tp, rec
}

// spansOf are the ended spans named name, in the order they ended.
func spansOf(rec *tracetest.SpanRecorder, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func attr(s sdktrace.ReadOnlySpan, key string) any {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.AsInterface()
		}
	}
	return nil
}

// A job's trace travels with it: enqueued under a traced request (through
// the script, with an option), it is left pending by a holder that died,
// replayed, retried, dead-lettered, requeued and run again. Every run's
// span is a child of the job's one producer span and linked to it, in the
// request's trace, with the run's attempt and outcome; the Go handler's
// context carries its run's span.
func TestTraceTravelsWithTheJob(t *testing.T) {
	rdb := redistest.Start(t).Client()
	tp, rec := recording(t)
	ctx, req := tp.Tracer("test").Start(context.Background(), "request")
	id, err := Enqueue(ctx, rdb, "q", []byte("a"), MaxAttempts(3))
	req.End()
	if err != nil {
		t.Fatal(err)
	}
	// A holder read it and died: it is pending for this slot.
	if err := rdb.XGroupCreateMkStream(ctx, KeysFor("q").Stream, Group, "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: Group, Consumer: "h/run-0", Streams: []string{KeysFor("q").Stream, ">"}}).Err(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []trace.SpanContext // each run's handler context
	var succeed atomic.Bool
	h := HandlerFunc(func(ctx context.Context, j *Job) error {
		mu.Lock()
		seen = append(seen, trace.SpanContextFromContext(ctx))
		mu.Unlock()
		if succeed.Load() {
			return nil
		}
		return errors.New("fails")
	})
	c := fastRetry(testConfig(rdb, h))
	c.TracerProvider = tp
	st := new(Stats)
	runUntil(t, c, st, func() bool { return st.Dead.Load() == 1 })
	if _, err := RequeueDead(ctx, rdb, "q", id); err != nil {
		t.Fatal(err)
	}
	succeed.Store(true)
	st = new(Stats)
	runUntil(t, c, st, func() bool { return st.Done.Load() == 1 })

	sends, runs := spansOf(rec, "send q"), spansOf(rec, "process q")
	if len(sends) != 1 || sends[0].Parent().SpanID() != req.SpanContext().SpanID() || sends[0].SpanKind() != trace.SpanKindProducer ||
		attr(sends[0], "messaging.message.id") != id {
		t.Fatalf("producer spans %v: want one, the request's child, for job %s", sends, id)
	}
	send := sends[0].SpanContext()
	want := []struct {
		attempt int64
		outcome string
	}{{2, "retried"}, {3, "dead"}, {1, "done"}} // replayed (its first delivery counted), retried, dead; requeued, it starts again at 1
	if len(runs) != len(want) || len(seen) != len(want) {
		t.Fatalf("%d run spans and %d handler calls, want %d", len(runs), len(seen), len(want))
	}
	for i, w := range want {
		s := runs[i]
		if s.Parent().SpanID() != send.SpanID() || s.SpanContext().TraceID() != req.SpanContext().TraceID() ||
			len(s.Links()) != 1 || s.Links()[0].SpanContext.SpanID() != send.SpanID() || s.SpanKind() != trace.SpanKindConsumer {
			t.Fatalf("run %d: parent %v links %v, want the producer span %v", i+1, s.Parent(), s.Links(), send)
		}
		if attr(s, "messaging.message.id") != id || attr(s, "baton.job.attempt") != w.attempt || attr(s, "baton.job.outcome") != w.outcome ||
			attr(s, "messaging.system") != "baton" || attr(s, "messaging.destination.name") != "q" {
			t.Fatalf("run %d: attributes %v, want job %s attempt %d outcome %s", i+1, s.Attributes(), id, w.attempt, w.outcome)
		}
		if seen[i].SpanID() != s.SpanContext().SpanID() {
			t.Fatalf("run %d: the handler's context has span %v, not its run's %v", i+1, seen[i].SpanID(), s.SpanContext().SpanID())
		}
	}
	if attr(runs[1], "baton.job.dead_reason") != "failed" {
		t.Fatalf("dead run: %v", runs[1].Attributes())
	}
}

// A timed-out run and a cancelled job say so; a job dead-lettered on
// reading (too large) gets a span of its own that says why.
func TestTraceOutcomes(t *testing.T) {
	rdb := redistest.Start(t).Client()
	tp, rec := recording(t)
	ctx, req := tp.Tracer("test").Start(context.Background(), "request")
	defer req.End()
	slow, _ := Enqueue(ctx, rdb, "q", []byte("slow"), Timeout(50*time.Millisecond), MaxAttempts(1))
	big, _ := Enqueue(ctx, rdb, "q", []byte(strings.Repeat("x", 100)))
	h := HandlerFunc(func(ctx context.Context, j *Job) error {
		<-ctx.Done()
		return ctx.Err()
	})
	c := testConfig(rdb, h)
	c.TracerProvider, c.MaxPayload = tp, 10
	st := new(Stats)
	runUntil(t, c, st, func() bool { return st.Dead.Load() == 2 })
	for _, s := range spansOf(rec, "process q") {
		switch attr(s, "messaging.message.id") {
		case slow:
			if attr(s, "baton.job.outcome") != "dead" || attr(s, "baton.job.dead_reason") != "timeout" || attr(s, "baton.job.timed_out") != true {
				t.Fatalf("timed-out run: %v", s.Attributes())
			}
		case big:
			if attr(s, "baton.job.outcome") != "dead" || attr(s, "baton.job.dead_reason") != "too_large" || !strings.Contains(s.Status().Description, "max_payload") {
				t.Fatalf("too large: %v %v", s.Attributes(), s.Status())
			}
		default:
			t.Fatalf("a span for job %v", attr(s, "messaging.message.id"))
		}
	}
	if n := len(spansOf(rec, "process q")); n != 2 {
		t.Fatalf("%d run spans, want 2", n)
	}
}

// A traceparent or tracestate field baton never writes (not W3C) makes
// the entry malformed: dead-lettered unrun, saying which field; it never
// reaches a job's environment.
func TestBadTraceFieldsAreMalformed(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	s := KeysFor("q").Stream
	for _, v := range [][]any{
		{PayloadField, "a", tracing.ParentField, "not-a-traceparent"},
		{PayloadField, "b", tracing.ParentField, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", tracing.StateField, "a=b\x00"},
	} {
		rdb.XAdd(ctx, &redis.XAddArgs{Stream: s, Values: v})
	}
	var ran atomic.Int64
	c := testConfig(rdb, HandlerFunc(func(context.Context, *Job) error { ran.Add(1); return nil }))
	st := new(Stats)
	runUntil(t, c, st, func() bool { return st.Dead.Load() == 2 })
	letters := deadLetters(t, rdb, "q")
	if ran.Load() != 0 || len(letters) != 2 {
		t.Fatalf("ran %d, %d letters", ran.Load(), len(letters))
	}
	for i, f := range []string{tracing.ParentField, tracing.StateField} {
		if letters[i].Values[deadReason] != ReasonMalformed || !strings.Contains(letters[i].Values[deadError].(string), `"`+f+`"`) {
			t.Fatalf("letter %d: %v, want malformed for its %s", i, letters[i].Values, f)
		}
	}
}

// With the holder's tracing off, an exec job still continues its
// producer's trace: TRACEPARENT and TRACESTATE are the ones stored with
// it (those of the enqueueing caller's span, the global provider being a
// no-op); a job without them gets neither, even when the holder's own
// environment has them.
func TestExecJobGetsTheStoredTraceparent(t *testing.T) {
	rdb := redistest.Start(t).Client()
	dir := t.TempDir()
	out := filepath.Join(dir, "env")
	script := filepath.Join(dir, "job.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho \"$(cat) [$TRACEPARENT] [$TRACESTATE]\" >> "+out+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TRACEPARENT", "00-11111111111111111111111111111111-2222222222222222-01")
	sc, _ := tracing.Parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "vendor=x")
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	if _, err := Enqueue(ctx, rdb, "q", []byte("traced")); err != nil {
		t.Fatal(err)
	}
	if _, err := Enqueue(context.Background(), rdb, "q", []byte("plain")); err != nil {
		t.Fatal(err)
	}
	c := testConfig(rdb, &Exec{Argv: []string{script}, Logger: testLogger()})
	st := new(Stats)
	runUntil(t, c, st, func() bool { return st.Done.Load() == 2 })
	b, _ := os.ReadFile(out)
	want := "traced [00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01] [vendor=x]\nplain [] []\n"
	if string(b) != want {
		t.Fatalf("jobs saw\n%s\nwant\n%s", b, want)
	}
}

// A persistent child's job frame carries the job's trace context.
func TestJobFrameCarriesTheTrace(t *testing.T) {
	j := &Job{ID: "1-0", Attempt: 1, Queue: "q", trace: &jobTrace{parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", state: "a=b"}}
	f := jobFrame(j)
	var h map[string]any
	if err := json.Unmarshal(f.encode()[0], &h); err != nil {
		t.Fatal(err)
	}
	if h["traceparent"] != j.trace.parent || h["tracestate"] != "a=b" {
		t.Fatalf("frame %v", h)
	}
	plain := jobFrame(&Job{ID: "2-0"})
	if hdr := string(plain.encode()[0]); strings.Contains(hdr, "trace") {
		t.Fatalf("an untraced job's frame: %s", hdr)
	}
}
