package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// reload is the live config's (pkg/live): how the last reload of the
// file went, when the last good one was, and the accounts of the
// accounts bucket.
type reload struct {
	success prometheus.Gauge
	at      prometheus.Gauge
	total   *prometheus.CounterVec
	stored  *prometheus.GaugeVec
}

func newReload() *reload {
	info := func(name string) Info { i, _ := Lookup(name); return i }
	s, a, t, st := info(NameConfigReloadSuccess), info(NameConfigReloadTime), info(NameConfigReloads), info(NameConfigStored)
	r := &reload{
		success: prometheus.NewGauge(prometheus.GaugeOpts{Name: s.Name, Help: s.Help}),
		at:      prometheus.NewGauge(prometheus.GaugeOpts{Name: a.Name, Help: a.Help}),
		total:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: t.Name, Help: t.Help}, t.Labels),
		stored:  prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: st.Name, Help: st.Help}, st.Labels),
	}
	r.success.Set(1) // the config a process starts with was valid, or it did not start
	return r
}

func (r *reload) parts() []prometheus.Collector {
	return []prometheus.Collector{r.success, r.at, r.total, r.stored}
}

func (r *reload) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range r.parts() {
		c.Describe(ch)
	}
}

func (r *reload) Collect(ch chan<- prometheus.Metric) {
	for _, c := range r.parts() {
		c.Collect(ch)
	}
}

// ConfigReloaded records a reload of the config file: applied (at) or
// refused.
func (s *Set) ConfigReloaded(applied bool, at time.Time) {
	if applied {
		s.reload.success.Set(1)
		s.reload.at.Set(float64(at.Unix()))
		s.reload.total.WithLabelValues("applied").Inc()
		return
	}
	s.reload.success.Set(0)
	s.reload.total.WithLabelValues("refused").Inc()
}

// ConfigStored sets how many accounts of the accounts bucket are in force
// and how many are left out.
func (s *Set) ConfigStored(applied, refused int) {
	s.reload.stored.WithLabelValues("applied").Set(float64(applied))
	s.reload.stored.WithLabelValues("refused").Set(float64(refused))
}
