package metrics

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// NameAuditLag and NameAuditArchived are the audit archiver's: how far it
// is behind the state buckets, and what it has written.
const (
	NameAuditLag      = "tenaz_audit_lag_revisions"
	NameAuditArchived = "tenaz_audit_archived_total"
)

// audit is the archiver's lag and counts.
type audit struct {
	lag      atomic.Int64
	lagDesc  *prometheus.Desc
	archived *prometheus.CounterVec
}

func newAudit() *audit {
	lag, _ := Lookup(NameAuditLag)
	arch, _ := Lookup(NameAuditArchived)
	a := &audit{lagDesc: prometheus.NewDesc(lag.Name, lag.Help, nil, nil),
		archived: prometheus.NewCounterVec(prometheus.CounterOpts{Name: arch.Name, Help: arch.Help}, arch.Labels)}
	a.lag.Store(-1)
	return a
}

func (a *audit) Describe(ch chan<- *prometheus.Desc) {
	ch <- a.lagDesc
	a.archived.Describe(ch)
}

func (a *audit) Collect(ch chan<- prometheus.Metric) {
	if n := a.lag.Load(); n >= 0 {
		ch <- prometheus.MustNewConstMetric(a.lagDesc, prometheus.GaugeValue, float64(n))
	}
	a.archived.Collect(ch)
}

// AuditLag sets the archiver's lag (absent until first set).
func (s *Set) AuditLag(revisions int) { s.audit.lag.Store(int64(revisions)) }

// AuditArchived counts one revision the archiver handled.
func (s *Set) AuditArchived(result string) { s.audit.archived.WithLabelValues(code(result)).Inc() }
