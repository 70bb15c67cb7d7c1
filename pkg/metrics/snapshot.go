package metrics

import (
	"github.com/nats-io/nats.go/micro"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Snapshot is the essentials of a Set as counts since the process
// started (gauges as they are now): what a NATS micro service reports in
// its stats (`nats micro stats tenaz-ingest`), so that an operator without
// Prometheus sees the same numbers. Counts cover the whole process (under
// `tenaz run`, all four services).
type Snapshot struct {
	Accepted uint64 `json:"accepted"`
	Rejected uint64 `json:"rejected"`
	Attempts uint64 `json:"attempts"`
	// Outcomes is how many attempts and polls had their outcome stored.
	Outcomes  uint64 `json:"outcomes"`
	Retries   uint64 `json:"retries"`
	Dead      uint64 `json:"dead"`
	Review    uint64 `json:"review"`
	Repairs   uint64 `json:"reconciler_repairs"`
	Callbacks uint64 `json:"callbacks"`
	Polls     uint64 `json:"polls"`
	// BreakersOpen is how many breakers this replica sees open or half-open.
	BreakersOpen uint64 `json:"breakers_open"`
	// Events is the last sweep's count of events by state.
	Events map[string]uint64 `json:"events,omitempty"`
	// Pending and AckPending are the accounts' backlog summed, as last
	// read (no read is made for a snapshot).
	Pending    uint64 `json:"pending"`
	AckPending uint64 `json:"ack_pending"`
}

// Snapshot returns the Set's essentials.
func (s *Set) Snapshot() Snapshot {
	c := s.core()
	snap := Snapshot{
		Accepted:     uint64(sum(c.accepted)),
		Rejected:     uint64(sum(c.rejected)),
		Attempts:     uint64(sum(c.attempts)),
		Outcomes:     uint64(sum(c.outcomes)),
		Retries:      uint64(sum(c.retries)),
		Dead:         uint64(sum(c.dead)),
		Review:       uint64(sum(c.review)),
		Repairs:      uint64(sum(c.repairs)),
		Callbacks:    uint64(sum(c.callbacks)),
		Polls:        uint64(sum(c.polls)),
		BreakersOpen: uint64(s.breakers.notClosed()),
	}
	if by := s.events.sumBy(0); len(by) > 0 {
		snap.Events = make(map[string]uint64, len(by))
		for st, v := range by {
			snap.Events[st] = uint64(v)
		}
	}
	p, a := s.backlog.totals()
	snap.Pending, snap.AckPending = uint64(p), uint64(a)
	return snap
}

// StatsHandler is a micro.StatsHandler reporting the Set's Snapshot as
// every endpoint's stats data:
//
//	micro.AddService(nc, micro.Config{..., StatsHandler: metrics.Default.StatsHandler})
func (s *Set) StatsHandler(*micro.Endpoint) any { return s.Snapshot() }

// sum adds up every series of c: counter and gauge values, histogram
// counts.
func sum(c prometheus.Collector) float64 {
	ch := make(chan prometheus.Metric, 64)
	go func() {
		c.Collect(ch)
		close(ch)
	}()
	total := 0.0
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			continue
		}
		switch {
		case d.Counter != nil:
			total += d.GetCounter().GetValue()
		case d.Gauge != nil:
			total += d.GetGauge().GetValue()
		case d.Histogram != nil:
			total += float64(d.GetHistogram().GetSampleCount())
		}
	}
	return total
}
