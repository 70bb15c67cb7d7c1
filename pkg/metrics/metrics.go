package metrics

import (
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenaz/tenaz/pkg/outcome"
	"github.com/tenaz/tenaz/pkg/tenaz"
)

// Set is every tenaz metric, registered on one registry. Its methods are
// safe for concurrent use.
type Set struct {
	accepted  *prometheus.CounterVec
	rejected  *prometheus.CounterVec
	wait      *prometheus.HistogramVec
	delivery  *prometheus.HistogramVec
	attempts  *prometheus.CounterVec
	retries   *prometheus.CounterVec
	outcomes  *prometheus.CounterVec
	breakers  *prometheus.GaugeVec
	dead      *prometheus.CounterVec
	review    *prometheus.CounterVec
	repairs   *prometheus.CounterVec
	callbacks *prometheus.CounterVec
	polls     *prometheus.CounterVec
	throttled *prometheus.CounterVec
	events    *table
	backlog   *backlog
	accounts  *accounts
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

// New makes a Set and registers every metric of the Catalog on reg (tests
// pass a prometheus.NewRegistry()). It fails if one is already registered.
func New(reg prometheus.Registerer) (*Set, error) {
	s := &Set{}
	counter := func(name string) *prometheus.CounterVec {
		i, _ := Lookup(name)
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: i.Name, Help: i.Help}, i.Labels)
	}
	histogram := func(name string) *prometheus.HistogramVec {
		i, _ := Lookup(name)
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: i.Name, Help: i.Help, Buckets: i.Buckets}, i.Labels)
	}
	s.accepted = counter(NameAccepted)
	s.rejected = counter(NameRejected)
	s.wait = histogram(NameWait)
	s.delivery = histogram(NameDelivery)
	s.attempts = counter(NameAttempts)
	s.retries = counter(NameRetries)
	s.outcomes = counter(NameOutcomes)
	bi, _ := Lookup(NameBreakerState)
	s.breakers = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: bi.Name, Help: bi.Help}, bi.Labels)
	s.dead = counter(NameDead)
	s.review = counter(NameReview)
	s.repairs = counter(NameRepairs)
	s.callbacks = counter(NameCallbacks)
	s.polls = counter(NamePolls)
	s.throttled = counter(NameTargetThrottled)
	s.events = newTable(NameEvents)
	s.backlog = newBacklog()
	s.accounts = newAccounts()
	for _, c := range []prometheus.Collector{
		s.accepted, s.rejected, s.wait, s.delivery, s.attempts, s.retries, s.outcomes, s.breakers, s.throttled,
		s.dead, s.review, s.repairs, s.callbacks, s.polls, s.events, s.backlog, s.accounts,
	} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("metrics: register: %w", err)
		}
	}
	return s, nil
}

// ---------------------------------------------------------------- labels

// account, kind and target label values: the name when valid, else Invalid.
func accountLabel(a string) string {
	if tenaz.ValidateAccount(a) != nil {
		return Invalid
	}
	return a
}

