package metrics

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// NameSearchLag and NameSearchWrites are the search indexer's: how far it
// is behind the state buckets, and what it writes to tenaz_search.
const (
	NameSearchLag    = "tenaz_search_lag_revisions"
	NameSearchWrites = "tenaz_search_writes_total"
)

// searchIndex is the indexer's lag and writes.
type searchIndex struct {
	lag     atomic.Int64
	lagDesc *prometheus.Desc
	writes  *prometheus.CounterVec
}

func newSearchIndex() *searchIndex {
	lag, _ := Lookup(NameSearchLag)
	w, _ := Lookup(NameSearchWrites)
	x := &searchIndex{lagDesc: prometheus.NewDesc(lag.Name, lag.Help, nil, nil),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: w.Name, Help: w.Help}, w.Labels)}
	x.lag.Store(-1)
	return x
}

func (x *searchIndex) Describe(ch chan<- *prometheus.Desc) {
	ch <- x.lagDesc
	x.writes.Describe(ch)
}

func (x *searchIndex) Collect(ch chan<- prometheus.Metric) {
	if n := x.lag.Load(); n >= 0 {
		ch <- prometheus.MustNewConstMetric(x.lagDesc, prometheus.GaugeValue, float64(n))
	}
	x.writes.Collect(ch)
}

// SearchLag sets the search indexer's lag (absent until first set).
func (s *Set) SearchLag(revisions int) { s.search.lag.Store(int64(revisions)) }

// SearchWrite counts one write of the search indexer (op: put or purge).
func (s *Set) SearchWrite(op string) { s.search.writes.WithLabelValues(code(op)).Inc() }
