package poller_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/tracing"
	"github.com/tenaz/tenaz/pkg/tracing/tracingtest"
)

// The submitter's span: the trace every span of the event must join.
const (
	submitterTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	submitterSpan  = "00f067aa0ba902b7"
	submitterTP    = "00-" + submitterTrace + "-" + submitterSpan + "-01"
)

// syncBuffer collects log lines from every service of a world.
type syncBuffer struct{ servicetest.LogBuffer }

// lines are the JSON log lines that name the event.
func (s *syncBuffer) lines(id string) []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(s.String()))
	for sc.Scan() {
		var l map[string]any
		if json.Unmarshal(sc.Bytes(), &l) == nil && l["event_id"] == id {
			out = append(out, l)
		}
	}
	return out
}

// traced starts a real OTLP/HTTP receiver and turns tracing on through
// the OTEL_* variables, as an operator would; the returned stop flushes
// every span to the receiver.
func traced(t *testing.T) (*tracingtest.Receiver, func()) {
	r := tracingtest.Start()
	t.Cleanup(r.Close)
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", r.URL)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
	stop, err := tracing.Setup(context.Background(), "tenaz-test", nil)
	if err != nil {
		t.Fatal(err)
	}
	flush := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := stop(ctx); err != nil {
			t.Errorf("flushing spans: %v", err)
		}
	}
	t.Cleanup(flush) // a failed test still uninstalls the provider
	return r, flush
}

// waitSpans waits until the receiver has n spans called name of event id.
func waitSpans(t *testing.T, r *tracingtest.Receiver, id, name string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Wait(ctx, func(ss []tracingtest.Span) bool {
		got := 0
		for _, s := range ss {
			if s.Name == name && s.Attrs["tenaz.event_id"] == id {
				got++
			}
		}
		return got >= n
	}); err != nil {
		t.Fatalf("waiting for %d %s spans of %s: %v", n, name, id, err)
	}
}

// eventSpans checks that the spans of the event are all in the
// submitter's trace and returns its accept span and its other spans by
// name, in start order.
func eventSpans(t *testing.T, spans []tracingtest.Span, id string) (tracingtest.Span, map[string][]tracingtest.Span) {
	t.Helper()
	var accept tracingtest.Span
	byName := map[string][]tracingtest.Span{}
	for _, s := range spans {
		if s.Attrs["tenaz.event_id"] != id {
			continue
		}
		if s.TraceID != submitterTrace {
			t.Errorf("%s: trace %s, want the submitter's %s", s.Name, s.TraceID, submitterTrace)
		}
		if s.Name == tracing.SpanAccept {
			if accept.SpanID != "" {
				t.Errorf("two accept spans: %s and %s", accept.SpanID, s.SpanID)
			}
			accept = s
			continue
		}
		byName[s.Name] = append(byName[s.Name], s)
	}
	if accept.SpanID == "" {
		t.Fatalf("no accept span of %s among %d spans", id, len(spans))
	}
	if accept.ParentID != submitterSpan || accept.Kind != "SPAN_KIND_CONSUMER" || accept.Attrs["tenaz.outcome"] != "created" {
		t.Errorf("accept: want a created consumer span, child of the submitter's %s; got %+v", submitterSpan, accept)
	}
	for name, ss := range byName {
		for _, s := range ss {
			if s.ParentID != accept.SpanID {
				t.Errorf("%s: parent %s, want the accept span %s", name, s.ParentID, accept.SpanID)
			}
		}
	}
	return accept, byName
}

func wantAttrs(t *testing.T, s tracingtest.Span, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if s.Attrs[k] != v {
			t.Errorf("%s %s: want %s=%q, got %q (attributes %v)", s.Name, s.SpanID, k, v, s.Attrs[k], s.Attrs)
		}
	}
}

