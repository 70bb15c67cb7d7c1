package metrics_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/tenaz/tenaz/pkg/metrics"
)

// A latency observed in a sampled span carries its trace as exemplar;
// one without (tracing off) or in an unsampled span carries none.
func TestLatencyExemplars(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	span := func(flags trace.TraceFlags) context.Context {
		tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
		sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
		return trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: flags}))
	}
	s.DeliveryLatency("acme", "k", "erp", 30*time.Millisecond, span(trace.FlagsSampled))
	s.WaitTime("acme", "k", 2*time.Second, span(trace.FlagsSampled))
	s.DeliveryLatency("beta", "k", "erp", 30*time.Millisecond, span(0))
	s.WaitTime("beta", "k", 2*time.Second, context.Background())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]string{} // metric/account → exemplar trace_id
	for _, mf := range mfs {
		if mf.GetName() != metrics.NameDelivery && mf.GetName() != metrics.NameWait {
			continue
		}
		for _, m := range mf.GetMetric() {
			account := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "account" {
					account = l.GetValue()
				}
			}
			for _, b := range m.GetHistogram().GetBucket() {
				for _, l := range b.GetExemplar().GetLabel() {
					found[mf.GetName()+"/"+account] = l.GetValue()
				}
			}
		}
	}
	for _, k := range []string{metrics.NameDelivery + "/acme", metrics.NameWait + "/acme"} {
		if found[k] != "4bf92f3577b34da6a3ce929d0e0e4736" {
			t.Errorf("%s: want the span's trace as exemplar, got %q", k, found[k])
		}
	}
	for _, k := range []string{metrics.NameDelivery + "/beta", metrics.NameWait + "/beta"} {
		if v, ok := found[k]; ok {
			t.Errorf("%s: no sampled span, yet exemplar %q", k, v)
		}
	}
}
