package metrics

import "time"

// Type is a metric's Prometheus type.
type Type string

// The types used.
const (
	Counter   Type = "counter"
	Gauge     Type = "gauge"
	Histogram Type = "histogram"
)

// Info describes one metric of the catalog.
type Info struct {
	// Name is the full metric name (tenaz_…); histograms add _bucket, _sum
	// and _count.
	Name string
	// Type is counter, gauge or histogram.
	Type Type
	// Labels are the metric's label names, all bounded.
	Labels []string
	// Help is the one-line meaning (the HELP text).
	Help string
	// Emitter names the service or package that records it.
	Emitter string
	// Buckets are a histogram's upper bounds, in seconds.
	Buckets []float64
}

// Objectives the alert rules (deploy/prometheus/tenaz-rules.yaml) hold the
// metrics to. A test checks that the rules use these values.
const (
	// WaitObjective is the objective of the 95th percentile of the wait
	// from accept (or due time) to the first attempt, per account and kind,
	// over 10 minutes.
	WaitObjective = 10 * time.Second
	// RetryRateObjective is the highest acceptable share of attempts that
	// end in a retry, per account and kind, over one hour.
	RetryRateObjective = 0.02
	// BreakerOpenLimit is how long a breaker may stay open (or half-open)
	// before it alerts.
	BreakerOpenLimit = 10 * time.Minute
)

// Label values with a fixed meaning.
const (
	// ClassOK is the class label of a successful attempt (outcome.ClassSuccess).
	ClassOK = "ok"
	// Other replaces a label value outside the expected shape, so that an
	// unexpected value never adds unbounded series.
	Other = "other"
	// Invalid replaces an account, kind or target that is not a valid name.
	Invalid = "invalid"
	// Unconfigured replaces a kind the config does not name (a refused
	// submission's): a producer could send any number of them.
	Unconfigured = "unconfigured"
)

// Results of tenaz_callbacks_total.
const (
	CallbackApplied = "applied" // the result was applied to a waiting event
	CallbackNoop    = "noop"    // verified, but the event no longer waited (duplicate, late, out of order): recorded, nothing changed
	CallbackUnknown = "unknown" // verified, but no event matches
	CallbackForged  = "forged"  // the signature did not verify (answered 401, or 429 past the refusal budget)
)

// Results of tenaz_polls_total.
const (
	PollDone    = "done"    // the provider's answer met done_when
	PollPending = "pending" // not done yet; polled again later
	PollError   = "error"   // the poll call failed
	PollExpired = "expired" // poll_sla passed: moved to manual review
)

// Reasons of tenaz_poller_put_off_total: why a fired timer was set again
// for later instead of handled now.
const (
	PutOffPaused      = "paused"      // the account is paused: its polls wait
	PutOffBreaker     = "breaker"     // the account's breaker for the target is open: its polls wait
	PutOffRate        = "rate"        // the target's provider-wide rate has no token for the poll soon
	PutOffConcurrency = "concurrency" // the target's provider-wide concurrency has no slot for the poll soon
	PutOffCrowded     = "crowded"     // the account holds all the timers it may on the replica
	PutOffLeftOut     = "left_out"    // the account's stored definition is left out: its polls wait
	PutOffNotCurrent  = "not_current" // the replica's heartbeat is late: the target's slots it holds may no longer be counted
)

