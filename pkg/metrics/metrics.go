package metrics

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/outcome"
	"github.com/tenaz/tenaz/pkg/state"
)

// Set is every tenaz metric, registered on one registry as one collector.
// Its methods are safe for concurrent use.
type Set struct {
	c atomic.Pointer[core] // the counters and histograms, and the account places

	mu       sync.Mutex // serialises Configure
	breakers *breakers
	events   *table
	waiting  *table // tenaz_dead_waiting_entries
	backlog  *backlog
	accounts *accounts
	targets  *targets
	audit    *follower
	reload   *reload
	search   *follower
	build    prometheus.Metric
	now      func() time.Time
}

// core is what Configure replaces: the counters and histograms (a native
// histogram is a choice made when a histogram is made) and the places of
// the account label they record under.
type core struct {
	o      Options
	places *places

	accepted, rejected, attempts, retries, outcomes    *prometheus.CounterVec
	anchored, deadFull, deadNotKept, putOff            *prometheus.CounterVec
	dead, review, repairs, callbacks, polls, throttled *prometheus.CounterVec
	trimFailures                                       *prometheus.CounterVec
	wait, delivery                                     *prometheus.HistogramVec
}

// Options configure a Set (Configure).
type Options struct {
	// Accounts bounds the account label.
	Accounts AccountOptions
	// NativeHistograms adds a native histogram to every histogram, beside
	// its classic buckets.
	NativeHistograms NativeHistogramOptions
}

// NativeHistogramOptions shape the native histograms (see
// prometheus.HistogramOpts).
type NativeHistogramOptions struct {
	// Enabled adds them.
	Enabled bool
	// BucketFactor is the most one bucket's bound may grow to the next's
	// (1.1: about 10 %; Prometheus picks the schema that fits). 0:
	// DefaultBucketFactor.
	BucketFactor float64
	// MaxBuckets bounds the buckets one histogram holds; past it the
	// resolution is halved. 0: DefaultMaxBuckets.
	MaxBuckets int
}

// Defaults of NativeHistogramOptions.
const (
	DefaultBucketFactor = 1.1
	DefaultMaxBuckets   = 160
	// nativeReset is how long a native histogram that hit MaxBuckets
	// waits before it resets rather than halving its resolution.
	nativeReset = time.Hour
)

// DefaultOptions are the options of New: the account label bounded to the
// DefaultTopAccounts busiest accounts, classic histograms only.
func DefaultOptions() Options {
	return Options{Accounts: AccountOptions{Top: DefaultTopAccounts, Keep: DefaultKeep}}
}

// Default is the Set on Prometheus' default registry, which daemon.Mux
// serves on /metrics. The package-level functions record on it.
var Default = mustNew(prometheus.DefaultRegisterer)

func mustNew(reg prometheus.Registerer) *Set {
	s, err := New(reg)
	if err != nil {
		panic(err) // fixed names on a fresh registry: cannot happen
	}
	return s
}

// New makes a Set with DefaultOptions and registers every metric of the
// Catalog on reg (tests pass a prometheus.NewRegistry()). It fails if one
// is already registered.
func New(reg prometheus.Registerer) (*Set, error) {
	return newSet(reg, time.Now)
}

// NewWithClock is New with the clock the account places rank by (tests of
// the ranking; see AccountOptions).
func NewWithClock(reg prometheus.Registerer, now func() time.Time) (*Set, error) {
	return newSet(reg, now)
}

func newSet(reg prometheus.Registerer, now func() time.Time) (*Set, error) {
	s := &Set{now: now}
	s.c.Store(s.newCore(DefaultOptions().normalized()))
	label := func(account string) string { return s.core().places.gauge(account) }
	s.breakers = newBreakers(label)
	s.events = newTable(NameEvents)
	s.waiting = newTable(NameDeadWaiting)
	s.backlog = newBacklog(label)
	s.accounts = newAccounts(label)
	s.targets = newTargets()
	s.audit = newFollower(NameAuditLag, NameAuditArchived)
	s.reload = newReload()
	s.search = newFollower(NameSearchLag, NameSearchWrites)
	s.build = buildMetric(Build())
	if err := reg.Register(s); err != nil {
		return nil, fmt.Errorf("metrics: register: %w", err)
	}
	return s, nil
}

