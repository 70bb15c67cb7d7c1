package metrics_test

import (
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/tenaz/tenaz/pkg/metrics"
	"github.com/tenaz/tenaz/pkg/outcome"
	"github.com/tenaz/tenaz/pkg/state"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// setup returns a Set on a fresh registry.
func setup(t *testing.T) (*metrics.Set, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	s, err := metrics.New(reg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s, reg
}

// compare checks the exposition of names against want (text format
// without HELP/TYPE lines: they are added from the catalog).
func compare(t *testing.T, reg *prometheus.Registry, want string, names ...string) {
	t.Helper()
	var b strings.Builder
	for _, n := range names {
		i, ok := metrics.Lookup(n)
		if !ok {
			t.Fatalf("%s is not in the catalog", n)
		}
		b.WriteString("# HELP " + i.Name + " " + i.Help + "\n# TYPE " + i.Name + " " + string(i.Type) + "\n")
		for _, l := range strings.Split(strings.TrimSpace(want), "\n") {
			l = strings.TrimSpace(l)
			if strings.HasPrefix(l, i.Name+"{") || strings.HasPrefix(l, i.Name+" ") ||
				strings.HasPrefix(l, i.Name+"_bucket") || strings.HasPrefix(l, i.Name+"_sum") || strings.HasPrefix(l, i.Name+"_count") {
				b.WriteString(l + "\n")
			}
		}
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(b.String()), names...); err != nil {
		t.Error(err)
	}
}

func TestCounters(t *testing.T) {
	s, reg := setup(t)
	s.Accepted("acme", "order.create")
	s.Accepted("acme", "order.create")
	s.Accepted("beta", "order.create")
	s.Rejected("schema_violation")
	s.Rejected("too_large")
	s.Rejected("too_large")

	s.Attempt("acme", "order.create", outcome.ClassSuccess)
	s.Attempt("acme", "order.create", outcome.ClassTransient)
	s.Attempt("acme", "order.create", outcome.ClassTransient)
	s.Attempt("acme", "order.create", outcome.ClassTimeout)
	s.Retry("acme", "order.create", outcome.ClassTransient)
	s.Retry("acme", "order.create", outcome.ClassTimeout)
	s.Outcome("acme", "order.create", state.Done)
	s.Outcome("acme", "order.create", state.Retrying)
	s.Outcome("acme", "order.create", state.Retrying)

	s.Dead("acme", "order.create", "attempts_exhausted")
	s.Review("acme", "credit.evaluate")
	s.ReconcilerRepair("requeued")
	s.ReconcilerRepair("requeued")
	s.ReconcilerRepair("escalated")
	s.Callback("bureau_a", metrics.CallbackApplied)
	s.Callback("bureau_a", metrics.CallbackForged)
	s.Poll("bureau_b", metrics.PollPending)
	s.Poll("bureau_b", metrics.PollDone)

	compare(t, reg, `
		tenaz_events_accepted_total{account="acme",kind="order.create"} 2
		tenaz_events_accepted_total{account="beta",kind="order.create"} 1
		tenaz_events_rejected_total{reason="schema_violation"} 1
		tenaz_events_rejected_total{reason="too_large"} 2
		tenaz_attempts_total{account="acme",class="ok",kind="order.create"} 1
		tenaz_attempts_total{account="acme",class="timeout",kind="order.create"} 1
		tenaz_attempts_total{account="acme",class="transient",kind="order.create"} 2
		tenaz_retries_total{account="acme",class="timeout",kind="order.create"} 1
		tenaz_retries_total{account="acme",class="transient",kind="order.create"} 1
		tenaz_outcomes_total{account="acme",kind="order.create",state="done"} 1
		tenaz_outcomes_total{account="acme",kind="order.create",state="retrying"} 2
		tenaz_dead_total{account="acme",kind="order.create",reason="attempts_exhausted"} 1
		tenaz_review_total{account="acme",kind="credit.evaluate"} 1
		tenaz_reconciler_repairs_total{repair="escalated"} 1
		tenaz_reconciler_repairs_total{repair="requeued"} 2
		tenaz_callbacks_total{result="applied",target="bureau_a"} 1
		tenaz_callbacks_total{result="forged",target="bureau_a"} 1
		tenaz_polls_total{result="done",target="bureau_b"} 1
		tenaz_polls_total{result="pending",target="bureau_b"} 1
	`, metrics.NameAccepted, metrics.NameRejected, metrics.NameAttempts, metrics.NameRetries, metrics.NameOutcomes,
		metrics.NameDead, metrics.NameReview, metrics.NameRepairs, metrics.NameCallbacks, metrics.NamePolls)
}

func TestHistograms(t *testing.T) {
	s, reg := setup(t)
	s.WaitTime("acme", "order.create", 40*time.Millisecond)
	s.WaitTime("acme", "order.create", 3*time.Second)
	s.WaitTime("acme", "order.create", 45*time.Second)
	s.WaitTime("acme", "order.create", -time.Second) // clock skew: counted as 0
	s.DeliveryLatency("acme", "order.create", "erp", 200*time.Millisecond)
	s.DeliveryLatency("acme", "order.create", "erp", 20*time.Second)

	compare(t, reg, `
		tenaz_wait_seconds_bucket{account="acme",kind="order.create",le="0.05"} 2
		tenaz_wait_seconds_bucket{account="acme",kind="order.create",le="0.1"} 2
		tenaz_wait_seconds_bucket{account="acme",kind="order.create",le="0.25"} 2
		tenaz_wait_seconds_bucket{account="acme",kind="order.create",le="0.5"} 2
		tenaz_wait_seconds_bucket{account="acme",kind="order.create",le="1"} 2
		tenaz_wait_seconds_bucket{account="acme",kind="order.create",le="2.5"} 2
		tenaz_wait_seconds_bucket{account="acme",kind="order.create",le="5"} 3
		tenaz_wait_seconds_bucket{account="acme",kind="order.create",le="10"} 3
		tenaz_wait_seconds_bucket{account="acme",kind="order.create",le="30"} 3
		tenaz_wait_seconds_bucket{account="acme",kind="order.create",le="60"} 4
		tenaz_wait_seconds_bucket{account="acme",kind="order.create",le="300"} 4
		tenaz_wait_seconds_bucket{account="acme",kind="order.create",le="1800"} 4
		tenaz_wait_seconds_bucket{account="acme",kind="order.create",le="+Inf"} 4
		tenaz_wait_seconds_sum{account="acme",kind="order.create"} 48.04
		tenaz_wait_seconds_count{account="acme",kind="order.create"} 4
		tenaz_delivery_duration_seconds_bucket{account="acme",kind="order.create",target="erp",le="0.01"} 0
		tenaz_delivery_duration_seconds_bucket{account="acme",kind="order.create",target="erp",le="0.025"} 0
		tenaz_delivery_duration_seconds_bucket{account="acme",kind="order.create",target="erp",le="0.05"} 0
		tenaz_delivery_duration_seconds_bucket{account="acme",kind="order.create",target="erp",le="0.1"} 0
		tenaz_delivery_duration_seconds_bucket{account="acme",kind="order.create",target="erp",le="0.25"} 1
		tenaz_delivery_duration_seconds_bucket{account="acme",kind="order.create",target="erp",le="0.5"} 1
		tenaz_delivery_duration_seconds_bucket{account="acme",kind="order.create",target="erp",le="1"} 1
		tenaz_delivery_duration_seconds_bucket{account="acme",kind="order.create",target="erp",le="2.5"} 1
		tenaz_delivery_duration_seconds_bucket{account="acme",kind="order.create",target="erp",le="5"} 1
		tenaz_delivery_duration_seconds_bucket{account="acme",kind="order.create",target="erp",le="10"} 1
		tenaz_delivery_duration_seconds_bucket{account="acme",kind="order.create",target="erp",le="30"} 2
		tenaz_delivery_duration_seconds_bucket{account="acme",kind="order.create",target="erp",le="+Inf"} 2
		tenaz_delivery_duration_seconds_sum{account="acme",kind="order.create",target="erp"} 20.2
		tenaz_delivery_duration_seconds_count{account="acme",kind="order.create",target="erp"} 2
	`, metrics.NameWait, metrics.NameDelivery)
}

// The wait objective must be a bucket boundary, or the p95 alert compares
// against an interpolation.
func TestWaitObjectiveIsABucket(t *testing.T) {
	i, _ := metrics.Lookup(metrics.NameWait)
	if !slices.Contains(i.Buckets, metrics.WaitObjective.Seconds()) {
		t.Errorf("WaitObjective %s is not a bucket of %s %v", metrics.WaitObjective, i.Name, i.Buckets)
	}
}

// Each breaker has a series per state, 1 on the state it is in.
func TestBreakerState(t *testing.T) {
	s, reg := setup(t)
	s.BreakerState("acme", "erp", "open")
	s.BreakerState("beta", "erp", "half_open")
	s.BreakerState("gamma", "erp", "open")
	s.BreakerState("gamma", "erp", "closed")
	s.BreakerState("gamma", "erp", "sideways") // unknown: ignored
	compare(t, reg, `
		tenaz_breaker_state{account="acme",state="closed",target="erp"} 0
		tenaz_breaker_state{account="acme",state="half_open",target="erp"} 0
		tenaz_breaker_state{account="acme",state="open",target="erp"} 1
		tenaz_breaker_state{account="beta",state="closed",target="erp"} 0
		tenaz_breaker_state{account="beta",state="half_open",target="erp"} 1
		tenaz_breaker_state{account="beta",state="open",target="erp"} 0
		tenaz_breaker_state{account="gamma",state="closed",target="erp"} 1
		tenaz_breaker_state{account="gamma",state="half_open",target="erp"} 0
		tenaz_breaker_state{account="gamma",state="open",target="erp"} 0
	`, metrics.NameBreakerState)
}

// Values that are not valid names or codes fold into "invalid" and
// "other", so no caller can add series with arbitrary strings.
func TestLabelsBounded(t *testing.T) {
	s, reg := setup(t)
	s.Accepted("not an account", "order.create")
	s.Accepted(strings.Repeat("a", 65), "order..create")
	s.Accepted("acme", "Order.Create-2")
	s.Rejected("Weird Reason!")
	s.Rejected(strings.Repeat("x", 41))
	s.Attempt("acme", "k", "something else")
	s.Outcome("acme", "k", "flying")
	s.Callback("", metrics.CallbackUnknown)
	s.Callback("no/such target", metrics.CallbackForged)
	s.Callback("handler:", metrics.CallbackForged)
	s.DeliveryLatency("acme", "k", "handler:credit_check", time.Second)
	s.DeliveryLatency("acme", "k", "handler:no good", time.Second)
	compare(t, reg, `
		tenaz_events_accepted_total{account="invalid",kind="order.create"} 1
		tenaz_events_accepted_total{account="invalid",kind="invalid"} 1
		tenaz_events_accepted_total{account="acme",kind="Order.Create-2"} 1
		tenaz_events_rejected_total{reason="other"} 2
		tenaz_attempts_total{account="acme",class="other",kind="k"} 1
		tenaz_outcomes_total{account="acme",kind="k",state="other"} 1
		tenaz_callbacks_total{result="unknown",target="invalid"} 1
		tenaz_callbacks_total{result="forged",target="invalid"} 2
	`, metrics.NameAccepted, metrics.NameRejected, metrics.NameAttempts, metrics.NameOutcomes, metrics.NameCallbacks)
	// A Go handler's name is a target label too (the dispatcher's
	// "handler:<name>").
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var targets []string
	for _, mf := range mfs {
		if mf.GetName() != metrics.NameDelivery {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "target" {
					targets = append(targets, l.GetValue())
				}
			}
		}
	}
	slices.Sort(targets)
	if want := []string{"handler:credit_check", "invalid"}; !slices.Equal(targets, want) {
		t.Errorf("delivery targets %v, want %v", targets, want)
	}
}

func TestEventsByStateReplaces(t *testing.T) {
	s, reg := setup(t)
	s.SetEventsByState(map[metrics.EventsKey]int{
		{state.Pending, "acme", "order.create"}:   3,
		{state.Done, "acme", "order.create"}:      5,
		{state.Polling, "acme", "credit.eval"}:    2,
		{state.Scheduled, "beta", "order.create"}: 7,
	})
	compare(t, reg, `
		tenaz_events{account="acme",kind="credit.eval",state="polling"} 2
		tenaz_events{account="acme",kind="order.create",state="done"} 5
		tenaz_events{account="acme",kind="order.create",state="pending"} 3
		tenaz_events{account="beta",kind="order.create",state="scheduled"} 7
	`, metrics.NameEvents)
	// The next sweep: what it does not mention is gone.
	s.SetEventsByState(map[metrics.EventsKey]int{
		{state.Pending, "acme", "order.create"}: 1,
		{state.Done, "acme", "order.create"}:    9,
	})
	compare(t, reg, `
		tenaz_events{account="acme",kind="order.create",state="done"} 9
		tenaz_events{account="acme",kind="order.create",state="pending"} 1
	`, metrics.NameEvents)
	s.SetEventsByState(nil)
	if n := testutil.CollectAndCount(reg, metrics.NameEvents); n != 0 {
		t.Errorf("after an empty sweep: %d series of %s, want 0", n, metrics.NameEvents)
	}
}

func TestDeadWaitingReplaces(t *testing.T) {
	s, reg := setup(t)
	s.SetDeadWaiting(map[string]int{"noisy": 8, "calm": 1})
	compare(t, reg, `
		tenaz_dead_waiting_entries{account="calm"} 1
		tenaz_dead_waiting_entries{account="noisy"} 8
	`, metrics.NameDeadWaiting)
	// The mover's next pass moved calm's: its series is gone.
	s.SetDeadWaiting(map[string]int{"noisy": 5})
	compare(t, reg, `
		tenaz_dead_waiting_entries{account="noisy"} 5
	`, metrics.NameDeadWaiting)
	s.SetDeadWaiting(map[string]int{})
	if n := testutil.CollectAndCount(reg, metrics.NameDeadWaiting); n != 0 {
		t.Errorf("once nothing waits: %d series of %s, want 0", n, metrics.NameDeadWaiting)
	}
}

func TestConsumerBacklogPushed(t *testing.T) {
	s, reg := setup(t)
	s.ConsumerBacklog("acme", 12, 3)
	s.ConsumerBacklog("beta", 0, 1)
	s.ConsumerBacklog("acme", 10, 4)
	compare(t, reg, `
		tenaz_consumer_pending_messages{account="acme"} 10
		tenaz_consumer_pending_messages{account="beta"} 0
		tenaz_consumer_ack_pending_messages{account="acme"} 4
		tenaz_consumer_ack_pending_messages{account="beta"} 1
	`, metrics.NamePending, metrics.NameAckPending)
	// Nothing watched: no up series, no paused series (unknown).
	if n := testutil.CollectAndCount(reg, metrics.NameBacklogUp, metrics.NamePaused); n != 0 {
		t.Errorf("%d up/paused series without a watch, want 0", n)
	}
}

// Every catalog metric is registered, and the exposition passes
// Prometheus' naming lint.
func TestCatalogRegisteredAndLintClean(t *testing.T) {
	s, reg := setup(t)
	s.Accepted("a", "k")
	s.Rejected("r")
	s.Anchored("a")
	s.DeadFull("a")
	s.WaitTime("a", "k", time.Second)
	s.DeliveryLatency("a", "k", "t", time.Second)
	s.Attempt("a", "k", outcome.ClassSuccess)
	s.Retry("a", "k", outcome.ClassTransient)
	s.Outcome("a", "k", state.Done)
	s.BreakerState("a", "t", "open")
	s.Dead("a", "k", "permanent")
	s.Review("a", "k")
	s.ReconcilerRepair("requeued")
	s.Callback("t", metrics.CallbackApplied)
	s.Poll("t", metrics.PollDone)
	s.PutOff("a", metrics.PutOffCrowded)
	s.TargetThrottled("t")
	s.SetEventsByState(map[metrics.EventsKey]int{{state.Pending, "a", "k"}: 1})
	s.ConsumerBacklog("a", 1, 1)
	s.SearchLag(1)
	s.SearchWrite("put")
	s.AuditLag(1)
	s.AuditArchived("written")
	s.TrimFailed(metrics.TrimEvents)
	s.ConfigReloaded(true, time.Unix(1, 0))
	s.ConfigReloaded(false, time.Time{})
	s.ConfigStored(1, 0)
	s.SetDeadWaiting(map[string]int{"a": 1})
	s.DeadNotKept("a")
	defer s.WatchAccounts(func() []metrics.AccountLoad {
		return []metrics.AccountLoad{{Account: "a", Instance: "d1", Concurrency: 2, Rate: 10, InFlight: 1}}
	})()
	defer s.WatchTargets(func() []metrics.TargetLoad {
		return []metrics.TargetLoad{{Target: "t", Concurrency: 9, InFlight: 3}}
	})()

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, mf := range mfs {
		got[mf.GetName()] = strings.ToLower(mf.GetType().String())
	}
	for _, i := range metrics.Catalog {
		if i.Name == metrics.NamePaused || i.Name == metrics.NameBacklogUp || i.Name == metrics.NameRunnable {
			continue // only with a watched backlog (TestWatchBacklog)
		}
		typ, ok := got[i.Name]
		if !ok {
			t.Errorf("%s is in the catalog but not exposed", i.Name)
			continue
		}
		if typ != string(i.Type) {
			t.Errorf("%s is exposed as %s, the catalog says %s", i.Name, typ, i.Type)
		}
		delete(got, i.Name)
	}
	for n := range got {
		t.Errorf("%s is exposed but not in the catalog", n)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	for _, i := range metrics.Catalog {
		if !strings.HasPrefix(i.Name, "tenaz_") {
			t.Errorf("%s does not start with tenaz_", i.Name)
		}
		for _, l := range i.Labels {
			if l == "id" || l == "event_id" || l == "event" {
				t.Errorf("%s has the unbounded label %s", i.Name, l)
			}
		}
	}
}

// New on a registry that already has the metrics fails instead of
// panicking, and Default is on the default registry (what daemon.Mux's
// promhttp.Handler serves).
func TestRegistration(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := metrics.New(reg); err != nil {
		t.Fatal(err)
	}
	if _, err := metrics.New(reg); err == nil {
		t.Error("a second New on the same registry succeeded")
	}
	if _, err := metrics.New(prometheus.DefaultRegisterer); err == nil {
		t.Error("New on the default registry succeeded: Default is not registered there")
	}
	before := sumOf(t, prometheus.DefaultGatherer, metrics.NameAccepted)
	metrics.Accepted("acme", "k")
	if after := sumOf(t, prometheus.DefaultGatherer, metrics.NameAccepted); after != before+1 {
		t.Errorf("default registry: %s went %v -> %v, want +1", metrics.NameAccepted, before, after)
	}
}

func sumOf(t *testing.T, g prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}

func TestSnapshot(t *testing.T) {
	s, _ := setup(t)
	for range 3 {
		s.Accepted("acme", "order.create")
	}
	s.Accepted("beta", "order.create")
	s.Rejected("malformed")
	s.Attempt("acme", "order.create", outcome.ClassSuccess)
	s.Attempt("acme", "order.create", outcome.ClassTransient)
	s.Retry("acme", "order.create", outcome.ClassTransient)
	s.Dead("acme", "order.create", "permanent")
	s.Review("acme", "order.create")
	s.Review("beta", "order.create")
	s.BreakerState("acme", "erp", "open")
	s.BreakerState("beta", "erp", "half_open")
	s.BreakerState("gamma", "erp", "closed")
	s.SetEventsByState(map[metrics.EventsKey]int{
		{state.Pending, "acme", "order.create"}: 4,
		{state.Pending, "beta", "order.create"}: 1,
		{state.Dead, "acme", "order.create"}:    1,
	})
	s.ConsumerBacklog("acme", 4, 2)
	s.ConsumerBacklog("beta", 1, 0)

	got := s.Snapshot()
	want := metrics.Snapshot{
		Accepted: 4, Rejected: 1, Attempts: 2, Retries: 1, Dead: 1, Review: 2,
		BreakersOpen: 2, Events: map[string]uint64{"pending": 5, "dead": 1},
		Pending: 5, AckPending: 2,
	}
	gj, _ := json.Marshal(got)
	wj, _ := json.Marshal(want)
	if string(gj) != string(wj) {
		t.Errorf("Snapshot:\n got %s\nwant %s", gj, wj)
	}
	// What a micro stats handler returns is the same, as JSON.
	hj, _ := json.Marshal(s.StatsHandler(nil))
	if string(hj) != string(wj) {
		t.Errorf("StatsHandler:\n got %s\nwant %s", hj, wj)
	}
}

// With native histograms on, each histogram carries a native histogram
// (a schema, sparse buckets) beside its classic buckets, which the alert
// rules and the dashboard read; off, it has the classic buckets only.
func TestNativeHistograms(t *testing.T) {
	for _, on := range []bool{false, true} {
		s, reg := setup(t)
		if err := s.Configure(metrics.Options{Accounts: metrics.DefaultOptions().Accounts,
			NativeHistograms: metrics.NativeHistogramOptions{Enabled: on, BucketFactor: 1.1, MaxBuckets: 100}}); err != nil {
			t.Fatal(err)
		}
		s.WaitTime("acme", "k", 3*time.Second)
		s.DeliveryLatency("acme", "k", "erp", 120*time.Millisecond)
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		found := 0
		for _, mf := range mfs {
			if mf.GetName() != metrics.NameWait && mf.GetName() != metrics.NameDelivery {
				continue
			}
			found++
			h := mf.GetMetric()[0].GetHistogram()
			i, _ := metrics.Lookup(mf.GetName())
			if len(h.GetBucket()) != len(i.Buckets) {
				t.Errorf("native %v: %s has %d classic buckets, want %d", on, mf.GetName(), len(h.GetBucket()), len(i.Buckets))
			}
			native := len(h.GetPositiveSpan()) > 0
			if native != on {
				t.Errorf("native %v: %s has native buckets: %v (schema %d, spans %v)", on, mf.GetName(), native, h.GetSchema(), h.GetPositiveSpan())
			}
			if on && h.GetSchema() != 3 { // the largest growth not above 1.1 is 2^(2^-3) = 1.09
				t.Errorf("%s: native schema %d, want 3 for a bucket factor of 1.1", mf.GetName(), h.GetSchema())
			}
		}
		if found != 2 {
			t.Fatalf("native %v: found %d of the 2 histograms", on, found)
		}
	}
}

// tenaz_build_info names the binary's version, revision and Go version.
func TestBuildInfo(t *testing.T) {
	_, reg := setup(t)
	b := metrics.Build()
	if b.GoVersion != runtime.Version() || b.Version == "" || b.Revision == "" {
		t.Fatalf("Build: want the Go version %s and a version and revision, got %+v", runtime.Version(), b)
	}
	compare(t, reg, fmt.Sprintf(`tenaz_build_info{go_version=%q,revision=%q,version=%q} 1`, b.GoVersion, b.Revision, b.Version),
		metrics.NameBuildInfo)
}
