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
// Built with -tags notracing, baton links neither the SDK nor the
// exporters (every baton process is then about 3 MB smaller in memory, a
// losing candidate too); Start says so when the environment asks for
// tracing, and jobs still carry and hand on their trace context.
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

	"go.opentelemetry.io/otel/trace"
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

// Stop flushes the spans not yet exported and stops tp (a provider of
// Start), giving up after within (a collector that is down or slow never
// holds the process longer). A nil tp is off: nothing to do.
func Stop(tp trace.TracerProvider, within time.Duration) error {
	sd, ok := tp.(interface{ Shutdown(context.Context) error })
	if tp == nil || !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if err := sd.Shutdown(ctx); err != nil {
		return fmt.Errorf("flush traces: %w", err)
	}
	return nil
}
