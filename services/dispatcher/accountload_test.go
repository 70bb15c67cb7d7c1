package dispatcher_test

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenaz/tenaz/pkg/metrics"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/services/dispatcher"
)

// series gathers reg into "name{label=value,...}" → value, labels sorted.
func series(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "tenaz_account_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			sort.Strings(ls)
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			out[mf.GetName()+"{"+strings.Join(ls, ",")+"}"] = v
		}
	}
	return out
}

// Each account's limits, calls in flight and throttled calls are exported
// by the one replica that owns it, with its name in tenaz_account_owner;
// the other replica exports nothing of it.
func TestAccountMetricsOnTheOwnerOnly(t *testing.T) {
	t.Parallel()
	yaml := `
accounts:
  "*": {concurrency: 8, breaker: {failures: 100}}
  narrow: {concurrency: 1}
  rated: {rate: 5/s}
targets:
  erp: {url: "${TARGET}/api/{{.Kind}}", timeout: 5s}
kinds:
  order.create: {target: erp, entity: order_id}
`
	h := setup(t, yaml, provider.Faults{Latency: 300 * time.Millisecond})
	regs := map[string]*prometheus.Registry{}
	ds := map[string]*dispatcher.Service{}
	for _, name := range []string{"d1", "d2"} {
		reg := prometheus.NewRegistry()
		set, err := metrics.New(reg)
		if err != nil {
			t.Fatal(err)
		}
		regs[name] = reg
		ds[name] = h.dispatcher(name, nil, func(o *dispatcher.Options) { o.Metrics = set })
	}
	keys := func(prefix string) []string {
		var out []string
		for i := range 6 {
			out = append(out, fmt.Sprintf("%s-%d", prefix, i))
		}
		return out
	}
	payload := func(key string) string { return fmt.Sprintf(`{"order_id":%q}`, key) }
	narrow := h.Submit("narrow", "order.create", keys("n"), payload)
	rated := h.Submit("rated", "order.create", keys("r"), payload)

	owner := func(account string) string {
		for name, d := range ds {
			if d.Owner(account) == name {
				return name
			}
		}
		return ""
	}
	// While narrow's calls are made (300 ms each, one at a time), its owner
	// shows one in flight with its limit.
	var got map[string]float64
	natstest.Eventually(t, servicetest.WaitFor, func() bool {
		o := owner("narrow")
		if o == "" {
			return false
		}
		got = series(t, regs[o])
		return got[`tenaz_account_in_flight_calls{account=narrow}`] == 1 &&
			got[`tenaz_account_concurrency_limit{account=narrow}`] == 1 &&
			got[fmt.Sprintf(`tenaz_account_owner{account=narrow,instance=%s}`, o)] == 1
	}, "want narrow's owner to show 1 call in flight of 1, and itself as the owner; got %v", got)
	h.waitAll(narrow, state.Done, 20*time.Second)
	h.waitAll(rated, state.Done, 20*time.Second)

	for _, account := range []string{"narrow", "rated"} {
		o := owner(account)
		if o == "" {
			t.Fatalf("%s: no replica holds its lease", account)
		}
		for name, reg := range regs {
			got := series(t, reg)
			mine := 0
			for k := range got {
				if strings.Contains(k, "account="+account+",") || strings.Contains(k, "account="+account+"}") {
					mine++
				}
			}
			switch {
			case name != o && mine > 0:
				t.Errorf("%s: %s exports %d series of it, but %s owns it: %v", account, name, mine, o, got)
			case name == o && mine != 6:
				t.Errorf("%s: its owner %s exports %d series of it, want 6: %v", account, name, mine, got)
			}
		}
	}
	n, r := series(t, regs[owner("narrow")]), series(t, regs[owner("rated")])
	if v := n[`tenaz_account_throttled_total{account=narrow,limit=concurrency}`]; v < 1 {
		t.Errorf("narrow (concurrency 1, 6 calls of 300 ms): want calls that waited for a slot, got %v", v)
	}
	if v := r[`tenaz_account_throttled_total{account=rated,limit=rate}`]; v < 3 {
		t.Errorf("rated (5/s, 6 calls at once): want at least 3 calls that waited for the rate, got %v", v)
	}
	if v := r[`tenaz_account_rate_limit_per_second{account=rated}`]; v != 5 {
		t.Errorf("rated: want its rate limit 5, got %v", v)
	}
	if v := n[`tenaz_account_in_flight_calls{account=narrow}`]; v != 0 {
		t.Errorf("narrow: every call returned, want 0 in flight, got %v", v)
	}
}