func (s *Set) core() *core { return s.c.Load() }

// Configure gives the Set o. It is meant for start-up, before anything is
// recorded: the counters and histograms recorded so far are dropped (the
// gauges stay). Configuring the options the Set has changes nothing, so
// every service of a process may call it with the same config.
func (s *Set) Configure(o Options) error {
	if err := o.validate(); err != nil {
		return err
	}
	o = o.normalized()
	s.mu.Lock()
	defer s.mu.Unlock()
	if o.equal(s.core().o) {
		return nil
	}
	s.c.Store(s.newCore(o))
	return nil
}

// Configure configures Default (see Set.Configure).
func Configure(o Options) error { return Default.Configure(o) }

func (o Options) validate() error {
	a, n := o.Accounts, o.NativeHistograms
	switch {
	case a.Top < 0 || a.Top > MaxTopAccounts:
		return fmt.Errorf("metrics: accounts top %d: want 0 to %d", a.Top, MaxTopAccounts)
	case a.Keep < 0:
		return fmt.Errorf("metrics: accounts keep %s: want a positive duration", a.Keep)
	case n.BucketFactor != 0 && n.BucketFactor <= 1:
		return fmt.Errorf("metrics: native histogram bucket factor %v: want more than 1", n.BucketFactor)
	case n.MaxBuckets < 0:
		return fmt.Errorf("metrics: native histogram max buckets %d: want at least 1", n.MaxBuckets)
	}
	for _, acct := range a.Allow {
		if err := names.ValidateAccount(acct); err != nil {
			return fmt.Errorf("metrics: accounts allow: %w", err)
		}
	}
	return nil
}

// normalized fills the defaults of o's zero values, and clears the native
// histograms' settings when they are off.
func (o Options) normalized() Options {
	o.Accounts.Keep = cmp.Or(o.Accounts.Keep, DefaultKeep)
	n := &o.NativeHistograms
	if !n.Enabled {
		*n = NativeHistogramOptions{}
		return o
	}
	n.BucketFactor, n.MaxBuckets = cmp.Or(n.BucketFactor, DefaultBucketFactor), cmp.Or(n.MaxBuckets, DefaultMaxBuckets)
	return o
}

func (o Options) equal(p Options) bool {
	return o.Accounts.Top == p.Accounts.Top && o.Accounts.Keep == p.Accounts.Keep &&
		slices.Equal(o.Accounts.Allow, p.Accounts.Allow) && o.NativeHistograms == p.NativeHistograms
}

func (s *Set) newCore(o Options) *core {
	c := &core{o: o}
	counter := func(name string) *prometheus.CounterVec {
		i, _ := Lookup(name)
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: i.Name, Help: i.Help}, i.Labels)
	}
	histogram := func(name string) *prometheus.HistogramVec {
		i, _ := Lookup(name)
		ho := prometheus.HistogramOpts{Name: i.Name, Help: i.Help, Buckets: i.Buckets}
		if n := o.NativeHistograms; n.Enabled {
			ho.NativeHistogramBucketFactor = n.BucketFactor
			ho.NativeHistogramMaxBucketNumber = uint32(n.MaxBuckets)
			ho.NativeHistogramMinResetDuration = nativeReset
		}
		return prometheus.NewHistogramVec(ho, i.Labels)
	}
	c.accepted = counter(NameAccepted)
	c.rejected = counter(NameRejected)
	c.anchored = counter(NameAnchored)
	c.deadFull = counter(NameDeadFull)
	c.deadNotKept = counter(NameDeadNotKept)
	c.wait = histogram(NameWait)
	c.delivery = histogram(NameDelivery)
	c.attempts = counter(NameAttempts)
	c.retries = counter(NameRetries)
	c.outcomes = counter(NameOutcomes)
	c.dead = counter(NameDead)
	c.review = counter(NameReview)
	c.repairs = counter(NameRepairs)
	c.trimFailures = counter(NameTrimFailures)
	c.callbacks = counter(NameCallbacks)
	c.polls = counter(NamePolls)
	c.throttled = counter(NameTargetThrottled)
	c.putOff = counter(NamePutOff)
	c.places = newPlaces(o.Accounts, s.now, func(account string) {
		match := prometheus.Labels{"account": account}
		for _, v := range c.byAccount() {
			v.DeletePartialMatch(match)
		}
	})
	return c
}

