package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/otlptest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// callerParent is the traceparent of the process that runs baton enqueue.
const (
	callerTrace  = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpan   = "00f067aa0ba902b7"
	callerParent = "00-" + callerTrace + "-" + callerSpan + "-01"
)

// spansNamed are the spans of s named name, in start order.
func spansNamed(s []otlptest.Span, name string) []otlptest.Span {
	var out []otlptest.Span
	for _, x := range s {
		if x.Name == name {
			out = append(out, x)
		}
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].Start.Before(out[j-1].Start); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// enqueueTraced runs baton enqueue args with env added (TRACEPARENT, OTEL_*)
// and returns the job id.
func (r *rig) enqueueTraced(env []string, args ...string) string {
	r.t.Helper()
	cmd := r.cmd(append([]string{"enqueue"}, args...)...)
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.Output()
	if err != nil {
		r.t.Fatalf("enqueue: %v %s", err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestTraceOfAJobRetriedOnce: a real baton enqueue, run by a process that
// is traced (TRACEPARENT), and a real baton run holder export their spans
// over OTLP/HTTP to a receiver: the job failed once, then succeeded. The
// trace is one producer span (a child of the caller's), and two consumer
// spans, children of it and linked to it, with the messaging attributes,
// the attempt and each run's outcome; each run's process got TRACEPARENT
// naming its own run's span.
func TestTraceOfAJobRetriedOnce(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	rcv := otlptest.Start(t)
	otel := rcv.Env("http/protobuf")
	seen := filepath.Join(r.dir, "seen")
	job := r.script("job.sh", `cat >/dev/null; echo "$BATON_ATTEMPT $TRACEPARENT" >> `+seen+`
[ "$BATON_ATTEMPT" -gt 1 ]
`)
	id := r.enqueueTraced(append(otel, "TRACEPARENT="+callerParent, "TRACESTATE=vendor=x"), "payload")
	r.extraEnv = otel
	h := r.start("run", "--lifetime", "3s", "--jitter", "1ms", "--retry-backoff", "100ms", "--", job)
	if code := h.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("holder exit %d\n%s", code, h.log())
	}
	spans := rcv.Wait(t, 10*time.Second, func(s []otlptest.Span) bool {
		return len(spansNamed(s, "send default")) >= 1 && len(spansNamed(s, "process default")) >= 2
	})
	t.Logf("exported spans:\n%s", otlptest.Tree(spans))
	send, runs := spansNamed(spans, "send default"), spansNamed(spans, "process default")
	if len(send) != 1 || len(runs) != 2 {
		t.Fatalf("%d producer and %d consumer spans, want 1 and 2", len(send), len(runs))
	}
	p := send[0]
	if p.TraceID != callerTrace || p.ParentID != callerSpan || p.Kind != "producer" || p.Service != "baton" ||
		p.Attrs["messaging.system"] != "baton" || p.Attrs["messaging.destination.name"] != "default" || p.Attrs["messaging.message.id"] != id {
		t.Fatalf("producer span %+v: want a child of the caller's span in its trace, for job %s", p, id)
	}
	for i, want := range []string{"retried", "done"} {
		s := runs[i]
		if s.TraceID != callerTrace || s.ParentID != p.SpanID || len(s.Links) != 1 || s.Links[0].SpanID != p.SpanID || s.Kind != "consumer" {
			t.Fatalf("run %d: span %+v is not a child of the producer span %s linked to it", i+1, s, p.SpanID)
		}
		if s.Attrs["messaging.message.id"] != id || s.Attrs["baton.job.attempt"] != int64(i+1) ||
			s.Attrs["baton.job.outcome"] != want || s.Attrs["messaging.destination.name"] != "default" || s.Error != (want != "done") {
			t.Fatalf("run %d: attributes %v error %v, want job %s attempt %d outcome %s", i+1, s.Attrs, s.Error, id, i+1, want)
		}
	}
	// Each run's process continues its run's span.
	lines := readLines(t, seen)
	if len(lines) != 2 {
		t.Fatalf("the job ran %d times: %q", len(lines), lines)
	}
	for i, l := range lines {
		want := strconv.Itoa(i+1) + " 00-" + callerTrace + "-" + runs[i].SpanID + "-01"
		if l != want {
			t.Fatalf("run %d saw %q, want %q", i+1, l, want)
		}
	}
}

// TestTraceFromAnHTTPHandlerToADeadLetter: an HTTP handler (a server span
// of its own service, exported to the same receiver) runs baton enqueue
// with its span's TRACEPARENT; the job fails twice (max-attempts 2): the
// trace goes from the request through the enqueue to a retried run and a
// dead one, with the reason. The tree is what docs/tracing.md shows.
func TestTraceFromAnHTTPHandlerToADeadLetter(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	rcv := otlptest.Start(t)
	otel := rcv.Env("grpc")
	job := r.script("job.sh", "cat >/dev/null; echo 'no such user' >&2; exit 1\n")

	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(rcv.HTTP+"/v1/traces"))
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", "signup-web"))))
	defer tp.Shutdown(context.Background())
	ctx, span := tp.Tracer("signup").Start(context.Background(), "POST /signup", trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("http.request.method", "POST"), attribute.String("url.path", "/signup")))
	sc := trace.SpanContextFromContext(ctx)
	parent := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"
	id := r.enqueueTraced(append(otel, "TRACEPARENT="+parent), "--queue", "mail", "--max-attempts", "2", `{"welcome":42}`)
	span.End()

	r.extraEnv = otel
	h := r.start("run", "--queue", "mail", "--lifetime", "3s", "--jitter", "1ms", "--retry-backoff", "100ms", "--", job)
	if code := h.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("holder exit %d\n%s", code, h.log())
	}
	spans := rcv.Wait(t, 10*time.Second, func(s []otlptest.Span) bool {
		return len(spansNamed(s, "POST /signup")) == 1 && len(spansNamed(s, "send mail")) == 1 && len(spansNamed(s, "process mail")) >= 2
	})
	t.Logf("exported spans:\n%s", otlptest.Tree(spans))
	req, send, runs := spansNamed(spans, "POST /signup")[0], spansNamed(spans, "send mail")[0], spansNamed(spans, "process mail")
	if send.ParentID != req.SpanID || send.TraceID != req.TraceID || len(runs) != 2 {
		t.Fatalf("enqueue span %+v is not the request's child, or %d runs", send, len(runs))
	}
	for i, want := range []string{"retried", "dead"} {
		s := runs[i]
		if s.ParentID != send.SpanID || s.Attrs["baton.job.outcome"] != want || s.Attrs["messaging.message.id"] != id || !s.Error {
			t.Fatalf("run %d: %+v, want a failed child of the enqueue, outcome %s", i+1, s, want)
		}
	}
	if runs[1].Attrs["baton.job.dead_reason"] != "failed" {
		t.Fatalf("dead run's reason %v, want failed", runs[1].Attrs)
	}
}

