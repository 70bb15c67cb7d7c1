package tracing_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.uber.org/goleak"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/tracing"
	"github.com/tenaz/tenaz/pkg/tracing/tracingtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const submitted = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

// otlp points the OTEL_* variables at r, as an operator would.
func otlp(t *testing.T, r *tracingtest.Receiver) {
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", r.URL)
	t.Setenv("OTEL_SERVICE_NAME", "")
	t.Setenv("OTEL_SDK_DISABLED", "")
}

func TestFrom(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{submitted, submitted},
		{"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"},
		{"", ""},
		{"garbage", ""},
		{"00-00000000000000000000000000000000-b7ad6b7169203331-01", ""}, // all-zero trace id
		{"00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01", ""}, // all-zero span id
		{"ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", ""}, // version ff is invalid
		{"00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01", ""}, // upper case is invalid
		{"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra", ""},
		// A later version may carry more fields; its first four are read.
		{"01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra", submitted},
	} {
		h := http.Header{}
		h.Set(tracing.Header, c.in)
		if got := tracing.From(h.Get); got != c.want {
			t.Errorf("From(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	// NATS headers are case-sensitive: both spellings are read.
	for _, name := range []string{"traceparent", "Traceparent"} {
		h := map[string]string{name: submitted}
		if got := tracing.From(func(k string) string { return h[k] }); got != submitted {
			t.Errorf("header %q: got %q", name, got)
		}
	}
	if got := tracing.TraceID(submitted); got != "0af7651916cd43dd8448eb211c80319c" {
		t.Errorf("TraceID: got %q", got)
	}
	if got := tracing.TraceID("not one"); got != "" {
		t.Errorf("TraceID of garbage: got %q", got)
	}
}

func FuzzFrom(f *testing.F) {
	f.Add(submitted)
	f.Add("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00")
	f.Add("01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-x")
	f.Add("01-00000000000000000000000000000001-0000000000000001-02") // a later version's flag: not version 00's
	f.Fuzz(func(t *testing.T, in string) {
		got := tracing.From(func(string) string { return in })
		if got == "" {
			return
		}
		if tracing.TraceID(got) == "" || tracing.From(func(string) string { return got }) != got {
			t.Fatalf("From(%q) = %q: not canonical", in, got)
		}
	})
}

// With OTEL_TRACES_EXPORTER unset (or none, or the SDK disabled), Setup
// installs no tracer provider and nothing reaches a collector, even one
// OTEL_EXPORTER_OTLP_ENDPOINT names; a submitter's traceparent still
// reaches the target.
func TestOffInstallsNothingAndExportsNothing(t *testing.T) {
	r := tracingtest.Start()
	defer r.Close()
	for _, env := range []map[string]string{
		{"OTEL_TRACES_EXPORTER": ""},
		{"OTEL_TRACES_EXPORTER": "none"},
		{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"},
	} {
		otlp(t, r)
		for k, v := range env {
			t.Setenv(k, v)
		}
		before := otel.GetTracerProvider()
		stop, err := tracing.Setup(context.Background(), "test", nil)
		if err != nil {
			t.Fatal(err)
		}
		if tracing.Enabled() || otel.GetTracerProvider() != before {
			t.Fatalf("%v: a tracer provider was installed", env)
		}
		if _, ok := otel.GetTracerProvider().(*sdktrace.TracerProvider); ok {
			t.Fatalf("%v: the SDK's provider is the global one", env)
		}
		ev := event.Envelope{ID: "ev_1", Account: "a", Kind: "k", Traceparent: submitted}
		ctx, sp := tracing.Accept(context.Background(), &ev)
		if ev.Traceparent != submitted || sp.SpanContext().IsValid() {
			t.Errorf("%v: Accept changed the event (%q) or made a span", env, ev.Traceparent)
		}
		sp.End()
		ctx, sp = tracing.Attempt(ctx, ev, 1, "primary", "erp")
		h := http.Header{}
		tracing.Inject(ctx, h, ev.Traceparent)
		if h.Get(tracing.Header) != submitted {
			t.Errorf("%v: the target gets %q, want the submitter's %q", env, h.Get(tracing.Header), submitted)
		}
		sp.End()
		if err := stop(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if n := r.Requests(); n != 0 {
		t.Fatalf("tracing off: %d export requests reached the collector", n)
	}
}

// Off, the span functions allocate nothing: what every event pays.
func TestOffAllocatesNothing(t *testing.T) {
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	ev := event.Envelope{ID: "ev_1", Account: "a", Kind: "k", Traceparent: submitted}
	h := http.Header{}
	ctx := context.Background()
	allocs := testing.AllocsPerRun(100, func() {
		c, sp := tracing.Accept(ctx, &ev)
		sp.End()
		c, sp = tracing.Attempt(c, ev, 1, "primary", "erp")
		tracing.Record(c, tracing.Result{Outcome: "done", Class: "success", HTTPStatus: 200})
		sp.End()
		tracing.Inject(c, h, "")
		tracing.Callback(c, ev.Traceparent, time.Time{}, ev.ID, "erp", "msg_1", "applied")
	})
	if allocs != 0 {
		t.Fatalf("tracing off: %v allocations per event, want 0", allocs)
	}
}

func BenchmarkOff(b *testing.B) {
	ev := event.Envelope{ID: "ev_1", Account: "a", Kind: "k", Traceparent: submitted}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		c, sp := tracing.Attempt(ctx, ev, 1, "primary", "erp")
		tracing.Record(c, tracing.Result{Outcome: "done", Class: "success", HTTPStatus: 200})
		sp.End()
	}
}

// On, spans reach a real OTLP/HTTP receiver: the accept span is a child
// of the submitter's, and an attempt (whose traceparent the target gets)
// a child of the accept span, carried by the envelope.
func TestOnExportsOverOTLP(t *testing.T) {
	r := tracingtest.Start()
	defer r.Close()
	otlp(t, r)
	t.Setenv("OTEL_SERVICE_NAME", "tenaz-test")
	stop, err := tracing.Setup(context.Background(), "ignored", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !tracing.Enabled() {
		t.Fatal("OTEL_TRACES_EXPORTER=otlp: tracing is not on")
	}
	ev := event.Envelope{ID: "ev_1", Account: "acme", Kind: "order.create", Traceparent: submitted}
	_, sp := tracing.Accept(context.Background(), &ev)
	sp.End()
	if ev.Traceparent == submitted || tracing.TraceID(ev.Traceparent) != tracing.TraceID(submitted) {
		t.Fatalf("Accept: the envelope carries %q, want a new span of the submitter's trace", ev.Traceparent)
	}
	ctx, sp := tracing.Attempt(context.Background(), ev, 2, "primary", "erp")
	h := http.Header{}
	tracing.Inject(ctx, h, ev.Traceparent)
	tracing.Record(ctx, tracing.Result{Outcome: "retry", Class: "transient", HTTPStatus: 503, Error: "target answered 503"})
	sp.End()
	if err := stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if tracing.Enabled() {
		t.Fatal("still on after stop")
	}
	spans := r.Spans()
	if len(spans) != 2 || len(r.Refused()) != 0 {
		t.Fatalf("want 2 spans, got %d (refused: %v)", len(spans), r.Refused())
	}
	accept, attempt := spans[0], spans[1]
	if accept.Name != tracing.SpanAccept || attempt.Name != tracing.SpanAttempt {
		t.Fatalf("names: %s, %s", accept.Name, attempt.Name)
	}
	if accept.Service != "tenaz-test" {
		t.Errorf("service.name: want OTEL_SERVICE_NAME's tenaz-test, got %q", accept.Service)
	}
	if accept.TraceID != tracing.TraceID(submitted) || accept.ParentID != "b7ad6b7169203331" {
		t.Errorf("accept: want a child of the submitter's span, got trace %s parent %s", accept.TraceID, accept.ParentID)
	}
	if attempt.TraceID != accept.TraceID || attempt.ParentID != accept.SpanID {
		t.Errorf("attempt: want a child of the accept span %s, got parent %s", accept.SpanID, attempt.ParentID)
	}
	if want := "00-" + attempt.TraceID + "-" + attempt.SpanID + "-01"; h.Get(tracing.Header) != want {
		t.Errorf("the target gets %q, want the attempt's %q", h.Get(tracing.Header), want)
	}
	for k, v := range map[string]string{"tenaz.attempt": "2", "tenaz.outcome": "retry", "tenaz.class": "transient",
		"http.response.status_code": "503", "tenaz.event_id": "ev_1", "tenaz.target": "erp"} {
		if attempt.Attrs[k] != v {
			t.Errorf("attempt %s: want %q, got %q", k, v, attempt.Attrs[k])
		}
	}
	if !attempt.Error || !strings.Contains(attempt.Message, "503") {
		t.Errorf("a transient failure: want an error status with its message, got %v %q", attempt.Error, attempt.Message)
	}
}

// On, with every span sampled and exported over OTLP/HTTP to a local
// receiver: the tracing cost of one event (its accept and one attempt).
func BenchmarkOn(b *testing.B) {
	r := tracingtest.Counter()
	defer r.Close()
	b.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	b.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", r.URL)
	b.Setenv("OTEL_BSP_MAX_QUEUE_SIZE", "262144")
	stop, err := tracing.Setup(context.Background(), "bench", nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	h := http.Header{}
	b.ReportAllocs()
	for b.Loop() {
		ev := event.Envelope{ID: "ev_1", Account: "a", Kind: "k", Traceparent: submitted}
		_, sp := tracing.Accept(ctx, &ev)
		sp.End()
		c, sp := tracing.Attempt(ctx, ev, 1, "primary", "erp")
		tracing.Inject(c, h, ev.Traceparent)
		tracing.Record(c, tracing.Result{Outcome: "done", Class: "success", HTTPStatus: 200})
		sp.End()
	}
	if err := stop(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(r.Count())/float64(b.N), "spans/op")
}

// The counting receiver counts what the exporter sent, without keeping it.
func TestCounterCountsSpans(t *testing.T) {
	r := tracingtest.Counter()
	defer r.Close()
	otlp(t, r)
	stop, err := tracing.Setup(context.Background(), "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		ev := event.Envelope{ID: "ev_1", Account: "a", Kind: "k"}
		_, sp := tracing.Accept(context.Background(), &ev)
		sp.End()
	}
	if err := stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r.Count() != 3 || len(r.Spans()) != 0 || len(r.Refused()) != 0 {
		t.Fatalf("want 3 spans counted and none kept, got %d counted, %d kept, refused %v", r.Count(), len(r.Spans()), r.Refused())
	}
}
