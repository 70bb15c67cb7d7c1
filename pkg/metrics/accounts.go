package metrics

import (
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Limits an account's calls wait for, the limit label of
// tenaz_account_throttled_total.
const (
	// ThrottleConcurrency: the call waited for a free slot of the
	// account's concurrency.
	ThrottleConcurrency = "concurrency"
	// ThrottleRate: the call waited for the account's rate.
	ThrottleRate = "rate"
)

// AccountLoad is one account's limits and calls as the replica that owns
// it sees them. One replica owns an account at a time (pkg/owner), so its
// numbers are the account's, over the whole cluster.
type AccountLoad struct {
	// Account is the account's name.
	Account string
	// Instance is the owning replica's name (its key in tenaz_owners).
	Instance string
	// Concurrency is the calls allowed in flight at once.
	Concurrency int
	// Rate is the calls allowed per second; 0 means unlimited.
	Rate float64
	// InFlight is the calls being made now.
	InFlight int
	// Throttled counts, by limit (ThrottleConcurrency, ThrottleRate), the
	// calls this replica held back until the limit let them go, since it
	// started.
	Throttled map[string]uint64
}

// accounts is the collector of the per-account limits: at each scrape it
// asks its sources (a dispatcher each) for the accounts they own, so an
// account appears on one replica only, and leaves it when it moves.
type accounts struct {
	concDesc, rateDesc, flightDesc, throttledDesc, ownerDesc *prometheus.Desc

	mu      sync.Mutex
	next    int
	sources map[int]func() []AccountLoad
}

func newAccounts() *accounts {
	desc := func(name string) *prometheus.Desc {
		i, _ := Lookup(name)
		return prometheus.NewDesc(i.Name, i.Help, i.Labels, nil)
	}
	return &accounts{
		concDesc: desc(NameAccountConcurrency), rateDesc: desc(NameAccountRate), flightDesc: desc(NameAccountInFlight),
		throttledDesc: desc(NameAccountThrottled), ownerDesc: desc(NameAccountOwner),
		sources: map[int]func() []AccountLoad{},
	}
}

// WatchAccounts makes read a source of the account metrics
// (tenaz_account_*): each scrape calls it for the accounts this replica
// owns right now. read must be quick and safe to call from any goroutine.
// The returned function removes the source (call it on stop).
func (s *Set) WatchAccounts(read func() []AccountLoad) (remove func()) {
	a := s.accounts
	a.mu.Lock()
	id := a.next
	a.next++
	a.sources[id] = read
	a.mu.Unlock()
	return func() {
		a.mu.Lock()
		delete(a.sources, id)
		a.mu.Unlock()
	}
}

// Describe implements prometheus.Collector.
func (a *accounts) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{a.concDesc, a.rateDesc, a.flightDesc, a.throttledDesc, a.ownerDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector. Two sources in one process (a
// test running several dispatchers) may both report an account while it
// moves between them: its series are merged (the larger limits, the sum
// of the calls) so that no series is exported twice.
func (a *accounts) Collect(ch chan<- prometheus.Metric) {
	a.mu.Lock()
	reads := make([]func() []AccountLoad, 0, len(a.sources))
	for _, r := range a.sources {
		reads = append(reads, r)
	}
	a.mu.Unlock()
	merged := map[string]*AccountLoad{}
	owners := map[[2]string]bool{}
	for _, read := range reads {
		for _, l := range read() {
			acct := accountLabel(l.Account)
			owners[[2]string{acct, instanceLabel(l.Instance)}] = true
			m, ok := merged[acct]
			if !ok {
				m = &AccountLoad{Account: acct, Throttled: map[string]uint64{}}
				merged[acct] = m
			}
			m.Concurrency, m.Rate, m.InFlight = max(m.Concurrency, l.Concurrency), max(m.Rate, l.Rate), m.InFlight+l.InFlight
			for limit, n := range l.Throttled {
				m.Throttled[code(limit)] += n
			}
		}
	}
	for acct, m := range merged {
		ch <- prometheus.MustNewConstMetric(a.concDesc, prometheus.GaugeValue, float64(m.Concurrency), acct)
		ch <- prometheus.MustNewConstMetric(a.rateDesc, prometheus.GaugeValue, m.Rate, acct)
		ch <- prometheus.MustNewConstMetric(a.flightDesc, prometheus.GaugeValue, float64(m.InFlight), acct)
		for _, limit := range []string{ThrottleConcurrency, ThrottleRate} {
			m.Throttled[limit] += 0 // both series, from the start
		}
		for limit, n := range m.Throttled {
			ch <- prometheus.MustNewConstMetric(a.throttledDesc, prometheus.CounterValue, float64(n), acct, limit)
		}
	}
	for k := range owners {
		ch <- prometheus.MustNewConstMetric(a.ownerDesc, prometheus.GaugeValue, 1, k[0], k[1])
	}
}

// instanceLabel is a replica's name as a label value: valid UTF-8, at most
// 128 bytes.
func instanceLabel(s string) string {
	s = strings.ToValidUTF8(s, "?")
	if s == "" {
		return Other
	}
	if len(s) > 128 {
		s = strings.ToValidUTF8(s[:128], "")
	}
	return s
}