// TestEveryRunHasOneConsumerSpan: 1000 jobs enqueued in one call (one
// producer span) and run by a holder exporting over OTLP/gRPC: each job
// has exactly one consumer span, linked to the producer span.
func TestEveryRunHasOneConsumerSpan(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	rcv := otlptest.Start(t)
	otel := rcv.Env("grpc")
	const n = 1000
	var in strings.Builder
	for i := 0; i < n; i++ {
		in.WriteString("job-" + strconv.Itoa(i) + "\n")
	}
	cmd := r.cmd("enqueue")
	cmd.Env = append(cmd.Env, otel...)
	cmd.Stdin = strings.NewReader(in.String())
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	ids := strings.Fields(string(out))
	if len(ids) != n {
		t.Fatalf("%d ids", len(ids))
	}
	r.extraEnv = append(otel, testHandler+"=noop")
	h := r.start("run", "--lifetime", "3s", "--jitter", "1ms", "--concurrency", "4")
	if code := h.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("holder exit %d\n%s", code, h.log())
	}
	spans := rcv.Wait(t, 10*time.Second, func(s []otlptest.Span) bool { return len(spansNamed(s, "process default")) >= n })
	send := spansNamed(spans, "send default")
	if len(send) != 1 || send[0].Attrs["messaging.batch.message_count"] != int64(n) {
		t.Fatalf("%d producer spans, want 1 for the batch of %d", len(send), n)
	}
	runs := map[string]int{}
	for _, s := range spansNamed(spans, "process default") {
		id, _ := s.Attrs["messaging.message.id"].(string)
		runs[id]++
		if len(s.Links) != 1 || s.Links[0].SpanID != send[0].SpanID || s.TraceID != send[0].TraceID || s.Attrs["baton.job.outcome"] != "done" {
			t.Fatalf("consumer span of job %s: %+v, want done and linked to producer span %s", id, s, send[0].SpanID)
		}
	}
	for _, id := range ids {
		if runs[id] != 1 {
			t.Fatalf("job %s has %d consumer spans, want 1", id, runs[id])
		}
	}
	if len(runs) != n {
		t.Fatalf("consumer spans for %d jobs, want %d", len(runs), n)
	}
}

