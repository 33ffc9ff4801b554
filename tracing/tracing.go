// Package tracing carries OpenTelemetry traces through baton's jobs: from
// the code that enqueues a job, through every run of it, into the job's own
// process or handler.
//
// A producer's trace context is stored in the job's fields (ParentField
// and StateField, the W3C traceparent and tracestate), so it travels with
// the job through retries, replays after a crash, give-backs and dead-letter
// requeues. Enqueue starts a producer span (Send) when its context carries
// a span, or when this process turned tracing on (package tracing/export);
// a holder given a TracerProvider starts one consumer span per run of a job
// (Consumer.Start), a child of the producer's span and linked to it, and
// ends it with the run's outcome (End).
//
// Off costs nothing per job: no span, no allocation. A job that carries a
// trace context still hands it to its process (TRACEPARENT, TRACESTATE) and
// to a Go handler's context, so that the job's own spans join the trace.
//
// The attributes follow OpenTelemetry's messaging semantic conventions:
// messaging.system "baton", messaging.destination.name the queue,
// messaging.message.id the job's id for life; baton adds baton.job.attempt
// and the outcome (AttrOutcome, AttrDeadReason, AttrTimedOut).
package tracing

import (
	"context"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// The job fields that carry a producer's trace context; reserved, like
// payload and attempts. A value that is not a W3C traceparent (or
// tracestate) makes the entry malformed when read.
const (
	ParentField = "traceparent"
	StateField  = "tracestate"
)

// ScopeName is the instrumentation scope of baton's spans.
const ScopeName = "github.com/baton-run/baton"

// Attribute keys of baton's spans.
const (
	AttrSystem      = attribute.Key("messaging.system")           // "baton"
	AttrDestination = attribute.Key("messaging.destination.name") // the queue
	AttrMessageID   = attribute.Key("messaging.message.id")       // the job's id for life
	AttrOperation   = attribute.Key("messaging.operation.type")   // "send" or "process"
	AttrOpName      = attribute.Key("messaging.operation.name")   // "send" or "process"
	AttrGroup       = attribute.Key("messaging.consumer.group.name")
	AttrBatchCount  = attribute.Key("messaging.batch.message_count") // jobs of one enqueue, when more than one
	AttrAttempt     = attribute.Key("baton.job.attempt")             // 1 on the first run
	AttrSlot        = attribute.Key("baton.slot")                    // the consumer (slot) that ran it
	AttrOutcome     = attribute.Key("baton.job.outcome")             // an Outcome
	AttrDeadReason  = attribute.Key("baton.job.dead_reason")         // why it was dead-lettered
	AttrTimedOut    = attribute.Key("baton.job.timed_out")           // the run hit its timeout
)

// System is messaging.system's value.
const System = "baton"

// Outcomes of a run (AttrOutcome).
const (
	OutcomeDone        = "done"        // acknowledged
	OutcomeRetried     = "retried"     // failed; a retry is scheduled
	OutcomeDead        = "dead"        // dead-lettered (AttrDeadReason says why)
	OutcomeCancelled   = "cancelled"   // cancelled (baton cancel): dead-lettered as cancelled
	OutcomeInterrupted = "interrupted" // cut short by the holder's shutdown: it stays pending and runs again
	OutcomeGivenBack   = "given_back"  // never started (a child that would not start): back in the stream
)

// always is set by export.Setup: this process exports spans, so Send starts
// a producer span even without a span in its context (a root one).
var always atomic.Bool

// SetAlways makes Send start producer spans with the global TracerProvider
// even when the context carries none (baton enqueue with tracing on).
func SetAlways(on bool) { always.Store(on) }

// Send starts the producer span of one enqueue of n jobs to queue, with the
// global TracerProvider: when ctx carries a span (the caller is traced) or
// SetAlways(true). Otherwise it returns ctx and a nil span, at the cost of
// one context lookup. The span's context is what Carry stores in the jobs.
func Send(ctx context.Context, queue string, n int) (context.Context, trace.Span) {
	if !always.Load() && !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx, nil
	}
	attrs := make([]attribute.KeyValue, 0, 5)
	attrs = append(attrs, AttrSystem.String(System), AttrDestination.String(queue), AttrOperation.String("send"), AttrOpName.String("send"))
	if n > 1 {
		attrs = append(attrs, AttrBatchCount.Int(n))
	}
	return otel.GetTracerProvider().Tracer(ScopeName).Start(ctx, "send "+queue,
		trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
}

// Sent ends a producer span of Send (nil: nothing) with the ids added (the
// message id when there is one) and err.
func Sent(span trace.Span, ids []string, err error) {
	if span == nil {
		return
	}
	if len(ids) == 1 && ids[0] != "" {
		span.SetAttributes(AttrMessageID.String(ids[0]))
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, clip(err.Error()))
	}
	span.End()
}

// Carry is the traceparent and tracestate to store in the jobs enqueued
// under ctx: "" when ctx carries no valid span context.
func Carry(ctx context.Context) (parent, state string) {
	return Format(trace.SpanContextFromContext(ctx))
}

// clip bounds an error text put in a span (a job's stderr tail may be long).
func clip(s string) string {
	const most = 512
	if len(s) > most {
		return s[:most] + "…"
	}
	return s
}
