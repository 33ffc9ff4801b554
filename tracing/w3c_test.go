package tracing

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

func TestParseAndFormat(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, tc := range []struct {
		name, parent, state string
		ok                  bool
		wantState           string
	}{
		{"sampled", tp, "", true, ""},
		{"with state", tp, "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE", true, "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"},
		{"bad state dropped", tp, "not a list entry!", true, ""},
		{"not sampled", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", "", true, ""},
		{"later version, more fields", "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-the-future-holds", "", true, ""},
		{"version ff", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "", false, ""},
		{"version 00 with more", tp + "-x", "", false, ""},
		{"zero trace id", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "", false, ""},
		{"zero span id", "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", "", false, ""},
		{"upper case", strings.ToUpper(tp), "", false, ""},
		{"short", tp[:54], "", false, ""},
		{"empty", "", "", false, ""},
		{"newline", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0\n", "", false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if Valid(tc.parent) != tc.ok {
				t.Fatalf("Valid(%q) = %v", tc.parent, !tc.ok)
			}
			sc, ok := Parse(tc.parent, tc.state)
			if ok != tc.ok {
				t.Fatalf("Parse ok %v", ok)
			}
			if !ok {
				if c := Context(context.Background(), tc.parent, tc.state); trace.SpanContextFromContext(c).IsValid() {
					t.Fatal("Context carries an invalid traceparent")
				}
				return
			}
			if !sc.IsRemote() || sc.TraceID().String() != tc.parent[3:35] || sc.SpanID().String() != tc.parent[36:52] {
				t.Fatalf("parsed %v", sc)
			}
			p, s := Format(sc)
			if p != "00"+tc.parent[2:55] && !(tc.parent[:2] != "00" && p[3:] == tc.parent[3:55]) {
				t.Fatalf("Format = %q, want %q", p, tc.parent[:55])
			}
			if s != tc.wantState {
				t.Fatalf("state %q, want %q", s, tc.wantState)
			}
		})
	}
}

// Valid runs for every job that carries a traceparent, on the reader's
// path: it allocates nothing.
func TestValidAllocatesNothing(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	if n := testing.AllocsPerRun(100, func() { _ = Valid(tp) && ValidState("a=b") }); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}

func TestValidState(t *testing.T) {
	for s, ok := range map[string]bool{"": true, "a=b,c=d": true, strings.Repeat("a", 512): true,
		strings.Repeat("a", 513): false, "a=b\n": false, "a=\x00": false, "é=1": false} {
		if ValidState(s) != ok {
			t.Errorf("ValidState(%q) != %v", s, ok)
		}
	}
}

// Off (no span in the context, SetAlways never called), Send starts
// nothing and allocates nothing.
func TestSendOffCostsNothing(t *testing.T) {
	ctx := context.Background()
	if n := testing.AllocsPerRun(100, func() {
		c, span := Send(ctx, "q", 1)
		Sent(span, nil, nil)
		_ = c
	}); n != 0 {
		t.Fatalf("%v allocations with tracing off", n)
	}
	if _, span := Send(ctx, "q", 1); span != nil {
		t.Fatal("a span with tracing off")
	}
}
