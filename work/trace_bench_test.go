package work

import (
	"context"
	"testing"

	"github.com/baton-run/baton/internal/otlptest"
	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/tracing"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// BenchmarkRunTraced is BenchmarkRun (no-op handler, one op is one job)
// with jobs that carry a producer's trace context:
//
//   - off: the holder does not trace; the context is read and handed to
//     the handler's context, nothing more;
//   - sdk: the holder makes a span per run, batched by the SDK's batch
//     span processor as configured by default, to an exporter that
//     discards them: the holder's own cost per job;
//   - otlp: the holder makes a span per run and exports every one (a
//     blocking batch processor, so none is dropped) over OTLP/gRPC to a
//     receiver in this process, which decodes them too.
//
// The cost per job with tracing on is sdk's (or otlp's) ns/op minus off's.
// docs/tracing.md has the figures:
//
//	go test -run - -bench 'BenchmarkRun(Traced)?$' -benchmem ./work/
func BenchmarkRunTraced(b *testing.B) {
	noop := HandlerFunc(func(context.Context, *Job) error { return nil })
	b.Run("off", func(b *testing.B) {
		benchRunTraced(b, noop, nil)
	})
	b.Run("sdk", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
		benchRunTraced(b, noop, tp)
		b.StopTimer()
		_ = tp.Shutdown(context.Background())
	})
	b.Run("otlp", func(b *testing.B) {
		rcv := otlptest.Start(b)
		exp, err := otlptracegrpc.New(context.Background(), otlptracegrpc.WithEndpointURL(rcv.GRPC))
		if err != nil {
			b.Fatal(err)
		}
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, sdktrace.WithBlocking(), sdktrace.WithMaxQueueSize(8192)))
		benchRunTraced(b, noop, tp)
		b.StopTimer()
		if err := tp.Shutdown(context.Background()); err != nil {
			b.Fatal(err)
		}
		if n := len(rcv.Spans()); n < b.N {
			b.Fatalf("%d spans exported for %d jobs", n, b.N)
		}
	})
}

// benchRunTraced fills the queue with b.N jobs enqueued under a span
// context, then runs them with tp (nil: off).
func benchRunTraced(b *testing.B, h Handler, tp trace.TracerProvider) {
	sc, _ := tracing.Parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "")
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	rdb := redistest.Start(b).Client()
	msgs := make([]Message, 1000)
	for i := range msgs {
		msgs[i] = Message{Payload: benchPayload}
	}
	for n := 0; n < b.N; n += len(msgs) {
		if _, err := EnqueueMany(ctx, rdb, "q", msgs[:min(len(msgs), b.N-n)]); err != nil {
			b.Fatal(err)
		}
	}
	benchRunOn(b, rdb, 1, h, func(c *Config) { c.TracerProvider = tp })
}