// One event that retries, falls back and calls back is one trace: the
// submitter's traceparent is the accept span's parent; every attempt and
// the callback are children of the accept span, with outcome and class;
// each call carries its attempt's traceparent; the record keeps the
// accept span's; every log line of the event has its trace_id; the
// latency histogram has the trace as exemplar.
func TestTraceOfAnEventThatRetriesFallsBackAndCallsBack(t *testing.T) {
	r, flush := traced(t)
	logs := &syncBuffer{}
	log := zerolog.New(logs).Level(zerolog.DebugLevel)
	w := newWorld(t, `attempts: 2, backoff: {initial: 1s, max: 1s, jitter: 0}, callback_sla: 1m,
    fallback: {target: bureau_a, completion: callback, attempts: 1, callback_sla: 1m}`,
		worldOpts{a: provider.Faults{FailFirst: 2}, callbacks: &provider.CallbackFaults{}, log: &log})
	id := w.submit("c-trace", `{"applicant":"`+"c-trace"+`"}`, tracing.Header, submitterTP)
	rec := w.WaitStatus(id, state.Done, 30*time.Second)
	if rec.Stage != state.StageFallback || count(rec, state.Retry) != 1 || count(rec, state.Fallback) != 1 {
		t.Fatalf("want a retry, then the fallback stage done by callback; got %s at %s: %v", rec.Status, rec.Stage, actions(rec))
	}
	// The callback's span ends after its write, and the last attempt's
	// after its run's (which the callback may overtake): wait for both
	// before the flush.
	waitSpans(t, r, id, tracing.SpanCallback, 1)
	waitSpans(t, r, id, tracing.SpanAttempt, 3)
	exemplar := w.exemplar("tenaz_delivery_duration_seconds")
	flush()

	accept, spans := eventSpans(t, r.Spans(), id)
	if rec.Traceparent != "00-"+submitterTrace+"-"+accept.SpanID+"-01" {
		t.Errorf("record: traceparent %q, want the accept span's", rec.Traceparent)
	}
	attempts := spans[tracing.SpanAttempt]
	if len(attempts) != 3 {
		t.Fatalf("want 3 attempt spans (2 primary, 1 fallback), got %d", len(attempts))
	}
	for i, want := range []map[string]string{
		{"tenaz.attempt": "1", "tenaz.stage": "primary", "tenaz.outcome": "retry", "tenaz.class": "transient", "http.response.status_code": "503"},
		{"tenaz.attempt": "2", "tenaz.stage": "primary", "tenaz.outcome": "fallback", "tenaz.class": "transient", "http.response.status_code": "503"},
		{"tenaz.attempt": "1", "tenaz.stage": "fallback", "tenaz.outcome": "done", "tenaz.class": "success", "http.response.status_code": "200"},
	} {
		wantAttrs(t, attempts[i], want)
		wantAttrs(t, attempts[i], map[string]string{"tenaz.target": "bureau_a", "tenaz.account": "acme", "tenaz.kind": "credit.evaluate"})
		if attempts[i].Kind != "SPAN_KIND_CLIENT" || attempts[i].Error != (i < 2) {
			t.Errorf("attempt %d: want a client span, an error only when it failed; got %s error=%v", i, attempts[i].Kind, attempts[i].Error)
		}
	}
	calls := w.a.CallsFor(id)
	if len(calls) != 3 {
		t.Fatalf("want 3 calls at bureau A, got %d", len(calls))
	}
	for i, c := range calls {
		if want := "00-" + submitterTrace + "-" + attempts[i].SpanID + "-01"; c.Header.Get(tracing.Header) != want {
			t.Errorf("call %d: traceparent %q, want its attempt's %q", i+1, c.Header.Get(tracing.Header), want)
		}
	}
	cbs := spans[tracing.SpanCallback]
	if len(cbs) != 1 {
		t.Fatalf("want 1 callback span, got %d", len(cbs))
	}
	wantAttrs(t, cbs[0], map[string]string{"tenaz.outcome": "applied", "tenaz.target": "bureau_a"})
	if cbs[0].Kind != "SPAN_KIND_SERVER" {
		t.Errorf("callback: want a server span, got %s", cbs[0].Kind)
	}
	if len(spans) != 2 {
		t.Errorf("want attempt and callback spans only, got %v", spans)
	}

	lines := logs.lines(id)
	if len(lines) < 3 { // will retry, moving to the fallback stage, callback
		t.Fatalf("want the event's log lines, got %d", len(lines))
	}
	for _, l := range lines {
		if l["trace_id"] != submitterTrace {
			t.Errorf("log line without the event's trace_id: %v", l)
		}
	}
	if exemplar != submitterTrace {
		t.Errorf("tenaz_delivery_duration_seconds: exemplar trace_id %q, want %q", exemplar, submitterTrace)
	}
}

// A poll stage's polls are spans of the event's trace too, each a child
// of its accept span, and each poll request carries its own span.
func TestTraceOfPolls(t *testing.T) {
	r, flush := traced(t)
	w := newWorld(t, `attempts: 1,
    fallback: {target: bureau_b, completion: poll, attempts: 1, poll_sla: 1m}`,
		worldOpts{a: provider.Faults{Status: http.StatusServiceUnavailable}, b: provider.Faults{PollAfter: 1}})
	id := w.submit("c-poll-trace", `{"applicant":"`+"c-poll-trace"+`"}`, tracing.Header, submitterTP)
	w.WaitStatus(id, state.Done, 30*time.Second)
	// The last poll's span ends after its write: wait for it before the
	// flush, which ends the exporter.
	waitSpans(t, r, id, tracing.SpanPoll, 2)
	flush()

	_, spans := eventSpans(t, r.Spans(), id)
	polls := spans[tracing.SpanPoll]
	if len(polls) != 2 {
		t.Fatalf("want 2 poll spans, got %d", len(polls))
	}
	for i, want := range []map[string]string{
		{"tenaz.poll": "1", "tenaz.outcome": "pending"},
		{"tenaz.poll": "2", "tenaz.outcome": "done"},
	} {
		wantAttrs(t, polls[i], want)
		wantAttrs(t, polls[i], map[string]string{"tenaz.stage": "fallback", "tenaz.target": "bureau_b", "tenaz.class": "success"})
	}
	calls := w.b.PollCalls()
	if len(calls) != 2 {
		t.Fatalf("want 2 polls at bureau B, got %d", len(calls))
	}
	for i, c := range calls {
		if want := "00-" + submitterTrace + "-" + polls[i].SpanID + "-01"; c.Header.Get(tracing.Header) != want {
			t.Errorf("poll %d: traceparent %q, want its span's %q", i+1, c.Header.Get(tracing.Header), want)
		}
	}
	if n := len(spans[tracing.SpanAttempt]); n != 2 {
		t.Errorf("want 2 attempt spans (primary and fallback), got %d", n)
	}
}

// exemplar is the trace_id of the newest exemplar of the histogram name
// ("" for none).
func (w *world) exemplar(name string) string {
	w.t.Helper()
	mfs, err := w.reg.Gather()
	if err != nil {
		w.t.Fatal(err)
	}
	id, newest := "", time.Time{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, b := range m.GetHistogram().GetBucket() {
				e := b.GetExemplar()
				if e == nil || e.GetTimestamp().AsTime().Before(newest) {
					continue
				}
				for _, l := range e.GetLabel() {
					if l.GetName() == "trace_id" {
						id, newest = l.GetValue(), e.GetTimestamp().AsTime()
					}
				}
			}
		}
	}
	return id
}
