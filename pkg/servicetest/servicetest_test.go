package servicetest_test

import (
	"math"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Metric reads the series whose labels are exactly the ones asked for: a
// subset or a superset of its labels is another series, and one that does
// not exist equals no value.
func TestMetricMatchesExactLabels(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total"}, []string{"account", "kind"})
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "x_seconds"}, []string{"account"})
	reg.MustRegister(c, h)
	c.WithLabelValues("acme", "order.create").Add(3)
	c.WithLabelValues("acme", "invoice.send").Add(1)
	h.WithLabelValues("acme").Observe(1)
	h.WithLabelValues("acme").Observe(2)

	if got := servicetest.Metric(t, reg, "x_total", "account", "acme", "kind", "order.create"); got != 3 {
		t.Errorf("counter: want 3, got %v", got)
	}
	if got := servicetest.Metric(t, reg, "x_seconds", "account", "acme"); got != 2 {
		t.Errorf("histogram: want its count 2, got %v", got)
	}
	for _, labels := range [][]string{{"account", "acme"}, {"account", "acme", "kind", "order.create", "x", "y"}, {"account", "globex", "kind", "order.create"}} {
		if got := servicetest.Metric(t, reg, "x_total", labels...); !math.IsNaN(got) {
			t.Errorf("%v: want NaN (no such series), got %v", labels, got)
		}
	}
}

// Actions reads a history in order.
func TestActions(t *testing.T) {
	r := state.Record{History: []state.Entry{{Action: state.Accept}, {Action: state.Claim}, {Action: state.Succeed}}}
	if got := servicetest.Actions(r); got != "accept>claim>succeed" {
		t.Errorf("want accept>claim>succeed, got %q", got)
	}
}
