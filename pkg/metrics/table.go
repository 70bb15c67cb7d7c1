package metrics

import (
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// row is one series of a table: its label values and value.
type row struct {
	labels []string
	v      float64
}

func joinKey(lv []string) string { return strings.Join(lv, "\xff") }

// table is a gauge family whose series are replaced all at once, so that
// a scrape sees one whole generation of them and label sets that vanished
// are gone.
type table struct {
	desc *prometheus.Desc
	mu   sync.RWMutex
	rows map[string]row
}

func newTable(name string) *table {
	i, _ := Lookup(name)
	return &table{desc: prometheus.NewDesc(i.Name, i.Help, i.Labels, nil), rows: map[string]row{}}
}

// replace makes rows the table's series.
func (t *table) replace(rows map[string]row) {
	t.mu.Lock()
	t.rows = rows
	t.mu.Unlock()
}

// addRow adds v to the row of label values lv: accounts folded into
// other (or invalid ones) add up.
func addRow(rows map[string]row, lv []string, v float64) {
	key := joinKey(lv)
	r := rows[key]
	r.labels = lv
	r.v += v
	rows[key] = r
}

// sumBy adds up the series by the value of label i.
func (t *table) sumBy(i int) map[string]float64 {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := map[string]float64{}
	for _, r := range t.rows {
		out[r.labels[i]] += r.v
	}
	return out
}

// Describe implements prometheus.Collector.
func (t *table) Describe(ch chan<- *prometheus.Desc) { ch <- t.desc }

// Collect implements prometheus.Collector.
func (t *table) Collect(ch chan<- prometheus.Metric) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	for _, r := range t.rows {
		ch <- prometheus.MustNewConstMetric(t.desc, prometheus.GaugeValue, r.v, r.labels...)
	}
}
