package metrics

import (
	"maps"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenaz/tenaz/pkg/names"
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
	label                                                    func(account string) string

	mu      sync.Mutex
	next    int
	sources map[int]func() []AccountLoad

	fold sync.Mutex // serialises Collect: the throttle counters' parts are its state
	// parts is what each account adds to the throttle counter of its label
	// (its own name, or other); base is what accounts that left other
	// added to it, so that other's counter never goes down.
	parts map[string]*part
	base  map[string]map[string]uint64
}

// part is one account's share of a throttle counter: its counts since it
// came under the label (entry), as last seen.
type part struct {
	into        string
	entry, last map[string]uint64
}

func newAccounts(label func(string) string) *accounts {
	desc := func(name string) *prometheus.Desc {
		i, _ := Lookup(name)
		return prometheus.NewDesc(i.Name, i.Help, i.Labels, nil)
	}
	return &accounts{
		concDesc: desc(NameAccountConcurrency), rateDesc: desc(NameAccountRate), flightDesc: desc(NameAccountInFlight),
		throttledDesc: desc(NameAccountThrottled), ownerDesc: desc(NameAccountOwner), label: label,
		sources: map[int]func() []AccountLoad{},
		parts:   map[string]*part{}, base: map[string]map[string]uint64{},
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
// of the calls) so that no series is exported twice. Accounts without
// their own series add up under account="other": its limits and calls
// are sums, its owner series counts the accounts of each replica, and its
// throttle counters only go up (an account that leaves other leaves what
// it added).
func (a *accounts) Collect(ch chan<- prometheus.Metric) {
	merged, owners := a.read()
	a.fold.Lock()
	defer a.fold.Unlock()
	sums := map[string]*AccountLoad{} // by label value
	sum := func(l string) *AccountLoad {
		s, ok := sums[l]
		if !ok {
			s = &AccountLoad{Account: l, Throttled: map[string]uint64{}}
			sums[l] = s
		}
		return s
	}
	labels := make(map[string]string, len(merged))
	for acct, m := range merged {
		l := Invalid
		if acct != Invalid {
			l = a.label(acct)
		}
		labels[acct] = l
		s := sum(l)
		s.Concurrency, s.Rate, s.InFlight = s.Concurrency+m.Concurrency, s.Rate+m.Rate, s.InFlight+m.InFlight
		p := a.parts[acct]
		if p != nil && p.into != l {
			// What it counted until the last scrape stays where it was;
			// what came since is the new label's.
			entry := p.last
			a.leave(acct)
			p = &part{into: l, entry: entry, last: maps.Clone(entry)}
			a.parts[acct] = p
		}
		if p == nil {
			p = &part{into: l, entry: map[string]uint64{}, last: map[string]uint64{}}
			a.parts[acct] = p
		}
		for limit, n := range m.Throttled {
			if n < p.last[limit] { // the count started again: keep what it had added
				if l != acct {
					a.base[l] = add(a.base[l], limit, p.last[limit]-min(p.last[limit], p.entry[limit]))
				}
				p.entry[limit] = 0
			}
			p.last[limit] = n
			s.Throttled[limit] += n - min(n, p.entry[limit])
		}
	}
	for acct := range a.parts {
		if _, ok := labels[acct]; !ok {
			a.leave(acct)
		}
	}
	gauges := map[string]bool{}
	for _, l := range labels {
		gauges[l] = true
	}
	for l, by := range a.base {
		s := sum(l) // with no account in it now, its counter stays as it was
		for limit, n := range by {
			s.Throttled[limit] += n
		}
	}
	for l, m := range sums {
		for _, limit := range []string{ThrottleConcurrency, ThrottleRate} {
			m.Throttled[limit] += 0 // both series, from the start
		}
		for limit, n := range m.Throttled {
			ch <- prometheus.MustNewConstMetric(a.throttledDesc, prometheus.CounterValue, float64(n), l, limit)
		}
		if !gauges[l] {
			continue
		}
		ch <- prometheus.MustNewConstMetric(a.concDesc, prometheus.GaugeValue, float64(m.Concurrency), l)
		ch <- prometheus.MustNewConstMetric(a.rateDesc, prometheus.GaugeValue, m.Rate, l)
		ch <- prometheus.MustNewConstMetric(a.flightDesc, prometheus.GaugeValue, float64(m.InFlight), l)
	}
	byReplica := map[[2]string]int{}
	for k := range owners {
		byReplica[[2]string{labels[k[0]], k[1]}]++
	}
	for k, n := range byReplica {
		ch <- prometheus.MustNewConstMetric(a.ownerDesc, prometheus.GaugeValue, float64(n), k[0], k[1])
	}
}

// read merges what the sources report, by account, and lists each
// account's owners.
func (a *accounts) read() (map[string]*AccountLoad, map[[2]string]bool) {
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
			acct := l.Account
			if names.ValidateAccount(acct) != nil {
				acct = Invalid
			}
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
	return merged, owners
}

// leave ends acct's part in its label's throttle counter: what it added
// to other stays in other's base (its own series, if it had them, just
// end). Under fold.
func (a *accounts) leave(acct string) {
	p := a.parts[acct]
	if p == nil {
		return
	}
	if p.into != acct {
		for limit, n := range p.last {
			a.base[p.into] = add(a.base[p.into], limit, n-min(n, p.entry[limit]))
		}
	}
	delete(a.parts, acct)
}

func add(m map[string]uint64, k string, n uint64) map[string]uint64 {
	if m == nil {
		m = map[string]uint64{}
	}
	m[k] += n
	return m
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