func kindLabel(k string) string {
	if len(k) == 0 || len(k) > tenaz.MaxKindLen {
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
	if tokens > tenaz.MaxKindTokens {
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

func stateLabel(s tenaz.State) string {
	if !s.Valid() {
		return Other
	}
	return string(s)
}

// ------------------------------------------------------------- recording

// Accepted counts an event accepted (created) by ingest.
func (s *Set) Accepted(account, kind string) {
	s.accepted.WithLabelValues(accountLabel(account), kindLabel(kind)).Inc()
}

// Rejected counts a submission refused by ingest, by its error code.
func (s *Set) Rejected(reason string) {
	s.rejected.WithLabelValues(code(reason)).Inc()
}

// WaitTime observes the wait from when an event became due (accepted, or
// its not_before) to the start of its first attempt. Negative durations
// count as zero.
func (s *Set) WaitTime(account, kind string, d time.Duration) {
	s.wait.WithLabelValues(accountLabel(account), kindLabel(kind)).Observe(max(d, 0).Seconds())
}

// DeliveryLatency observes how long one outbound call to target took.
func (s *Set) DeliveryLatency(account, kind, target string, d time.Duration) {
	s.delivery.WithLabelValues(accountLabel(account), kindLabel(kind), targetLabel(target)).Observe(max(d, 0).Seconds())
}

// Attempt counts a delivery attempt by its outcome class
// (outcome.ClassOf(err)); success is recorded as class "ok".
func (s *Set) Attempt(account, kind string, class outcome.Class) {
	s.attempts.WithLabelValues(accountLabel(account), kindLabel(kind), classLabel(class)).Inc()
}

// Retry counts an attempt whose outcome scheduled another attempt, by the
// class that caused it.
func (s *Set) Retry(account, kind string, class outcome.Class) {
	s.retries.WithLabelValues(accountLabel(account), kindLabel(kind), classLabel(class)).Inc()
}

// Outcome counts an attempt or poll by the state the event moved to.
func (s *Set) Outcome(account, kind string, to tenaz.State) {
	s.outcomes.WithLabelValues(accountLabel(account), kindLabel(kind), stateLabel(to)).Inc()
}

// Breaker states as the gauge's values.
const (
	BreakerClosed   = 0
	BreakerHalfOpen = 1
	BreakerOpen     = 2
)

// BreakerState sets the breaker gauge of account and target from the
// breaker's state name: "closed" 0, "half_open" 1, "open" 2. An unknown
// name is ignored.
func (s *Set) BreakerState(account, target, state string) {
	v := 0
	switch state {
	case "closed":
		v = BreakerClosed
	case "half_open":
		v = BreakerHalfOpen
	case "open":
		v = BreakerOpen
	default:
		return
	}
	s.breakers.WithLabelValues(accountLabel(account), targetLabel(target)).Set(float64(v))
}

// Dead counts an entry that arrived in DEAD, by reason.
func (s *Set) Dead(account, kind, reason string) {
	s.dead.WithLabelValues(accountLabel(account), kindLabel(kind), code(reason)).Inc()
}

// Review counts an event moved to manual_review.
func (s *Set) Review(account, kind string) {
	s.review.WithLabelValues(accountLabel(account), kindLabel(kind)).Inc()
}

// ReconcilerRepair counts one repair by the reconciler; repair names the
// kind of repair (a short code such as "requeued" or "escalated").
func (s *Set) ReconcilerRepair(repair string) {
	s.repairs.WithLabelValues(code(repair)).Inc()
}

// Callback counts a provider callback by result (CallbackApplied,
// CallbackNoop, CallbackUnknown, CallbackForged). target must be a
// configured target name (pass "" for an unknown one: it is recorded as
// "invalid", so a caller cannot add series by inventing targets).
func (s *Set) Callback(target, result string) {
	s.callbacks.WithLabelValues(targetLabel(target), code(result)).Inc()
}

// Poll counts a poll of target by result (PollDone, PollPending,
// PollError, PollExpired).
func (s *Set) Poll(target, result string) {
	s.polls.WithLabelValues(targetLabel(target), code(result)).Inc()
}

// TargetThrottled counts a call held back by its target's provider-wide
// rate or concurrency (targets.<t>.rate, .concurrency) before it was made.
func (s *Set) TargetThrottled(target string) {
	s.throttled.WithLabelValues(targetLabel(target)).Inc()
}

// EventsKey is one label set of tenaz_events.
type EventsKey struct {
	State   tenaz.State
	Account string
	Kind    string
}

// SetEventsByState replaces every series of tenaz_events with counts, in
// one step: label sets absent from counts disappear, and a scrape sees
// either the previous sweep or this one, never a mix.
func (s *Set) SetEventsByState(counts map[EventsKey]int) {
	rows := make(map[string]row, len(counts))
	for k, n := range counts {
		lv := []string{stateLabel(k.State), accountLabel(k.Account), kindLabel(k.Kind)}
		key := joinKey(lv)
		r := rows[key] // invalid names may fold together
		r.labels = lv
		r.v += float64(n)
		rows[key] = r
	}
	s.events.replace(rows)
}

// ConsumerBacklog sets the backlog of account's dispatch consumer from a
// ConsumerInfo the caller already has (NumPending, NumAckPending). A
// watched backlog (WatchBacklog) replaces it at its next read.
func (s *Set) ConsumerBacklog(account string, pending, ackPending int) {
	s.backlog.push(accountLabel(account), pending, ackPending)
}

// ------------------------------------------------- package-level, Default

// Accepted counts an accepted event on Default.
func Accepted(account, kind string) { Default.Accepted(account, kind) }

// Rejected counts a refused submission on Default.
func Rejected(reason string) { Default.Rejected(reason) }

// WaitTime observes a wait to the first attempt on Default.
func WaitTime(account, kind string, d time.Duration) { Default.WaitTime(account, kind, d) }

// DeliveryLatency observes an outbound call's duration on Default.
func DeliveryLatency(account, kind, target string, d time.Duration) {
	Default.DeliveryLatency(account, kind, target, d)
}

// Attempt counts a delivery attempt on Default.
func Attempt(account, kind string, class outcome.Class) { Default.Attempt(account, kind, class) }

// Retry counts a retry on Default.
func Retry(account, kind string, class outcome.Class) { Default.Retry(account, kind, class) }

// Outcome counts the state an attempt or poll moved an event to, on Default.
func Outcome(account, kind string, to tenaz.State) { Default.Outcome(account, kind, to) }

// BreakerState sets a breaker gauge on Default.
func BreakerState(account, target, state string) { Default.BreakerState(account, target, state) }

// Dead counts an arrival in DEAD on Default.
func Dead(account, kind, reason string) { Default.Dead(account, kind, reason) }

// Review counts a move to manual review on Default.
func Review(account, kind string) { Default.Review(account, kind) }

// ReconcilerRepair counts a reconciler repair on Default.
func ReconcilerRepair(repair string) { Default.ReconcilerRepair(repair) }

// Callback counts a provider callback on Default.
func Callback(target, result string) { Default.Callback(target, result) }

// Poll counts a poll on Default.
func Poll(target, result string) { Default.Poll(target, result) }

// SetEventsByState replaces tenaz_events on Default.
func SetEventsByState(counts map[EventsKey]int) { Default.SetEventsByState(counts) }

// ConsumerBacklog sets an account's consumer backlog on Default.
func ConsumerBacklog(account string, pending, ackPending int) {
	Default.ConsumerBacklog(account, pending, ackPending)
}