// The metric names.
const (
	NameAccepted     = "tenaz_events_accepted_total"
	NameRejected     = "tenaz_events_rejected_total"
	NameAnchored     = "tenaz_intake_anchored_total"
	NameDeadFull     = "tenaz_dead_full_total"
	NameDeadWaiting  = "tenaz_dead_waiting_entries"
	NameDeadNotKept  = "tenaz_dead_not_kept_total"
	NameWait         = "tenaz_wait_seconds"
	NameDelivery     = "tenaz_delivery_duration_seconds"
	NameAttempts     = "tenaz_attempts_total"
	NameRetries      = "tenaz_retries_total"
	NameOutcomes     = "tenaz_outcomes_total"
	NameBreakerState = "tenaz_breaker_state"
	NameDead         = "tenaz_dead_total"
	NameReview       = "tenaz_review_total"
	NameRepairs      = "tenaz_reconciler_repairs_total"
	NameTrimFailures = "tenaz_trim_failures_total"
	NameEvents       = "tenaz_events"
	NamePending      = "tenaz_consumer_pending_messages"
	NameAckPending   = "tenaz_consumer_ack_pending_messages"
	NamePaused       = "tenaz_consumer_paused"
	NameBacklogUp    = "tenaz_consumer_backlog_up"
	NameRunnable     = "tenaz_backlog_runnable_messages"
	NameCallbacks    = "tenaz_callbacks_total"
	NamePolls        = "tenaz_polls_total"
	NamePutOff       = "tenaz_poller_put_off_total"
	// NameTargetThrottled counts calls held back by a target's limit.
	NameTargetThrottled = "tenaz_target_throttled_total"
	// NameTargetConcurrency and NameTargetInFlight are a target's
	// provider-wide concurrency (learned under "auto") and its calls in
	// flight over every replica.
	NameTargetConcurrency = "tenaz_target_concurrency_limit"
	NameTargetInFlight    = "tenaz_target_in_flight_calls"

	NameAccountConcurrency = "tenaz_account_concurrency_limit"
	NameAccountRate        = "tenaz_account_rate_limit_per_second"
	NameAccountInFlight    = "tenaz_account_in_flight_calls"
	NameAccountThrottled   = "tenaz_account_throttled_total"
	NameAccountOwner       = "tenaz_account_owner"

	// NameBuildInfo is the binary's version, revision and Go version.
	NameBuildInfo = "tenaz_build_info"

	// The live config's (pkg/live): how the last reload went, when the
	// last good one was, and the accounts of the accounts bucket.
	NameConfigReloadSuccess = "tenaz_config_reload_success"
	NameConfigReloadTime    = "tenaz_config_reload_timestamp_seconds"
	NameConfigReloads       = "tenaz_config_reloads_total"
	NameConfigStored        = "tenaz_config_stored_accounts"
)