// byAccount is every vector with an account label.
func (c *core) byAccount() []*prometheus.MetricVec {
	return []*prometheus.MetricVec{c.accepted.MetricVec, c.anchored.MetricVec, c.deadFull.MetricVec, c.deadNotKept.MetricVec, c.wait.MetricVec, c.delivery.MetricVec, c.attempts.MetricVec,
		c.retries.MetricVec, c.outcomes.MetricVec, c.dead.MetricVec, c.review.MetricVec, c.putOff.MetricVec}
}

func (c *core) collectors() []prometheus.Collector {
	return []prometheus.Collector{c.accepted, c.rejected, c.anchored, c.deadFull, c.deadNotKept, c.wait, c.delivery, c.attempts, c.retries, c.outcomes,
		c.dead, c.review, c.repairs, c.callbacks, c.polls, c.throttled, c.putOff, c.trimFailures}
}

func (s *Set) collectors() []prometheus.Collector {
	return append(s.core().collectors(), s.breakers, s.events, s.waiting, s.backlog, s.accounts, s.targets, s.audit, s.search, s.reload)
}

// Describe implements prometheus.Collector.
func (s *Set) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range s.collectors() {
		c.Describe(ch)
	}
	ch <- s.build.Desc()
}

// Collect implements prometheus.Collector.
func (s *Set) Collect(ch chan<- prometheus.Metric) {
	for _, c := range s.collectors() {
		c.Collect(ch)
	}
	ch <- s.build
}

// ---------------------------------------------------------------- labels

// Kind and target label values: the name when valid, else Invalid. The
// account label is the places' (see places.record).

func kindLabel(k string) string {
	if len(k) == 0 || len(k) > names.MaxKindLen {
		return Invalid
	}
	tokens, start := 0, 0
	for i := 0; i <= len(k); i++ {
		if i == len(k) || k[i] == '.' {
			if i == start {
				return Invalid
			}
			tokens++
			start = i + 1
			continue
		}
		if !tokenByte(k[i]) {
			return Invalid
		}
	}
	if tokens > names.MaxKindTokens {
		return Invalid
	}
	return k
}

// targetLabel also accepts "handler:<name>", the dispatcher's name for a
// kind delivered by a registered Go handler.
func targetLabel(t string) string {
	name := strings.TrimPrefix(t, "handler:")
	if name == "" || len(name) > 64 {
		return Invalid
	}
	for i := 0; i < len(name); i++ {
		if !tokenByte(name[i]) {
			return Invalid
		}
	}
	return t
}

func tokenByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// code is a label value chosen by code (reason, class, result, repair):
// 1 to 40 characters of [a-z0-9_], else Other.
func code(v string) string {
	if v == "" || len(v) > 40 {
		return Other
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return Other
		}
	}
	return v
}

func classLabel(c outcome.Class) string {
	if c == outcome.ClassSuccess || c == ClassOK {
		return ClassOK
	}
	return code(string(c))
}

func stateLabel(s state.State) string {
	if !s.Valid() {
		return Other
	}
	return string(s)
}

// ------------------------------------------------------------- recording

// Accepted counts an event accepted (created) by ingest.
func (s *Set) Accepted(account, kind string) {
	c := s.core()
	c.accepted.WithLabelValues(c.places.record(account), kindLabel(kind)).Inc()
}

// Anchored counts a submission acked for its account's anchor
// (services/ingest: a flood, or refusals DEAD has no room for).
func (s *Set) Anchored(account string) {
	c := s.core()
	c.anchored.WithLabelValues(c.places.record(account)).Inc()
}

