package breaker_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tenaz/tenaz/pkg/breaker"
	"github.com/tenaz/tenaz/pkg/metrics"
	"github.com/tenaz/tenaz/pkg/natstest"
)

// TestStateGauge: every replica's tenaz_breaker_state follows the shared
// state through open, half-open and closed, whichever replica wrote it.
func TestStateGauge(t *testing.T) {
	e := setup(t, 0)
	var regs []*prometheus.Registry
	var bs []*breaker.Breaker
	cfg := breaker.Config{Failures: 2, Cooldown: time.Minute}
	for i := range 2 {
		reg := prometheus.NewRegistry()
		set, err := metrics.New(reg)
		if err != nil {
			t.Fatal(err)
		}
		_, js := e.srv.Conn(t)
		r, err := breaker.New(ctx(t), js, breaker.Options{Instance: fmt.Sprintf("m%d", i), Now: e.clk.Now, Metrics: set})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Stop)
		regs = append(regs, reg)
		bs = append(bs, r.For(account, target, cfg))
	}
	// state is the state whose series of the breaker is 1; every state
	// has a series once the breaker was seen.
	state := func(reg *prometheus.Registry) string {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		on, series := "", 0
		for _, mf := range mfs {
			if mf.GetName() != metrics.NameBreakerState {
				continue
			}
			for _, m := range mf.GetMetric() {
				lbl := map[string]string{}
				for _, l := range m.GetLabel() {
					lbl[l.GetName()] = l.GetValue()
				}
				if lbl["account"] == account && lbl["target"] == target {
					series++
					if m.GetGauge().GetValue() == 1 {
						on += lbl["state"]
					}
				}
			}
		}
		if series != len(metrics.BreakerStates) {
			return fmt.Sprintf("%d series", series)
		}
		return on
	}
	waitAll := func(want string, what string) {
		t.Helper()
		for i, reg := range regs {
			natstest.Eventually(t, wait, func() bool { return state(reg) == want },
				"replica %d: %s never became %s (%s)", i, metrics.NameBreakerState, want, what)
		}
	}
	// Nothing written yet: no series (a breaker never seen is closed).
	for i, reg := range regs {
		if n := testutil.CollectAndCount(reg, metrics.NameBreakerState); n != 0 {
			t.Errorf("replica %d: %d breaker series before any write, want 0", i, n)
		}
	}

	// Replica 0 trips it: both replicas report open.
	call(t, bs[0], false)
	call(t, bs[0], false)
	waitAll(metrics.BreakerOpen, "tripped by replica 0")

	// After the cooldown replica 1 takes the probe: half-open everywhere.
	e.clk.Advance(time.Minute + time.Second)
	p := probe(t, bs[1])
	waitAll(metrics.BreakerHalfOpen, "probing")

	// The probe fails: open again; then it succeeds: closed.
	record(t, bs[1], p, false)
	waitAll(metrics.BreakerOpen, "probe failed")
	e.clk.Advance(time.Minute + time.Second)
	p = probe(t, bs[0])
	record(t, bs[0], p, true)
	waitAll(metrics.BreakerClosed, "probe succeeded")
}
