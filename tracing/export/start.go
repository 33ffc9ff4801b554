//go:build !notracing

package export

import (
	"context"
	"fmt"

	"github.com/baton-run/baton/tracing"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Start builds the tracer provider the environment asks for and makes it
// the global one (with the W3C trace context propagator), so that enqueue
// starts producer spans (tracing.SetAlways); nil, nil when tracing is off.
// onError, unless nil, gets the SDK's errors (a failed export) instead of
// the standard logger.
func Start(ctx context.Context, getenv func(string) string, onError func(error)) (trace.TracerProvider, error) {
	on, protocol, err := On(getenv)
	if !on || err != nil {
		return nil, err
	}
	var exp sdktrace.SpanExporter
	if protocol == "grpc" {
		exp, err = otlptracegrpc.New(ctx)
	} else {
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("start the otlp trace exporter: %w", err)
	}
	// service.name "baton" unless the environment names it.
	res, err := resource.Merge(resource.NewSchemaless(attribute.String("service.name", "baton")), resource.Environment())
	if err != nil {
		res = resource.NewSchemaless(attribute.String("service.name", "baton"))
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	if onError != nil {
		otel.SetErrorHandler(otel.ErrorHandlerFunc(onError))
	}
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	tracing.SetAlways(true)
	return tp, nil
}
