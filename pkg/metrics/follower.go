package metrics

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// NameAuditLag and NameAuditArchived are the audit archiver's: how far it
// is behind the state buckets, and what it has written. NameSearchLag and
// NameSearchWrites are the search indexer's, and what it writes to
// tenaz_search.
const (
	NameAuditLag      = "tenaz_audit_lag_revisions"
	NameAuditArchived = "tenaz_audit_archived_total"
	NameSearchLag     = "tenaz_search_lag_revisions"
	NameSearchWrites  = "tenaz_search_writes_total"
)

// follower is what one follower of the state buckets' change feed
// reports: its lag, absent until first set, and a count by one label.
type follower struct {
	lag     atomic.Int64
	lagDesc *prometheus.Desc
	counts  *prometheus.CounterVec
}

func newFollower(lagName, countName string) *follower {
	lag, _ := Lookup(lagName)
	c, _ := Lookup(countName)
	f := &follower{lagDesc: prometheus.NewDesc(lag.Name, lag.Help, nil, nil),
		counts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: c.Name, Help: c.Help}, c.Labels)}
	f.lag.Store(-1)
	return f
}

func (f *follower) Describe(ch chan<- *prometheus.Desc) {
	ch <- f.lagDesc
	f.counts.Describe(ch)
}

func (f *follower) Collect(ch chan<- prometheus.Metric) {
	if n := f.lag.Load(); n >= 0 {
		ch <- prometheus.MustNewConstMetric(f.lagDesc, prometheus.GaugeValue, float64(n))
	}
	f.counts.Collect(ch)
}

// AuditLag sets the archiver's lag (absent until first set).
func (s *Set) AuditLag(revisions int) { s.audit.lag.Store(int64(revisions)) }

// AuditArchived counts one revision the archiver handled.
func (s *Set) AuditArchived(result string) { s.audit.counts.WithLabelValues(code(result)).Inc() }

// SearchLag sets the search indexer's lag (absent until first set).
func (s *Set) SearchLag(revisions int) { s.search.lag.Store(int64(revisions)) }

// SearchWrite counts one write of the search indexer (op: put or purge).
func (s *Set) SearchWrite(op string) { s.search.counts.WithLabelValues(code(op)).Inc() }
