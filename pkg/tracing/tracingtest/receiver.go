// Package tracingtest is a real OTLP/HTTP trace receiver on loopback, for
// tests and benchmarks: it decodes each ExportTraceServiceRequest (the
// protobuf an OpenTelemetry SDK's otlptracehttp exporter sends) and keeps
// its spans, flattened.
//
//	r := tracingtest.Start()
//	defer r.Close()
//	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
//	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", r.URL)
//	// ... tracing.Setup, work, stop ...
//	spans := r.Spans()
package tracingtest

import (
	"compress/gzip"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Span is one received span.
type Span struct {
	Service  string // the resource's service.name
	Name     string
	Kind     string // SPAN_KIND_SERVER, SPAN_KIND_CLIENT, …
	TraceID  string // hex
	SpanID   string // hex
	ParentID string // hex; "" for a root span
	Attrs    map[string]string
	Links    []Link
	Error    bool   // status code error
	Message  string // status message
	Start    time.Time
	End      time.Time
}

// Link is a span's link to another span.
type Link struct{ TraceID, SpanID string }

// Receiver is a running OTLP/HTTP receiver.
type Receiver struct {
	// URL is the base URL, for OTEL_EXPORTER_OTLP_ENDPOINT (the
	// exporter posts to URL/v1/traces).
	URL string
	srv *httptest.Server

	discard bool // count spans, keep none (Counter)

	mu       sync.Mutex
	spans    []Span
	count    int
	requests int
	bad      []string
	changed  chan struct{}
}

// Start starts a receiver on 127.0.0.1.
func Start() *Receiver { return start(false) }

// Counter is a receiver that keeps only the number of spans (Count), for
// long runs: it walks each export's protobuf wire format to the spans
// without decoding them (what it costs is not what tracing costs the
// sender).
func Counter() *Receiver { return start(true) }

func start(discard bool) *Receiver {
	r := &Receiver{changed: make(chan struct{}), discard: discard}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	r.URL = r.srv.URL
	return r
}

// Close stops the receiver.
func (r *Receiver) Close() { r.srv.Close() }

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		r.fail(fmt.Sprintf("%s %s: not an OTLP trace export", req.Method, req.URL.Path))
		http.NotFound(w, req)
		return
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			r.fail("gzip: " + err.Error())
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	if err == nil && r.discard {
		var n int
		if n, err = countSpans(b); err == nil {
			r.mu.Lock()
			r.requests++
			r.count += n
			r.mu.Unlock()
			r.answer(w)
			return
		}
	}
	var msg coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(b, &msg)
	}
	if err != nil {
		r.fail("decoding ExportTraceServiceRequest: " + err.Error())
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var got []Span
	n := 0
	for _, rs := range msg.GetResourceSpans() {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = value(kv.GetValue())
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				n++
				sp := Span{Service: service, Name: s.GetName(), Kind: s.GetKind().String(),
					TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					ParentID: hex.EncodeToString(s.GetParentSpanId()), Attrs: map[string]string{},
					Error: s.GetStatus().GetCode().String() == "STATUS_CODE_ERROR", Message: s.GetStatus().GetMessage(),
					Start: time.Unix(0, int64(s.GetStartTimeUnixNano())), End: time.Unix(0, int64(s.GetEndTimeUnixNano()))}
				for _, kv := range s.GetAttributes() {
					sp.Attrs[kv.GetKey()] = value(kv.GetValue())
				}
				for _, l := range s.GetLinks() {
					sp.Links = append(sp.Links, Link{TraceID: hex.EncodeToString(l.GetTraceId()), SpanID: hex.EncodeToString(l.GetSpanId())})
				}
				got = append(got, sp)
			}
		}
	}
	r.mu.Lock()
	r.requests++
	r.count += n
	r.spans = append(r.spans, got...)
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
	r.answer(w)
}

func (r *Receiver) answer(w http.ResponseWriter) {
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// countSpans counts the spans of an ExportTraceServiceRequest:
// resource_spans (1) → scope_spans (2) → spans (2).
func countSpans(b []byte) (int, error) {
	all := fields(b, 1)
	if len(b) > 0 && all == nil {
		return 0, fmt.Errorf("not an ExportTraceServiceRequest (%d bytes)", len(b))
	}
	n := 0
	for _, rs := range all {
		for _, ss := range fields(rs, 2) {
			n += len(fields(ss, 2))
		}
	}
	return n, nil
}

// fields returns the bytes of every length-delimited field num of the
// message b (nil when b is malformed).
func fields(b []byte, num protowire.Number) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		n, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return nil
		}
		b = b[l:]
		if typ == protowire.BytesType {
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return nil
			}
			if n == num {
				out = append(out, v)
			}
			b = b[m:]
			continue
		}
		m := protowire.ConsumeFieldValue(n, typ, b)
		if m < 0 {
			return nil
		}
		b = b[m:]
	}
	return out
}

func (r *Receiver) fail(why string) {
	r.mu.Lock()
	r.bad = append(r.bad, why)
	r.mu.Unlock()
}

func value(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_BoolValue:
		return strconv.FormatBool(x.BoolValue)
	case *commonpb.AnyValue_DoubleValue:
		return strconv.FormatFloat(x.DoubleValue, 'g', -1, 64)
	}
	return v.String()
}

// Spans returns a copy of every span received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Count is how many spans arrived.
func (r *Receiver) Count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.count
}

// Requests is how many export requests arrived.
func (r *Receiver) Requests() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requests
}

// Refused lists the requests the receiver could not take (not an OTLP
// trace export, or undecodable).
func (r *Receiver) Refused() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.bad...)
}

// Wait blocks until ok holds for the spans received, or ctx ends.
func (r *Receiver) Wait(ctx context.Context, ok func([]Span) bool) error {
	for {
		r.mu.Lock()
		done, ch := ok(r.spans), r.changed
		r.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("tracingtest: spans awaited: %w", context.Cause(ctx))
		}
	}
}
