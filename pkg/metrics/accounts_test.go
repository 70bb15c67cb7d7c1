package metrics_test

import (
	"sync"
	"testing"

	"github.com/tenaz/tenaz/pkg/metrics"
)

// The account metrics are what the sources report at scrape time: an
// account leaves with its source (it moved to another replica), two
// sources in one process reporting one account export it once, and both
// throttle series exist from the start.
func TestAccountMetrics(t *testing.T) {
	s, reg := setup(t)
	var mu sync.Mutex
	d1 := []metrics.AccountLoad{
		{Account: "acme", Instance: "d1", Concurrency: 2, Rate: 10, InFlight: 2, Throttled: map[string]uint64{metrics.ThrottleRate: 7}},
		{Account: "beta", Instance: "d1", Concurrency: 8},
	}
	removeD1 := s.WatchAccounts(func() []metrics.AccountLoad { mu.Lock(); defer mu.Unlock(); return d1 })
	names := []string{metrics.NameAccountConcurrency, metrics.NameAccountRate, metrics.NameAccountInFlight, metrics.NameAccountThrottled, metrics.NameAccountOwner}
	compare(t, reg, `
		tenaz_account_concurrency_limit{account="acme"} 2
		tenaz_account_concurrency_limit{account="beta"} 8
		tenaz_account_rate_limit_per_second{account="acme"} 10
		tenaz_account_rate_limit_per_second{account="beta"} 0
		tenaz_account_in_flight_calls{account="acme"} 2
		tenaz_account_in_flight_calls{account="beta"} 0
		tenaz_account_throttled_total{account="acme",limit="concurrency"} 0
		tenaz_account_throttled_total{account="acme",limit="rate"} 7
		tenaz_account_throttled_total{account="beta",limit="concurrency"} 0
		tenaz_account_throttled_total{account="beta",limit="rate"} 0
		tenaz_account_owner{account="acme",instance="d1"} 1
		tenaz_account_owner{account="beta",instance="d1"} 1
	`, names...)

	// beta moves to d2, which is in this process too; acme is handed over
	// and still finishing a call on d1 as d2 starts it.
	mu.Lock()
	d1 = []metrics.AccountLoad{{Account: "acme", Instance: "d1", Concurrency: 2, Rate: 10, InFlight: 1, Throttled: map[string]uint64{metrics.ThrottleRate: 7}}}
	mu.Unlock()
	removeD2 := s.WatchAccounts(func() []metrics.AccountLoad {
		return []metrics.AccountLoad{
			{Account: "acme", Instance: "d2", Concurrency: 2, Rate: 10, InFlight: 1, Throttled: map[string]uint64{metrics.ThrottleConcurrency: 1}},
			{Account: "beta", Instance: "d2", Concurrency: 8, InFlight: 3},
		}
	})
	compare(t, reg, `
		tenaz_account_concurrency_limit{account="acme"} 2
		tenaz_account_concurrency_limit{account="beta"} 8
		tenaz_account_rate_limit_per_second{account="acme"} 10
		tenaz_account_rate_limit_per_second{account="beta"} 0
		tenaz_account_in_flight_calls{account="acme"} 2
		tenaz_account_in_flight_calls{account="beta"} 3
		tenaz_account_throttled_total{account="acme",limit="concurrency"} 1
		tenaz_account_throttled_total{account="acme",limit="rate"} 7
		tenaz_account_throttled_total{account="beta",limit="concurrency"} 0
		tenaz_account_throttled_total{account="beta",limit="rate"} 0
		tenaz_account_owner{account="acme",instance="d1"} 1
		tenaz_account_owner{account="acme",instance="d2"} 1
		tenaz_account_owner{account="beta",instance="d2"} 1
	`, names...)

	removeD1()
	removeD2()
	if n, err := reg.Gather(); err != nil {
		t.Fatal(err)
	} else {
		for _, mf := range n {
			for _, name := range names {
				if mf.GetName() == name {
					t.Errorf("%s still exported after its sources were removed: %v", name, mf.GetMetric())
				}
			}
		}
	}
}
