package tracing

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Consumer starts a holder's consumer spans: one per run of a job.
type Consumer struct {
	tracer trace.Tracer
	name   string               // "process <queue>"
	fixed  []attribute.KeyValue // every span's: system, destination, operation, group, slot
}

// NewConsumer is the consumer spans of queue's jobs run by slot (the
// consumer name), made with tp; nil when tp is nil (tracing off).
func NewConsumer(tp trace.TracerProvider, queue, group, slot string) *Consumer {
	if tp == nil {
		return nil
	}
	return &Consumer{
		tracer: tp.Tracer(ScopeName),
		name:   "process " + queue,
		fixed: []attribute.KeyValue{AttrSystem.String(System), AttrDestination.String(queue),
			AttrOperation.String("process"), AttrOpName.String("process"), AttrGroup.String(group), AttrSlot.String(slot)},
	}
}

// Start starts the span of one run of job id (attempt 1 on its first run),
// a child of the producer's context (parent, state: its stored
// traceparent and tracestate; a root span without one) and linked to it.
// at is when the run started (zero: now).
func (c *Consumer) Start(ctx context.Context, id string, attempt int, parent, state string, at time.Time) (context.Context, trace.Span) {
	attrs := make([]attribute.KeyValue, 0, len(c.fixed)+2)
	attrs = append(append(attrs, c.fixed...), AttrMessageID.String(id), AttrAttempt.Int(attempt))
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...)}
	if !at.IsZero() {
		opts = append(opts, trace.WithTimestamp(at))
	}
	if sc, ok := Parse(parent, state); ok {
		ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
	} else {
		opts = append(opts, trace.WithNewRoot())
	}
	return c.tracer.Start(ctx, c.name, opts...)
}

// End ends a run's span with its outcome: one of the Outcome constants,
// the dead-letter reason when dead (or cancelled), whether the run timed
// out, and the error the job failed with (nil when done).
func End(span trace.Span, outcome, reason string, timedOut bool, err error) {
	attrs := make([]attribute.KeyValue, 0, 3)
	attrs = append(attrs, AttrOutcome.String(outcome))
	if reason != "" {
		attrs = append(attrs, AttrDeadReason.String(reason))
	}
	if timedOut {
		attrs = append(attrs, AttrTimedOut.Bool(true))
	}
	span.SetAttributes(attrs...)
	switch {
	case err != nil:
		span.SetStatus(codes.Error, clip(err.Error()))
	case outcome == OutcomeDead:
		span.SetStatus(codes.Error, reason)
	}
	span.End()
}
