package work

import (
	"context"
	"errors"
	"fmt"

	"github.com/baton-run/baton/tracing"
	"go.opentelemetry.io/otel/trace"
)

// jobTrace is a job's trace context (package tracing): its producer's
// traceparent and tracestate, stored in its fields by Enqueue, and the span
// of its current run while the holder traces. A job has one only when it
// carries the fields or the holder traces: off, a job without the fields
// costs one map lookup when read, and nothing else (not even the room in
// Job: one pointer).
type jobTrace struct {
	parent, state string     // the producer's, from the fields traceparent and tracestate; "" without
	span          trace.Span // this run's span, or nil; the worker's, then the settler's
}

// parentOf and spanOf read j.trace, nil or not.
func (j *Job) parentOf() (parent, state string) {
	if j.trace == nil {
		return "", ""
	}
	return j.trace.parent, j.trace.state
}

// traceOf reads a job's traceparent and tracestate fields, when its entry
// has them, and says what is wrong with a value baton never writes.
func (j *Job) traceOf(v map[string]any) (problem string) {
	p, ok := v[tracing.ParentField]
	if !ok {
		return ""
	}
	s, _ := p.(string)
	if !tracing.Valid(s) {
		return badField(tracing.ParentField, p, "want a W3C traceparent such as 00-<32 hex>-<16 hex>-01")
	}
	st, _ := v[tracing.StateField].(string)
	if !tracing.ValidState(st) {
		return badField(tracing.StateField, v[tracing.StateField], "want a W3C tracestate: printable ASCII, at most 512 characters")
	}
	j.trace = &jobTrace{parent: s, state: st}
	return ""
}

// TraceParent is the W3C traceparent the job's code continues: its run's
// span while the holder traces, else the producer's (stored with the job),
// else "". Exec and persistent children get it as TRACEPARENT (and the job
// frame's traceparent); a Go handler's context carries it.
func (j *Job) TraceParent() (parent, state string) {
	if j.trace != nil && j.trace.span != nil {
		return tracing.Format(j.trace.span.SpanContext())
	}
	return j.parentOf()
}

// traceEnv is TRACEPARENT and TRACESTATE for a job that carries a trace
// context, else nil.
func (j *Job) traceEnv() []string {
	p, s := j.TraceParent()
	switch {
	case p == "":
		return nil
	case s == "":
		return []string{"TRACEPARENT=" + p}
	}
	return []string{"TRACEPARENT=" + p, "TRACESTATE=" + s}
}

// traced starts j's run span when the holder traces, and returns ctx
// carrying it (or, off, the producer's context when j has one) for a Go
// handler's spans.
func (r *runner) traced(ctx context.Context, j *Job) context.Context {
	switch {
	case r.tracer != nil:
		if j.trace == nil {
			j.trace = &jobTrace{}
		}
		ctx, j.trace.span = r.tracer.Start(ctx, j.ID, j.Attempt, j.trace.parent, j.trace.state, j.Started)
	case j.trace != nil:
		ctx = tracing.Context(ctx, j.trace.parent, j.trace.state)
	}
	return ctx
}

// traceSettled ends the span of the run res settles, with its outcome; a
// job dead-lettered or cancelled unrun gets a span of its own, so that its
// trace says what became of it. Called by the settler, only when tracing.
func (r *runner) traceSettled(res result) {
	j := res.job
	var span trace.Span
	if j.trace != nil {
		span, j.trace.span = j.trace.span, nil
	}
	if span == nil {
		if res.dead == "" {
			return // given back unstarted: no run
		}
		p, s := j.parentOf()
		_, span = r.tracer.Start(context.Background(), j.ID, j.Attempt, p, s, j.Started)
	}
	outcome, reason, timed := r.outcome(res)
	err := res.err
	if err == nil && j.problem != "" {
		err = errors.New(j.problem)
	}
	tracing.End(span, outcome, reason, timed, err)
}

// traceInterrupted ends the span of a run cut short by the end of the
// grace period: the job stays pending and runs again.
func (r *runner) traceInterrupted(j *Job, err error) {
	if j.trace != nil && j.trace.span != nil {
		tracing.End(j.trace.span, tracing.OutcomeInterrupted, "", timedOut(err), err)
		j.trace.span = nil
	}
}

// outcome is what settling res does to its job, as the settler decides it
// (fail, deadLetter, cancelled): the span's outcome, the dead-letter
// reason, and whether the run timed out.
func (r *runner) outcome(res result) (outcome, reason string, timed bool) {
	j, err := res.job, res.err
	switch {
	case res.back:
		return tracing.OutcomeGivenBack, "", false
	case res.dead == ReasonCancelled:
		return tracing.OutcomeCancelled, ReasonCancelled, false
	case res.dead != "":
		return tracing.OutcomeDead, res.dead, false
	case err == nil:
		return tracing.OutcomeDone, "", false
	}
	timed = timedOut(err)
	switch {
	case errors.Is(err, ErrSkipRetry):
		return tracing.OutcomeDead, ReasonRejected, timed
	case j.Attempt < r.maxAttempts(j):
		return tracing.OutcomeRetried, "", timed
	case timed:
		return tracing.OutcomeDead, ReasonTimeout, true
	case errors.Is(err, ErrCrashed):
		return tracing.OutcomeDead, ReasonCrashed, false
	}
	return tracing.OutcomeDead, ReasonFailed, false
}

// badField says what is wrong with a reserved field's value, as reserved
// does.
func badField(field string, val any, why string) string {
	s := fmt.Sprint(val)
	if len(s) > 64 {
		s = s[:64] + "…"
	}
	return fmt.Sprintf("bad %q field %q: %s", field, s, why)
}

// carryTrace sets the trace context of ctx (the producer span's) on every
// job's options, making them when no job had any.
func carryTrace(ctx context.Context, opts []jobOptions, n int) []jobOptions {
	p, s := tracing.Carry(ctx)
	if p == "" {
		return opts
	}
	if opts == nil {
		opts = make([]jobOptions, n)
	}
	for i := range opts {
		opts[i].traceParent, opts[i].traceState = p, s
	}
	return opts
}

// xaddValues is the fields of a job without options: its payload, and its
// trace context when it has one.
func (o *jobOptions) xaddValues(payload []byte) []any {
	switch {
	case o.traceParent == "":
		return []any{PayloadField, payload}
	case o.traceState == "":
		return []any{PayloadField, payload, tracing.ParentField, o.traceParent}
	}
	return []any{PayloadField, payload, tracing.ParentField, o.traceParent, tracing.StateField, o.traceState}
}

// appendTraceFields packs a job's trace context fields, when it has them.
func appendTraceFields(b []byte, o *jobOptions) []byte {
	if o.traceParent != "" {
		b = appendPackedString(appendPackedString(b, tracing.ParentField), o.traceParent)
	}
	if o.traceState != "" {
		b = appendPackedString(appendPackedString(b, tracing.StateField), o.traceState)
	}
	return b
}