// TestCollectorDownNeverHoldsTheHolder: a collector that accepts
// connections and never answers (a black hole) or one that refuses them:
// the holder runs every job within its lifetime and exits within its
// lifetime plus the flush bound; an enqueue exits within its own.
func TestCollectorDownNeverHoldsTheHolder(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, protocol string }{{"blackhole-grpc", "grpc"}, {"blackhole-http", "http/protobuf"}, {"refused-grpc", "grpc"}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t)
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := l.Addr().String()
			if strings.HasPrefix(tc.name, "refused") {
				l.Close()
			} else {
				t.Cleanup(func() { l.Close() })
				go func() { // accept, read nothing, answer nothing
					var held []net.Conn
					defer func() {
						for _, c := range held {
							c.Close()
						}
					}()
					for {
						c, err := l.Accept()
						if err != nil {
							return
						}
						held = append(held, c)
					}
				}()
			}
			otel := []string{"OTEL_TRACES_EXPORTER=otlp", "OTEL_EXPORTER_OTLP_PROTOCOL=" + tc.protocol,
				"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + addr, "OTEL_BSP_SCHEDULE_DELAY=100"}
			const n = 500
			args := []string{"-q"}
			for i := 0; i < n; i++ {
				args = append(args, "job-"+strconv.Itoa(i))
			}
			cmd := r.cmd(append([]string{"enqueue"}, args...)...)
			cmd.Env = append(cmd.Env, append(otel, "TRACEPARENT="+callerParent)...)
			start := time.Now()
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("enqueue: %v %s", err, out)
			}
			if took := time.Since(start); took > 10*time.Second {
				t.Fatalf("enqueue took %v with the collector down", took)
			}
			r.extraEnv = append(otel, testHandler+"=noop")
			const life = 3 * time.Second
			h := r.start("run", "--lifetime", life.String(), "--jitter", "1ms")
			// Every job done well within the lifetime: spans never wait
			// for the collector.
			eventually(t, life, "every job done within the holder's lifetime", func() bool {
				ctx := context.Background()
				p, err := r.client().XPending(ctx, "baton:{default}", "baton").Result()
				return err == nil && p.Count == 0 && r.client().XLen(ctx, "baton:{default}").Val() == 0
			})
			if s := r.status(); s.Jobs.Done != n {
				t.Fatalf("%d jobs done, want %d", s.Jobs.Done, n)
			}
			// Lifetime + the 3s flush bound + generous slack for a loaded
			// machine; the exporters' own timeouts are 10s and 30s.
			if code := h.wait(t, life+3*time.Second+6*time.Second); code != 0 {
				t.Fatalf("holder exit %d\n%s", code, h.log())
			}
			// The SDK's export errors are logged once (a minute), never
			// line after line into cron's mail.
			if n := strings.Count(h.log(), "export"); n > 1 {
				t.Fatalf("%d lines about failed exports:\n%s", n, h.log())
			}
			t.Logf("holder ran %v; its log:\n%s", h.end.Sub(h.start), h.log())
		})
	}
}

// TestPersistentChildContinuesTheTrace: a persistent Python child (the
// helper of examples/python) sees each run's trace context as
// job.traceparent: its run's span, in the producer's trace; TRACEPARENT is
// not in its environment (a child outlives its jobs).
func TestPersistentChildContinuesTheTrace(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	rcv := otlptest.Start(t)
	otel := rcv.Env("http/protobuf")
	seen := filepath.Join(r.dir, "seen")
	worker := filepath.Join(r.dir, "worker.py")
	src := `import os, sys
sys.path.insert(0, ` + strconv.Quote(filepath.Dir(examplePath(t, "python/baton_worker.py"))) + `)
import baton_worker
def handle(payload, job):
    with open(` + strconv.Quote(seen) + `, "a") as f:
        f.write("%s %s %s\n" % (job.id, job.traceparent, os.environ.get("TRACEPARENT", "-")))
baton_worker.serve(handle)
`
	if err := os.WriteFile(worker, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	id := r.enqueueTraced(append(otel, "TRACEPARENT="+callerParent), "payload")
	r.extraEnv = append(otel, "TRACEPARENT=00-11111111111111111111111111111111-2222222222222222-01")
	h := r.start("run", "--persistent", "--lifetime", "3s", "--jitter", "1ms", "--", python(t), worker)
	if code := h.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("holder exit %d\n%s", code, h.log())
	}
	spans := rcv.Wait(t, 10*time.Second, func(s []otlptest.Span) bool { return len(spansNamed(s, "process default")) == 1 })
	run := spansNamed(spans, "process default")[0]
	lines := readLines(t, seen)
	if want := id + " 00-" + callerTrace + "-" + run.SpanID + "-01 -"; len(lines) != 1 || lines[0] != want {
		t.Fatalf("the child saw %q, want %q", lines, want)
	}
}

