package tracing_test

import (
	"context"
	"fmt"
	"os"

	"github.com/baton-run/baton/tracing"
	"github.com/baton-run/baton/work"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// A job's trace context is a W3C traceparent: what the job's process finds
// in TRACEPARENT, and what a producer stores in the job's fields.
func ExampleParse() {
	sc, ok := tracing.Parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "vendor=x")
	fmt.Println(ok, sc.TraceID(), sc.SpanID(), sc.IsSampled(), sc.TraceState())
	parent, state := tracing.Format(sc)
	fmt.Println(parent, state)
	// Output:
	// true 4bf92f3577b34da6a3ce929d0e0e4736 00f067aa0ba902b7 true vendor=x
	// 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01 vendor=x
}

// A Go program traces its jobs end to end: Enqueue under a span stores the
// span's context with the job; a holder given a TracerProvider makes a span
// per run, a child of the producer's; the handler's context carries it.
func Example() {
	tp := sdktrace.NewTracerProvider() // add an exporter: sdktrace.WithBatcher(exp)
	otel.SetTracerProvider(tp)         // Enqueue's producer spans use the global provider
	defer tp.Shutdown(context.Background())
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})

	// In an HTTP handler, say, whose request span is in ctx:
	ctx, span := tp.Tracer("web").Start(context.Background(), "POST /signup")
	_, _ = work.Enqueue(ctx, rdb, "mail", []byte(`{"welcome":42}`))
	span.End()

	// In the holder:
	h := work.HandlerFunc(func(ctx context.Context, j *work.Job) error {
		_, span := tp.Tracer("mail").Start(ctx, "send welcome mail") // a child of this run's span
		defer span.End()
		fmt.Println(trace.SpanContextFromContext(ctx).IsValid())
		return nil
	})
	_ = work.Config{Client: rdb, Queue: "mail", Consumer: "host/run-0", Handler: h, TracerProvider: tp}
}
