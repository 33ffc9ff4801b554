// Package export turns baton's tracing on from the standard OpenTelemetry
// environment variables, with the Go SDK's own OTLP exporters. It is the
// only part of baton that links the SDK; package tracing needs only the
// API.
//
// Tracing is off unless OTEL_TRACES_EXPORTER names an exporter ("otlp"),
// or OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is
// set; OTEL_TRACES_EXPORTER=none or OTEL_SDK_DISABLED=true turn it off.
// OTEL_EXPORTER_OTLP_PROTOCOL (or ..._TRACES_PROTOCOL) picks "grpc" or
// "http/protobuf" (the default); the exporters read the endpoint, headers,
// timeout and TLS variables themselves, the batch span processor its
// OTEL_BSP_* ones. The resource is service.name "baton" under
// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES.
//
// The one call:
//
//	tp, err := export.Start(ctx, os.Getenv, onError)
//	defer export.Stop(tp, 3*time.Second)
//
// Spans are exported in the background in batches: a collector that is slow
// or down never delays a job; spans that do not fit the queue are dropped.
// Stop flushes within its bound and gives up after it.
package export

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/baton-run/baton/tracing"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// ErrExporter is an OTEL_TRACES_EXPORTER or OTLP protocol baton cannot use.
var ErrExporter = errors.New("unsupported trace exporter")

// On reports whether the environment turns tracing on, and with which OTLP
// protocol ("grpc" or "http/protobuf").
func On(getenv func(string) string) (on bool, protocol string, err error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false, "", nil
	}
	switch ex := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); ex {
	case "none":
		return false, "", nil
	case "":
		if getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
			return false, "", nil
		}
	case "otlp":
	default:
		return false, "", fmt.Errorf("%w: OTEL_TRACES_EXPORTER=%q (baton exports otlp, or none)", ErrExporter, ex)
	}
	protocol = getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch protocol {
	case "":
		protocol = "http/protobuf"
	case "grpc", "http/protobuf":
	default:
		return false, "", fmt.Errorf("%w: OTLP protocol %q (want grpc or http/protobuf)", ErrExporter, protocol)
	}
	return true, protocol, nil
}

// Start builds the tracer provider the environment asks for and makes it
// the global one (with the W3C trace context propagator), so that enqueue
// starts producer spans (tracing.SetAlways); nil, nil when tracing is off.
// onError, unless nil, gets the SDK's errors (a failed export) instead of
// the standard logger.
func Start(ctx context.Context, getenv func(string) string, onError func(error)) (*sdktrace.TracerProvider, error) {
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

// Stop flushes the spans not yet exported and stops tp, giving up after
// within (a collector that is down or slow never holds the process longer).
// A nil tp is off: nothing to do.
func Stop(tp *sdktrace.TracerProvider, within time.Duration) error {
	if tp == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if err := tp.Shutdown(ctx); err != nil {
		return fmt.Errorf("flush traces: %w", err)
	}
	return nil
}
