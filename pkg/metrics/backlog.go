package metrics

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenaz/tenaz/pkg/names"
)

// Defaults of BacklogOptions.
const (
	DefaultBacklogTimeout = 2 * time.Second
	DefaultBacklogTTL     = 5 * time.Second
)

// BacklogOptions configure WatchBacklog.
type BacklogOptions struct {
	// Streams are the streams whose accounts' messages are counted: every
	// partition's EVENTS. Defaults to EVENTS alone.
	Streams []string
	// Timeout bounds one read of the streams (a scrape waits at most
	// this long for it). Defaults to 2s.
	Timeout time.Duration
	// TTL is how long a read is reused before a scrape reads again, so
	// that several scrapers (Prometheus replicas, KEDA) cost one read.
	// Defaults to 5s.
	TTL time.Duration
	// Paused returns the accounts an operator has paused at now
	// (accounts.PauseBook.Holding). With it, the collector reports
	// tenaz_consumer_paused for every account it reports and for every
	// paused one, and leaves them out of tenaz_backlog_runnable_messages;
	// nil: the pauses are not known, no paused series is reported, and
	// every account's messages are runnable.
	Paused func(now time.Time) []string
	// Now is the clock of the cache and of the pauses. Defaults to
	// time.Now.
	Now func() time.Time
}

// backlogRow is one account's backlog.
type backlogRow struct {
	pending, ackPending float64
	paused              float64
}

// backlog is the collector of the per-account backlog. Its rows come from
// ConsumerBacklog (pushed) or, when a source is watched, from a read of
// the accounts' messages in the streams at scrape time, cached for TTL.
type backlog struct {
	pendingDesc, ackDesc, pausedDesc, upDesc, runnableDesc *prometheus.Desc
	label                                                  func(account string) string

	mu     sync.Mutex // held across a read, so concurrent scrapes share it
	rows   map[string]backlogRow
	src    *backlogSource
	readAt time.Time
	up     bool
}

type backlogSource struct {
	js      jetstream.JetStream
	o       BacklogOptions
	streams []jetstream.Stream // cached after the first successful lookup
}

func newBacklog(label func(string) string) *backlog {
	desc := func(name string) *prometheus.Desc {
		i, _ := Lookup(name)
		return prometheus.NewDesc(i.Name, i.Help, i.Labels, nil)
	}
	return &backlog{
		pendingDesc: desc(NamePending), ackDesc: desc(NameAckPending),
		pausedDesc: desc(NamePaused), upDesc: desc(NameBacklogUp), runnableDesc: desc(NameRunnable),
		label: label, rows: map[string]backlogRow{},
	}
}

func (b *backlog) push(account string, pending, ackPending int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.rows[account]
	r.pending, r.ackPending = float64(max(pending, 0)), float64(max(ackPending, 0))
	b.rows[account] = r
}

// WatchBacklog makes the Set report each account's messages in the EVENTS
// streams (tenaz_consumer_pending_messages, with
// tenaz_consumer_ack_pending_messages 0, and tenaz_consumer_backlog_up),
// read through js when scraped: one stream info per stream, with the
// dispatch subjects' counts, bounded by o.Timeout and reused for o.TTL. A
// failed read reports up 0 and no backlog series (absent rather than
// stale), and is itself reused for o.TTL. Call the returned stop when the
// connection goes away: it ends the watch and drops the series. A later
// WatchBacklog replaces an earlier one.
func (s *Set) WatchBacklog(js jetstream.JetStream, o BacklogOptions) (stop func()) {
	if len(o.Streams) == 0 {
		o.Streams = []string{names.StreamEvents}
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultBacklogTimeout
	}
	if o.TTL <= 0 {
		o.TTL = DefaultBacklogTTL
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	src := &backlogSource{js: js, o: o}
	b := s.backlog
	b.mu.Lock()
	b.src, b.readAt, b.up = src, time.Time{}, false
	b.rows = map[string]backlogRow{}
	b.mu.Unlock()
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.src == src {
			b.src, b.readAt, b.up = nil, time.Time{}, false
			b.rows = map[string]backlogRow{}
		}
	}
}

// refreshLocked reads the streams if a source is watched and the last
// read is older than its TTL.
func (b *backlog) refreshLocked() {
	src := b.src
	if src == nil {
		return
	}
	now := src.o.Now()
	if !b.readAt.IsZero() && now.Sub(b.readAt) < src.o.TTL {
		return
	}
	b.readAt = now
	rows, err := src.read()
	if err != nil {
		b.up = false
		b.rows = map[string]backlogRow{}
		return
	}
	b.up = true
	b.rows = rows
}

