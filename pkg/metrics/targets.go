package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// TargetLoad is a target's provider-wide concurrency as a replica last
// read it from the target's shared record: the same figures on every
// replica that calls the target.
type TargetLoad struct {
	Target string
	// Concurrency is the calls allowed in flight at once (learned under
	// "auto").
	Concurrency int
	// InFlight is the calls in flight over every live replica.
	InFlight int
}

// targets is the collector of tenaz_target_concurrency_limit and
// tenaz_target_in_flight_calls.
type targets struct {
	concDesc, flightDesc *prometheus.Desc

	mu      sync.Mutex
	next    int
	sources map[int]func() []TargetLoad
}

func newTargets() *targets {
	desc := func(name string) *prometheus.Desc {
		i, _ := Lookup(name)
		return prometheus.NewDesc(i.Name, i.Help, i.Labels, nil)
	}
	return &targets{concDesc: desc(NameTargetConcurrency), flightDesc: desc(NameTargetInFlight), sources: map[int]func() []TargetLoad{}}
}

// WatchTargets makes read a source of the target metrics: each scrape
// calls it. read must be quick and safe from any goroutine. The returned
// function removes the source.
func (s *Set) WatchTargets(read func() []TargetLoad) (remove func()) {
	t := s.targets
	t.mu.Lock()
	id := t.next
	t.next++
	t.sources[id] = read
	t.mu.Unlock()
	return func() {
		t.mu.Lock()
		delete(t.sources, id)
		t.mu.Unlock()
	}
}

// Describe implements prometheus.Collector.
func (t *targets) Describe(ch chan<- *prometheus.Desc) {
	ch <- t.concDesc
	ch <- t.flightDesc
}

// Collect implements prometheus.Collector. Several sources in one process
// (a test running several dispatchers) report the same record: the
// highest figures are kept, so that no series is exported twice.
func (t *targets) Collect(ch chan<- prometheus.Metric) {
	t.mu.Lock()
	reads := make([]func() []TargetLoad, 0, len(t.sources))
	for _, r := range t.sources {
		reads = append(reads, r)
	}
	t.mu.Unlock()
	merged := map[string]TargetLoad{}
	for _, read := range reads {
		for _, l := range read() {
			m := merged[l.Target]
			m.Concurrency, m.InFlight = max(m.Concurrency, l.Concurrency), max(m.InFlight, l.InFlight)
			merged[l.Target] = m
		}
	}
	for name, m := range merged {
		ch <- prometheus.MustNewConstMetric(t.concDesc, prometheus.GaugeValue, float64(m.Concurrency), name)
		ch <- prometheus.MustNewConstMetric(t.flightDesc, prometheus.GaugeValue, float64(m.InFlight), name)
	}
}
