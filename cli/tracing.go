package cli

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/baton-run/baton/tracing"
	"github.com/baton-run/baton/tracing/export"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"
)

// Bounds on flushing spans as a process leaves: a collector that is down or
// slow costs a holder at most holderFlush, after its slot is released, and
// an enqueue at most enqueueFlush.
const (
	holderFlush  = 3 * time.Second
	enqueueFlush = time.Second
)

// startTracing turns tracing on when the OTEL_* variables ask for it
// (docs/tracing.md): nil when off. A setup that fails is logged, never
// fatal: the jobs run (or are enqueued) untraced. The SDK's own errors (a
// failed export) are logged at most once a minute, so that a collector that
// is down does not fill cron's mail.
// warn reports a problem: a log line for run, a plain line for enqueue.
func startTracing(ctx context.Context, e *env, warn func(msg string, err error)) trace.TracerProvider {
	var mu sync.Mutex
	var last time.Time
	onError := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if time.Since(last) < time.Minute {
			return
		}
		last = time.Now()
		warn("tracing: export failed; spans are dropped while the collector is unreachable", err)
	}
	tp, err := export.Start(ctx, e.Getenv, onError)
	if err != nil {
		warn("tracing: not turned on", err)
		return nil
	}
	return tp
}

// stopTracing flushes the spans left, within bound; what could not be
// sent is dropped (said at debug level, for a holder).
func stopTracing(tp trace.TracerProvider, bound time.Duration, log zerolog.Logger) {
	if err := export.Stop(tp, bound); err != nil {
		log.Debug().Err(err).Msg("tracing: spans not flushed")
	}
}

// logWarn is startTracing's warn for a holder: a log line.
func logWarn(log zerolog.Logger) func(string, error) {
	return func(msg string, err error) { log.Warn().Err(err).Msg(msg) }
}

// plainWarn is startTracing's warn for a command that prints plain lines
// (enqueue): a logger there would turn its error report into JSON.
func plainWarn(e *env, cmd string) func(string, error) {
	return func(msg string, err error) { fmt.Fprintf(e.Stderr, "baton: %s: %s: %v\n", cmd, msg, err) }
}

// callerTrace is ctx carrying the caller's trace context from TRACEPARENT
// and TRACESTATE (the W3C trace context of the process that ran baton), so
// that an enqueue continues the caller's trace; ctx when they are unset or
// not valid.
func callerTrace(ctx context.Context, e *env) context.Context {
	return tracing.Context(ctx, e.Getenv("TRACEPARENT"), e.Getenv("TRACESTATE"))
}