func (src *backlogSource) read() (map[string]backlogRow, error) {
	ctx, cancel := context.WithTimeout(context.Background(), src.o.Timeout)
	defer cancel()
	if src.streams == nil {
		for _, name := range src.o.Streams {
			st, err := src.js.Stream(ctx, name)
			if err != nil {
				return nil, fmt.Errorf("metrics: stream %s: %w", name, err)
			}
			src.streams = append(src.streams, st)
		}
	}
	rows := map[string]backlogRow{}
	for _, st := range src.streams {
		// The dispatch subjects, <root>.events.<account>.<kind>, not the
		// schedules (one per delayed event).
		filter := ""
		for _, sub := range st.CachedInfo().Config.Subjects {
			if strings.HasSuffix(sub, ".events.>") {
				filter = sub
			}
		}
		if filter == "" {
			continue
		}
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(filter))
		if err != nil {
			return nil, fmt.Errorf("metrics: messages of %s: %w", st.CachedInfo().Config.Name, err)
		}
		for subject, n := range info.State.Subjects {
			account, ok := accountOfEvent(subject)
			if !ok {
				continue
			}
			r := rows[account]
			r.pending += float64(n)
			rows[account] = r
		}
	}
	return rows, nil
}

// accountOfEvent is the account of a dispatch subject
// (<prefix>[.p<n>].events.<account>.<kind>).
func accountOfEvent(subject string) (string, bool) {
	toks := strings.Split(subject, ".")
	for i := 1; i+2 < len(toks); i++ {
		if toks[i] == "events" {
			return toks[i+1], names.ValidateAccount(toks[i+1]) == nil
		}
	}
	return "", false
}

// withPauses returns rows with each paused account's paused value, a row
// of its own for each paused account without messages, and the messages
// of the accounts not paused.
func withPauses(rows map[string]backlogRow, paused []string) (map[string]backlogRow, float64) {
	out := make(map[string]backlogRow, len(rows)+len(paused))
	var runnable float64
	for account, r := range rows {
		out[account] = r
		runnable += r.pending
	}
	for _, account := range paused {
		r := out[account]
		r.paused = 1
		out[account] = r
		runnable -= r.pending
	}
	return out, runnable
}

// totals sums the cached rows (no read).
func (b *backlog) totals() (pending, ackPending float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, r := range b.rows {
		pending += r.pending
		ackPending += r.ackPending
	}
	return pending, ackPending
}

// Describe implements prometheus.Collector.
func (b *backlog) Describe(ch chan<- *prometheus.Desc) {
	ch <- b.pendingDesc
	ch <- b.ackDesc
	ch <- b.pausedDesc
	ch <- b.upDesc
	ch <- b.runnableDesc
}

// Collect implements prometheus.Collector: it reads the streams first
// when the cached read is stale. Accounts without their own series add
// up under account="other" (its paused value, when known, counts the
// paused accounts), which is why the runnable backlog is a series of its
// own: a query cannot take the paused accounts out of "other".
func (b *backlog) Collect(ch chan<- prometheus.Metric) {
	b.mu.Lock()
	b.refreshLocked()
	rows, pausesKnown := b.rows, false
	if b.src != nil {
		up := 0.0
		if b.up {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(b.upDesc, prometheus.GaugeValue, up)
		if b.up {
			var paused []string
			if pausesKnown = b.src.o.Paused != nil; pausesKnown {
				paused = b.src.o.Paused(b.src.o.Now())
			}
			var runnable float64
			rows, runnable = withPauses(b.rows, paused)
			ch <- prometheus.MustNewConstMetric(b.runnableDesc, prometheus.GaugeValue, runnable)
		}
	}
	folded := make(map[string]backlogRow, len(rows))
	for account, r := range rows {
		l := b.label(account)
		f := folded[l]
		f.pending, f.ackPending, f.paused = f.pending+r.pending, f.ackPending+r.ackPending, f.paused+r.paused
		folded[l] = f
	}
	b.mu.Unlock()
	for account, r := range folded {
		ch <- prometheus.MustNewConstMetric(b.pendingDesc, prometheus.GaugeValue, r.pending, account)
		ch <- prometheus.MustNewConstMetric(b.ackDesc, prometheus.GaugeValue, r.ackPending, account)
		if pausesKnown {
			ch <- prometheus.MustNewConstMetric(b.pausedDesc, prometheus.GaugeValue, r.paused, account)
		}
	}
}