// DeadFull counts a try to keep an account's entry in DEAD refused for
// room (pkg/dead: the account at its bound, or DEAD full).
func (s *Set) DeadFull(account string) {
	c := s.core()
	c.deadFull.WithLabelValues(c.places.record(account)).Inc()
}

// DeadNotKept counts a refused submission not kept: its account's
// entries waiting for room were at their bound (pkg/dead, KeepRefusal).
func (s *Set) DeadNotKept(account string) {
	c := s.core()
	c.deadNotKept.WithLabelValues(c.places.record(account)).Inc()
}

// Rejected counts a submission refused by ingest, by its error code.
func (s *Set) Rejected(reason string) {
	s.core().rejected.WithLabelValues(code(reason)).Inc()
}

// WaitTime observes the wait from when an event became due (accepted, or
// its not_before) to the start of its first attempt. Negative durations
// count as zero. The sampled span of trace (a context, when given) is
// the observation's exemplar.
func (s *Set) WaitTime(account, kind string, d time.Duration, trace ...context.Context) {
	c := s.core()
	observe(trace, c.wait.WithLabelValues(c.places.record(account), kindLabel(kind)), max(d, 0).Seconds())
}

// DeliveryLatency observes how long one outbound call to target took.
// The sampled span of trace (a context, when given: the attempt's, the
// poll's) is the observation's exemplar.
func (s *Set) DeliveryLatency(account, kind, target string, d time.Duration, trace ...context.Context) {
	c := s.core()
	observe(trace, c.delivery.WithLabelValues(c.places.record(account), kindLabel(kind), targetLabel(target)), max(d, 0).Seconds())
}

// observe records v on o with the trace of the span in ctx (its first)
// as the exemplar when that span is sampled: a latency in the histogram
// leads to a trace that has it.
func observe(ctx []context.Context, o prometheus.Observer, v float64) {
	if len(ctx) == 0 {
		o.Observe(v)
		return
	}
	if sc := oteltrace.SpanContextFromContext(ctx[0]); sc.IsSampled() {
		if e, ok := o.(prometheus.ExemplarObserver); ok {
			e.ObserveWithExemplar(v, prometheus.Labels{"trace_id": sc.TraceID().String()})
			return
		}
	}
	o.Observe(v)
}

// Attempt counts a delivery attempt by its outcome class
// (outcome.ClassOf(err)); success is recorded as class "ok".
func (s *Set) Attempt(account, kind string, class outcome.Class) {
	c := s.core()
	c.attempts.WithLabelValues(c.places.record(account), kindLabel(kind), classLabel(class)).Inc()
}

// Retry counts an attempt whose outcome scheduled another attempt, by the
// class that caused it.
func (s *Set) Retry(account, kind string, class outcome.Class) {
	c := s.core()
	c.retries.WithLabelValues(c.places.record(account), kindLabel(kind), classLabel(class)).Inc()
}

// Outcome counts an attempt or poll by the state the event moved to.
func (s *Set) Outcome(account, kind string, to state.State) {
	c := s.core()
	c.outcomes.WithLabelValues(c.places.record(account), kindLabel(kind), stateLabel(to)).Inc()
}

// BreakerState records the state of the breaker of account and target
// ("closed", "half_open" or "open"; BreakerStates), as the state label of
// tenaz_breaker_state: 1 on the series of that state, 0 on the others.
// An unknown state is ignored.
func (s *Set) BreakerState(account, target, state string) {
	s.breakers.set(account, targetLabel(target), state)
}

// Dead counts an entry that arrived in DEAD, by reason.
func (s *Set) Dead(account, kind, reason string) {
	c := s.core()
	c.dead.WithLabelValues(c.places.record(account), kindLabel(kind), code(reason)).Inc()
}

// Review counts an event moved to manual_review.
func (s *Set) Review(account, kind string) {
	c := s.core()
	c.review.WithLabelValues(c.places.record(account), kindLabel(kind)).Inc()
}

