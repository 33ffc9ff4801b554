package tracing

import (
	"context"
	"encoding/hex"

	"go.opentelemetry.io/otel/trace"
)

// maxState is the longest tracestate kept (W3C: at least 512 characters
// must be propagated; longer ones may be dropped).
const maxState = 512

// Valid reports whether parent is a W3C traceparent baton stores: version
// 00 (or a later one, read as 00), a trace id and a span id that are not
// all zeros, lowercase hex. It allocates nothing: the reader checks every
// job that carries one.
func Valid(parent string) bool {
	_, ok := parse(parent)
	return ok
}

// ValidState reports whether state may be a W3C tracestate: printable
// ASCII, at most 512 characters. (Its list is parsed only when used.)
func ValidState(state string) bool {
	if len(state) > maxState {
		return false
	}
	for i := 0; i < len(state); i++ {
		if state[i] < 0x20 || state[i] > 0x7e {
			return false
		}
	}
	return true
}

// Parse reads a traceparent and tracestate into a remote span context;
// false when parent is not valid. A tracestate that does not parse is
// dropped, as W3C says.
func Parse(parent, state string) (trace.SpanContext, bool) {
	cfg, ok := parse(parent)
	if !ok {
		return trace.SpanContext{}, false
	}
	if state != "" {
		if ts, err := trace.ParseTraceState(state); err == nil {
			cfg.TraceState = ts
		}
	}
	cfg.Remote = true
	return trace.NewSpanContext(cfg), true
}

// Format writes sc as a traceparent (version 00) and its tracestate; ""
// when sc is not valid.
func Format(sc trace.SpanContext) (parent, state string) {
	if !sc.IsValid() {
		return "", ""
	}
	var b [55]byte
	tid, sid := sc.TraceID(), sc.SpanID()
	copy(b[:], "00-")
	hex.Encode(b[3:35], tid[:])
	b[35] = '-'
	hex.Encode(b[36:52], sid[:])
	b[52] = '-'
	hex.Encode(b[53:55], []byte{byte(sc.TraceFlags())})
	return string(b[:]), sc.TraceState().String()
}

// Context is ctx carrying the remote span context of parent and state,
// for a Go handler's spans to join; ctx itself when parent is not valid.
func Context(ctx context.Context, parent, state string) context.Context {
	sc, ok := Parse(parent, state)
	if !ok {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

func parse(s string) (trace.SpanContextConfig, bool) {
	var cfg trace.SpanContextConfig
	// version "-" trace-id "-" parent-id "-" flags; a later version may
	// add "-" and more.
	if len(s) < 55 || len(s) > 55 && (s[:2] == "00" || s[55] != '-') ||
		s[2] != '-' || s[35] != '-' || s[52] != '-' || s[:2] == "ff" {
		return cfg, false
	}
	var flags [1]byte
	if !unhex(nil, s[:2]) || !unhex(cfg.TraceID[:], s[3:35]) || !unhex(cfg.SpanID[:], s[36:52]) || !unhex(flags[:], s[53:55]) {
		return cfg, false
	}
	if !cfg.TraceID.IsValid() || !cfg.SpanID.IsValid() {
		return cfg, false
	}
	cfg.TraceFlags = trace.TraceFlags(flags[0]) & trace.FlagsSampled
	return cfg, true
}

// unhex decodes lowercase hex s into dst (nil: only checks it).
func unhex(dst []byte, s string) bool {
	for i := 0; i < len(s); i++ {
		var v byte
		switch c := s[i]; {
		case '0' <= c && c <= '9':
			v = c - '0'
		case 'a' <= c && c <= 'f':
			v = c - 'a' + 10
		default:
			return false
		}
		if dst != nil {
			dst[i/2] = dst[i/2]<<4 | v
		}
	}
	return true
}
