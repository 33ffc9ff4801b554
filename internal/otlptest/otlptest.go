// Package otlptest is a real OTLP trace receiver for tests: it serves the
// OTLP/HTTP (protobuf) and OTLP/gRPC trace services on loopback ports and
// keeps every span it receives, decoded, for the test to read and print as
// a tree.
//
//	rcv := otlptest.Start(t)
//	cmd.Env = append(cmd.Env, rcv.Env("grpc")...)
//	spans := rcv.Wait(t, 10*time.Second, func(s []otlptest.Span) bool { return len(s) >= 3 })
package otlptest

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	common "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Span is one received span, decoded.
type Span struct {
	TraceID, SpanID, ParentID string // hex; ParentID "" for a root
	Name                      string
	Kind                      string // "producer", "consumer", ...
	Service                   string // the resource's service.name
	Attrs                     map[string]any
	Links                     []Link
	Error                     bool   // status code Error
	Message                   string // status message
	Start, End                time.Time
}

// Link is a span's link to another span.
type Link struct{ TraceID, SpanID string }

// Receiver is a running OTLP receiver.
type Receiver struct {
	HTTP string // the OTLP/HTTP endpoint, http://127.0.0.1:port
	GRPC string // the OTLP/gRPC endpoint, http://127.0.0.1:port

	mu       sync.Mutex
	spans    []Span
	requests int
}

// Start starts a receiver, stopped when the test ends.
func Start(tb testing.TB) *Receiver {
	tb.Helper()
	r := &Receiver{}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	r.HTTP, r.GRPC = "http://"+hl.Addr().String(), "http://"+gl.Addr().String()
	hs := &http.Server{Handler: http.HandlerFunc(r.serveHTTP), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(hl) }()
	gs := grpc.NewServer()
	coltrace.RegisterTraceServiceServer(gs, grpcService{r: r})
	go func() { _ = gs.Serve(gl) }()
	tb.Cleanup(func() {
		_ = hs.Close()
		gs.Stop()
	})
	return r
}

// Env is the environment that makes a baton export to r over protocol
// ("grpc" or "http/protobuf"), in batches sent every 100 ms.
func (r *Receiver) Env(protocol string) []string {
	ep := r.HTTP
	if protocol == "grpc" {
		ep = r.GRPC
	}
	return []string{"OTEL_TRACES_EXPORTER=otlp", "OTEL_EXPORTER_OTLP_PROTOCOL=" + protocol,
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + ep, "OTEL_BSP_SCHEDULE_DELAY=100"}
}

func (r *Receiver) serveHTTP(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path != "/v1/traces" || req.Method != http.MethodPost {
		http.NotFound(w, req)
		return
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var m coltrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &m); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.add(&m)
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

type grpcService struct {
	coltrace.UnimplementedTraceServiceServer
	r *Receiver
}

func (g grpcService) Export(_ context.Context, m *coltrace.ExportTraceServiceRequest) (*coltrace.ExportTraceServiceResponse, error) {
	g.r.add(m)
	return &coltrace.ExportTraceServiceResponse{}, nil
}

func (r *Receiver) add(m *coltrace.ExportTraceServiceRequest) {
	var got []Span
	for _, rs := range m.GetResourceSpans() {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				got = append(got, decode(s, service))
			}
		}
	}
	r.mu.Lock()
	r.spans = append(r.spans, got...)
	r.requests++
	r.mu.Unlock()
}

func decode(s *tracepb.Span, service string) Span {
	d := Span{TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
		Name: s.GetName(), Service: service, Attrs: map[string]any{},
		Kind:  strings.ToLower(strings.TrimPrefix(s.GetKind().String(), "SPAN_KIND_")),
		Error: s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR, Message: s.GetStatus().GetMessage(),
		Start: time.Unix(0, int64(s.GetStartTimeUnixNano())), End: time.Unix(0, int64(s.GetEndTimeUnixNano()))}
	if p := s.GetParentSpanId(); len(p) > 0 {
		d.ParentID = hex.EncodeToString(p)
	}
	for _, kv := range s.GetAttributes() {
		d.Attrs[kv.GetKey()] = value(kv.GetValue())
	}
	for _, l := range s.GetLinks() {
		d.Links = append(d.Links, Link{TraceID: hex.EncodeToString(l.GetTraceId()), SpanID: hex.EncodeToString(l.GetSpanId())})
	}
	return d
}

func value(v *common.AnyValue) any {
	switch x := v.GetValue().(type) {
	case *common.AnyValue_StringValue:
		return x.StringValue
	case *common.AnyValue_IntValue:
		return x.IntValue
	case *common.AnyValue_BoolValue:
		return x.BoolValue
	case *common.AnyValue_DoubleValue:
		return x.DoubleValue
	}
	return v.String()
}

// Spans is every span received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Wait polls the spans received until done holds, and returns them; the
// test fails after within.
func (r *Receiver) Wait(tb testing.TB, within time.Duration, done func([]Span) bool) []Span {
	tb.Helper()
	for end := time.Now().Add(within); ; time.Sleep(20 * time.Millisecond) {
		s := r.Spans()
		if done(s) {
			return s
		}
		if time.Now().After(end) {
			tb.Fatalf("otlp receiver: not within %v; %d spans received:\n%s", within, len(s), Tree(s))
		}
	}
}

// Tree prints spans as trees, one per trace, children under their parent
// in start order, each with its kind, service, attributes, status and links.
func Tree(spans []Span) string {
	byID := map[string]bool{}
	kids := map[string][]Span{}
	for _, s := range spans {
		byID[s.SpanID] = true
	}
	var roots []Span
	for _, s := range spans {
		if s.ParentID == "" || !byID[s.ParentID] {
			roots = append(roots, s)
		} else {
			kids[s.ParentID] = append(kids[s.ParentID], s)
		}
	}
	order := func(ss []Span) {
		sort.SliceStable(ss, func(i, j int) bool { return ss[i].Start.Before(ss[j].Start) })
	}
	order(roots)
	var b strings.Builder
	var walk func(s Span, depth int)
	walk = func(s Span, depth int) {
		ind := strings.Repeat("    ", depth)
		fmt.Fprintf(&b, "%s%s [%s, %s] span %s", ind, s.Name, s.Kind, s.Service, short(s.SpanID))
		if s.ParentID != "" && !byID[s.ParentID] {
			fmt.Fprintf(&b, " (parent %s, not exported here)", short(s.ParentID))
		}
		if s.Error {
			fmt.Fprintf(&b, " ERROR %q", s.Message)
		}
		b.WriteString("\n")
		keys := make([]string, 0, len(s.Attrs))
		for k := range s.Attrs {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "%s      %s = %v\n", ind, k, s.Attrs[k])
		}
		for _, l := range s.Links {
			fmt.Fprintf(&b, "%s      link → span %s\n", ind, short(l.SpanID))
		}
		ks := kids[s.SpanID]
		order(ks)
		for _, k := range ks {
			walk(k, depth+1)
		}
	}
	for _, s := range roots {
		fmt.Fprintf(&b, "trace %s\n", short(s.TraceID))
		walk(s, 1)
	}
	return b.String()
}

func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}