// ReconcilerRepair counts one repair by the reconciler; repair names the
// kind of repair (a short code such as "requeued" or "escalated").
func (s *Set) ReconcilerRepair(repair string) {
	s.core().repairs.WithLabelValues(code(repair)).Inc()
}

// What a trim purges (TrimFailed's stream): INTAKE, an account's
// dispatch messages in EVENTS, a partition's timers in EVENTS.
const (
	TrimIntake = "intake"
	TrimEvents = "events"
	TrimTimers = "timers"
)

// TrimFailed counts one failed trim of stream (TrimIntake, TrimEvents,
// TrimTimers): settled messages stay until a later trim succeeds, so a
// count that keeps growing means a stream that keeps growing.
func (s *Set) TrimFailed(stream string) {
	s.core().trimFailures.WithLabelValues(code(stream)).Inc()
}

// Callback counts a provider callback by result (CallbackApplied,
// CallbackNoop, CallbackUnknown, CallbackForged). target must be a
// configured target name (pass "" for an unknown one: it is recorded as
// "invalid", so a caller cannot add series by inventing targets).
func (s *Set) Callback(target, result string) {
	s.core().callbacks.WithLabelValues(targetLabel(target), code(result)).Inc()
}

// Poll counts a poll of target by result (PollDone, PollPending,
// PollError, PollExpired).
func (s *Set) Poll(target, result string) {
	s.core().polls.WithLabelValues(targetLabel(target), code(result)).Inc()
}

// PutOff counts a timer of account set again for later instead of
// handled now, by reason (PutOffPaused, PutOffBreaker, PutOffRate,
// PutOffConcurrency, PutOffCrowded, PutOffLeftOut, PutOffNotCurrent).
func (s *Set) PutOff(account, reason string) {
	c := s.core()
	c.putOff.WithLabelValues(c.places.record(account), code(reason)).Inc()
}

// TargetThrottled counts a call held back by its target's provider-wide
// rate or concurrency (targets.<t>.rate, .concurrency) before it was made.
func (s *Set) TargetThrottled(target string) {
	s.core().throttled.WithLabelValues(targetLabel(target)).Inc()
}

// EventsKey is one label set of tenaz_events.
type EventsKey struct {
	State   state.State
	Account string
	Kind    string
}

// SetEventsByState replaces every series of tenaz_events with counts, in
// one step: label sets absent from counts disappear, and a scrape sees
// either the previous sweep or this one, never a mix. Accounts without
// their own series add up under account="other".
func (s *Set) SetEventsByState(counts map[EventsKey]int) {
	places := s.core().places
	rows := make(map[string]row, len(counts))
	for k, n := range counts {
		addRow(rows, []string{stateLabel(k.State), places.gauge(k.Account), kindLabel(k.Kind)}, float64(n))
	}
	s.events.replace(rows)
}

// SetDeadWaiting replaces every series of tenaz_dead_waiting_entries
// with counts (entries waiting for room in DEAD, by account), in one step
// as SetEventsByState does: an account absent from counts waits for
// nothing.
func (s *Set) SetDeadWaiting(counts map[string]int) {
	places := s.core().places
	rows := make(map[string]row, len(counts))
	for account, n := range counts {
		addRow(rows, []string{places.gauge(account)}, float64(n))
	}
	s.waiting.replace(rows)
}

// ConsumerBacklog sets account's backlog from counts the caller already
// has (waiting, in flight). A watched backlog (WatchBacklog) replaces it at
// its next read.
func (s *Set) ConsumerBacklog(account string, pending, ackPending int) {
	s.backlog.push(account, pending, ackPending)
}

// ------------------------------------------------- package-level, Default

// Accepted counts an accepted event on Default.
func Accepted(account, kind string) { Default.Accepted(account, kind) }

// Dead counts an arrival in DEAD on Default.
func Dead(account, kind, reason string) { Default.Dead(account, kind, reason) }

// Review counts a move to manual review on Default.
func Review(account, kind string) { Default.Review(account, kind) }