// TestClientsPassATraceparent: the Python and Node producers' traceparent
// option stores the trace context as the CLI's TRACEPARENT does (the same
// fields), a holder's run continues it, and a bad one is refused before
// anything is sent.
func TestClientsPassATraceparent(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	rcv := otlptest.Start(t)
	otel := rcv.Env("http/protobuf")
	// The CLI with tracing off stores its caller's context as it is.
	cliID := r.enqueueTraced([]string{"TRACEPARENT=" + callerParent, "TRACESTATE=vendor=x"}, "--queue", "traced", "cli")
	want := map[string]any{"payload": "cli", "traceparent": callerParent, "tracestate": "vendor=x"}
	ctx := context.Background()
	entry := func(id string) map[string]any {
		m, err := r.client().XRange(ctx, "baton:{traced}", id, id).Result()
		if err != nil || len(m) != 1 {
			t.Fatalf("entry %s: %v %v", id, m, err)
		}
		return m[0].Values
	}
	if got := entry(cliID); !reflect.DeepEqual(got, want) {
		t.Fatalf("cli entry %v, want %v", got, want)
	}
	ids := []string{cliID}
	for _, p := range producers[1:] {
		res := r.drive(p, "traced", nil,
			map[string]any{"op": "enqueue", "payload": string(p), "opts": map[string]any{"traceparent": callerParent, "tracestate": "vendor=x"}},
			map[string]any{"op": "enqueue", "payload": "x", "opts": map[string]any{"traceparent": strings.ToUpper(callerParent)}},
			map[string]any{"op": "enqueue", "payload": "x", "opts": map[string]any{"tracestate": "vendor=x"}})
		id, _ := res[0]["id"].(string)
		want["payload"] = string(p)
		if got := entry(id); !reflect.DeepEqual(got, want) {
			t.Fatalf("%s entry %v, want %v", p, got, want)
		}
		if res[1]["bad"] != true || !strings.Contains(res[1]["error"].(string), "traceparent") ||
			res[2]["bad"] != true || !strings.Contains(res[2]["error"].(string), "tracestate needs a traceparent") {
			t.Fatalf("%s: bad trace options: %v %v", p, res[1], res[2])
		}
		ids = append(ids, id)
	}
	if n := r.client().XLen(ctx, "baton:{traced}").Val(); n != 3 {
		t.Fatalf("%d jobs queued, want 3 (the bad ones sent nothing)", n)
	}
	r.extraEnv = append(otel, testHandler+"=noop")
	h := r.start("run", "--queue", "traced", "--lifetime", "2s", "--jitter", "1ms")
	if code := h.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("holder exit %d\n%s", code, h.log())
	}
	spans := rcv.Wait(t, 10*time.Second, func(s []otlptest.Span) bool { return len(spansNamed(s, "process traced")) == 3 })
	for _, s := range spansNamed(spans, "process traced") {
		if s.TraceID != callerTrace || s.ParentID != callerSpan || !slices.Contains(ids, s.Attrs["messaging.message.id"].(string)) {
			t.Fatalf("run span %+v: want a child of the caller's span", s)
		}
	}
}

// TestTracingMisconfigured: an exporter baton does not have is said once,
// in plain text, and the job is enqueued and run untraced all the same.
func TestTracingMisconfigured(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.extraEnv = []string{"OTEL_TRACES_EXPORTER=zipkin"}
	out, errOut, code := r.baton("enqueue", "job")
	if code != 0 || strings.TrimSpace(out) == "" || strings.Count(errOut, "\n") != 1 ||
		!strings.HasPrefix(errOut, `baton: enqueue: tracing: not turned on: unsupported trace exporter: OTEL_TRACES_EXPORTER="zipkin"`) {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	r.extraEnv = append(r.extraEnv, testHandler+"=noop")
	h := r.start("run", "--lifetime", "1s", "--jitter", "1ms")
	if code := h.wait(t, 30*time.Second); code != 0 || !strings.Contains(h.log(), "tracing: not turned on") {
		t.Fatalf("holder exit %d\n%s", code, h.log())
	}
	if s := r.status(); s.Jobs.Done != 1 {
		t.Fatalf("jobs %+v", *s.Jobs)
	}
}
