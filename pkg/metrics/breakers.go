package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// The states of a breaker, the values of tenaz_breaker_state's state label
// (pkg/breaker's State names).
const (
	BreakerClosed   = "closed"
	BreakerHalfOpen = "half_open"
	BreakerOpen     = "open"
)

// BreakerStates lists the breaker states, each a series of
// tenaz_breaker_state per account and target.
var BreakerStates = []string{BreakerClosed, BreakerHalfOpen, BreakerOpen}

// breakers is the collector of tenaz_breaker_state: the last state seen of
// each breaker, exported as one series per state (1 on the breaker's
// state, 0 on the others). Accounts without their own series add up under
// account="other", whose values count the breakers in each state.
type breakers struct {
	desc  *prometheus.Desc
	label func(account string) string

	mu     sync.Mutex
	states map[[2]string]string // account, target label → state
}

func newBreakers(label func(string) string) *breakers {
	i, _ := Lookup(NameBreakerState)
	return &breakers{desc: prometheus.NewDesc(i.Name, i.Help, i.Labels, nil), label: label, states: map[[2]string]string{}}
}

func (b *breakers) set(account, target, state string) {
	switch state {
	case BreakerClosed, BreakerHalfOpen, BreakerOpen:
	default:
		return
	}
	b.mu.Lock()
	b.states[[2]string{account, target}] = state
	b.mu.Unlock()
}

// notClosed counts the breakers open or half-open.
func (b *breakers) notClosed() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, st := range b.states {
		if st != BreakerClosed {
			n++
		}
	}
	return n
}

// Describe implements prometheus.Collector.
func (b *breakers) Describe(ch chan<- *prometheus.Desc) { ch <- b.desc }

// Collect implements prometheus.Collector.
func (b *breakers) Collect(ch chan<- prometheus.Metric) {
	b.mu.Lock()
	counts := map[[2]string]map[string]int{}
	for k, st := range b.states {
		key := [2]string{b.label(k[0]), k[1]}
		if counts[key] == nil {
			counts[key] = map[string]int{}
		}
		counts[key][st]++
	}
	b.mu.Unlock()
	for k, by := range counts {
		for _, st := range BreakerStates {
			ch <- prometheus.MustNewConstMetric(b.desc, prometheus.GaugeValue, float64(by[st]), k[0], k[1], st)
		}
	}
}