// Catalog is every tenaz metric. docs/metrics.md documents each one.
var Catalog = []Info{
	{Name: NameConfigReloadSuccess, Type: Gauge, Emitter: "every tenaz process",
		Help: "1 if the last reload of tenaz.yaml (SIGHUP or a change of the file) was applied, 0 if it was refused: the config before it is still in force."},
	{Name: NameConfigReloadTime, Type: Gauge, Emitter: "every tenaz process",
		Help: "Unix time of the last reload of tenaz.yaml that was applied; absent (0) before the first."},
	{Name: NameConfigReloads, Type: Counter, Labels: []string{"result"}, Emitter: "every tenaz process",
		Help: "Reloads of tenaz.yaml, by result (applied, refused)."},
	{Name: NameConfigStored, Type: Gauge, Labels: []string{"state"}, Emitter: "every tenaz process",
		Help: "Accounts of the accounts bucket in force (state applied) and left out (refused: the file declares the account, or it does not fit the file)."},
	{Name: NameBuildInfo, Type: Gauge, Labels: []string{"version", "revision", "go_version"}, Emitter: "every tenaz binary",
		Help: "1, with the tenaz version, the VCS revision and the Go version the binary was built with."},
	{Name: NameAccepted, Type: Counter, Labels: []string{"account", "kind"}, Emitter: "ingest",
		Help: "Events accepted (created; duplicates not counted)."},
	{Name: NameRejected, Type: Counter, Labels: []string{"reason"}, Emitter: "ingest",
		Help: "Submissions refused, by error code (malformed, too_large, unknown_kind, schema_violation, ...)."},
	{Name: NameAnchored, Type: Counter, Labels: []string{"account"}, Emitter: "ingest",
		Help: "Submissions acked for their account's anchor as they arrived, to be read back from INTAKE and accepted in turns: the account filled its share of ingest (a flood), or DEAD had no room for its refusals."},
	{Name: NameDeadFull, Type: Counter, Labels: []string{"account"}, Emitter: "ingest, dispatcher, poller, deadletter",
		Help: "Tries to keep an account's entry in DEAD refused for room: the account is at its bound (its dead_letters, or deadletter.max_per_account), or DEAD is full. The entry waits in TENAZ_DEAD_WAITING until ingest moves it in (each refused move counts too); a steady rise names the account whose failures wait for an operator."},
	{Name: NameDeadNotKept, Type: Counter, Labels: []string{"account"}, Emitter: "ingest",
		Help: "Refused NATS submissions not kept: their account kept deadletter.max_refusals_per_account entries, in DEAD and waiting for room (a flood of bad submissions; nothing accepted stands for them)."},
	{Name: NameDeadWaiting, Type: Gauge, Labels: []string{"account"}, Emitter: "ingest (the waiting room's mover)",
		Help: "Entries of an account waiting in TENAZ_DEAD_WAITING for room in DEAD, as ingest's mover left them at its last pass (every 2 s). Every ingest replica exports it: read it with max by (account)."},
	{Name: NameWait, Type: Histogram, Labels: []string{"account", "kind"}, Emitter: "dispatcher",
		Help:    "Seconds from when an event became due (accepted, or its not_before) to the start of its first attempt.",
		Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800}},
	{Name: NameDelivery, Type: Histogram, Labels: []string{"account", "kind", "target"}, Emitter: "dispatcher, poller",
		Help:    "Seconds one outbound call to a target took (delivery attempt or poll), whatever its outcome.",
		Buckets: []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}},
	{Name: NameAttempts, Type: Counter, Labels: []string{"account", "kind", "class"}, Emitter: "dispatcher",
		Help: "Delivery attempts, by outcome class (ok, transient, timeout, permanent, crash)."},
	{Name: NameRetries, Type: Counter, Labels: []string{"account", "kind", "class"}, Emitter: "dispatcher",
		Help: "Attempts whose outcome scheduled another attempt, by the class that caused it."},
	{Name: NameOutcomes, Type: Counter, Labels: []string{"account", "kind", "state"}, Emitter: "dispatcher, poller",
		Help: "Attempts and polls by the state the event moved to (done, retrying, awaiting_callback, polling, dead, manual_review, ...)."},
	{Name: NameBreakerState, Type: Gauge, Labels: []string{"account", "target", "state"}, Emitter: "pkg/breaker (dispatcher, poller)",
		Help: "Circuit breaker state per account and target as this replica sees it: 1 on the series of its state (closed, half_open, open), 0 on the others; under account=\"other\", the number of breakers in each state."},
	{Name: NameDead, Type: Counter, Labels: []string{"account", "kind", "reason"}, Emitter: "deadletter",
		Help: "Entries arrived in DEAD, by reason (permanent, attempts_exhausted, max_deliveries, rejected_at_intake, too_large, undecodable_record)."},
	{Name: NameReview, Type: Counter, Labels: []string{"account", "kind"}, Emitter: "deadletter",
		Help: "Events moved to manual_review."},
	{Name: NameRepairs, Type: Counter, Labels: []string{"repair"}, Emitter: "poller (reconciler)",
		Help: "Events the reconciler found stuck and put back on their path or escalated, by kind of repair."},
	{Name: NameTrimFailures, Type: Counter, Labels: []string{"stream"}, Emitter: "ingest, dispatcher, poller",
		Help: "Trims of settled messages that failed, by what was trimmed (intake, events, timers); the messages stay until a later trim succeeds."},
	{Name: NameEvents, Type: Gauge, Labels: []string{"state", "account", "kind"}, Emitter: "poller (periodic sweep)",
		Help: "Events in each state, as counted by the last sweep of tenaz_state."},
	{Name: NamePending, Type: Gauge, Labels: []string{"account"}, Emitter: "ingest (backlog collector)",
		Help: "The account's messages in EVENTS (its dispatch subjects): waiting, in flight, or settled and not trimmed yet (streams.trim_after)."},
	{Name: NameAckPending, Type: Gauge, Labels: []string{"account"}, Emitter: "ingest (backlog collector)",
		Help: "0 when read from EVENTS (messages in flight count in tenaz_consumer_pending_messages); a service that knows its in-flight messages may report them."},
	{Name: NamePaused, Type: Gauge, Labels: []string{"account"}, Emitter: "ingest (backlog collector)",
		Help: "1 while an operator has paused the account, else 0: for every account with messages in EVENTS and every paused one (under account=\"other\", how many of those it holds are paused). An open breaker is not a pause here (tenaz_breaker_state)."},
	{Name: NameRunnable, Type: Gauge, Emitter: "ingest (backlog collector)",
		Help: "Messages in EVENTS of the accounts no operator has paused (every account's, while ingest cannot read the pauses): the backlog that dispatchers can work off, which the dispatcher's autoscaler reads."},
	{Name: NameBacklogUp, Type: Gauge, Emitter: "ingest (backlog collector)",
		Help: "1 if the last read of the accounts' backlog in EVENTS succeeded, else 0."},
	{Name: NameCallbacks, Type: Counter, Labels: []string{"target", "result"}, Emitter: "ingest (callback receiver)",
		Help: "Provider callbacks received, by result (applied, noop, unknown, forged); their sum is every callback received."},
	{Name: NamePolls, Type: Counter, Labels: []string{"target", "result"}, Emitter: "poller",
		Help: "Polls of providers, by result (done, pending, error, expired)."},
	{Name: NamePutOff, Type: Counter, Labels: []string{"account", "reason"}, Emitter: "poller",
		Help: "Timers set again for later instead of handled now, by reason: a poll of a paused account (paused), of an account whose breaker for the target is open (breaker), or that its target's rate cannot take soon (rate); a timer of an account that holds all the timers it may on the replica (crowded)."},
	{Name: NameTargetThrottled, Type: Counter, Labels: []string{"target"}, Emitter: "dispatcher, poller",
		Help: "Calls held back by their target's provider-wide rate or concurrency (targets.<t>.rate, .concurrency) until it let them go, over every account, and polls held back or put off by its rate; each replica counts its own."},
	{Name: NameTargetConcurrency, Type: Gauge, Labels: []string{"target"}, Emitter: "dispatcher (replicas calling the target)",
		Help: "Calls to the target allowed in flight at once over every account and replica (targets.<t>.concurrency; learned under auto), as the replica's last read of tenaz_quotas shows it: every replica reports the same figure, so aggregate with max."},
	{Name: NameTargetInFlight, Type: Gauge, Labels: []string{"target"}, Emitter: "dispatcher (replicas calling the target)",
		Help: "Calls to the target in flight over every account and live replica, as the replica's last read of tenaz_quotas shows it: aggregate with max."},
	{Name: NameAccountConcurrency, Type: Gauge, Labels: []string{"account"}, Emitter: "dispatcher (the account's owner)",
		Help: "Calls of the account allowed in flight at once, over all replicas; exported by the replica that owns the account."},
	{Name: NameAccountRate, Type: Gauge, Labels: []string{"account"}, Emitter: "dispatcher (the account's owner)",
		Help: "Calls of the account allowed per second, over all replicas (0: unlimited); exported by the replica that owns the account."},
	{Name: NameAccountInFlight, Type: Gauge, Labels: []string{"account"}, Emitter: "dispatcher (the account's owner)",
		Help: "Calls of the account being made now; exported by the replica that owns the account."},
	{Name: NameAccountThrottled, Type: Counter, Labels: []string{"account", "limit"}, Emitter: "dispatcher (the account's owner)",
		Help: "Calls of the account held back until a limit let them go, by limit (concurrency: a free slot, rate: the account's rate); exported by the replica that owns the account."},
	{Name: NameAccountOwner, Type: Gauge, Labels: []string{"account", "instance"}, Emitter: "dispatcher (the account's owner)",
		Help: "1 on the replica that owns the account (holds its lease in tenaz_owners), with that replica's name; no other replica exports the account."},
	{Name: NameAuditLag, Type: Gauge, Emitter: "deadletter (audit archiver)",
		Help: "State-record revisions not yet in the audit archive (TENAZ_AUDIT): what the records' feed (the deadletter-feed consumers, shared with the search index) had still to deliver over every partition when each last fetched."},
	{Name: NameAuditArchived, Type: Counter, Labels: []string{"result"}, Emitter: "deadletter (audit archiver)",
		Help: "State-record revisions the archiver handled, by result (written: entries added; unchanged: nothing new, as after a redelivery)."},
	{Name: NameSearchLag, Type: Gauge, Emitter: "deadletter (search indexer)",
		Help: "State-record revisions not yet in the search index (tenaz_search): what the records' feed (the deadletter-feed consumers) had still to deliver over every partition when each last fetched."},
	{Name: NameSearchWrites, Type: Counter, Labels: []string{"op"}, Emitter: "deadletter (search indexer)",
		Help: "Writes of the search indexer to tenaz_search, by op (put: an entry written; purge: an entry removed, as when an event leaves a state)."},
}

// Lookup returns the catalog entry of name.
func Lookup(name string) (Info, bool) {
	for _, i := range Catalog {
		if i.Name == name {
			return i, true
		}
	}
	return Info{}, false
}

// SeriesNames returns every series name the catalog exposes: each name,
// and for histograms its _bucket, _sum and _count series.
func SeriesNames() []string {
	var out []string
	for _, i := range Catalog {
		if i.Type == Histogram {
			out = append(out, i.Name+"_bucket", i.Name+"_sum", i.Name+"_count")
			continue
		}
		out = append(out, i.Name)
	}
	return out
}
