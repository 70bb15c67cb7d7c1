package live

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenaz/tenaz/pkg/metrics"
)

// reloadMetrics are the reload's series, one set per process however many
// Configs it has (tests build several).
type reloadMetrics struct {
	success prometheus.Gauge
	at      prometheus.Gauge
	total   *prometheus.CounterVec
	stored  *prometheus.GaugeVec
}

var (
	reloadOnce sync.Once
	reloadSet  *reloadMetrics
)

func reloads() *reloadMetrics {
	reloadOnce.Do(func() {
		info := func(name string) metrics.Info { i, _ := metrics.Lookup(name); return i }
		s, a, t, st := info(metrics.NameConfigReloadSuccess), info(metrics.NameConfigReloadTime), info(metrics.NameConfigReloads), info(metrics.NameConfigStored)
		reloadSet = &reloadMetrics{
			success: prometheus.NewGauge(prometheus.GaugeOpts{Name: s.Name, Help: s.Help}),
			at:      prometheus.NewGauge(prometheus.GaugeOpts{Name: a.Name, Help: a.Help}),
			total:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: t.Name, Help: t.Help}, t.Labels),
			stored:  prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: st.Name, Help: st.Help}, st.Labels),
		}
		for _, c := range []prometheus.Collector{reloadSet.success, reloadSet.at, reloadSet.total, reloadSet.stored} {
			_ = prometheus.DefaultRegisterer.Register(c)
		}
	})
	return reloadSet
}

// storedGauge sets the stored accounts in force and left out.
func storedGauge(applied, refused int) {
	r := reloads()
	r.stored.WithLabelValues("applied").Set(float64(applied))
	r.stored.WithLabelValues("refused").Set(float64(refused))
}
