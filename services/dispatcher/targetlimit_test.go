package dispatcher_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/quota"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
)

// A target-wide limit holds across 50 accounts and 3 replicas: three
// tenaz-dispatcher processes on one NATS deliver the events of 50
// accounts, each with concurrency 4 of its own, to one target with
// `concurrency: 3, rate: 20/s`. The target never sees more than 3 calls in
// flight, at most 21 calls/s over the window (and at most 22 in any one
// second: the bucket's 1.4 tokens, plus how late the target reads its
// clock), and every event ends done. Run again with one replica killed
// (SIGKILL) mid-run: its slots stay counted until it is taken for dead,
// so the limits still hold. Each replica counting on its own would allow
// 9 in flight and 60 calls/s; no target limit, 200 in flight.
func TestTargetLimitHoldsAcrossAccountsAndReplicas(t *testing.T) {
	t.Parallel()
	for _, kill := range []bool{false, true} {
		t.Run(map[bool]string{false: "steady", true: "replica-killed"}[kill], func(t *testing.T) {
			t.Parallel()
			targetLimitAcrossReplicas(t, kill)
		})
	}
}

const targetLimitYAML = `
streams: {ack_wait: 2s}
http: {addr: "127.0.0.1:0"}
auth: {disabled: true}
accounts:
  "*": {concurrency: 4, breaker: {failures: 100}}
targets:
  bureau: {url: "${TARGET}/bureau/{{.Account}}", timeout: 5s, concurrency: 3, rate: 20/s}
kinds:
  order.create: {target: bureau, entity: order_id, attempts: 20, backoff: {initial: 1s, multiplier: 1, jitter: 0}}
`

func targetLimitAcrossReplicas(t *testing.T, kill bool) {
	const accounts, perAccount = 50, 8
	// Half the accounts are slow at the bureau (its concurrency binds),
	// half fast (its rate does).
	latency := map[string]time.Duration{}
	names := make([]string, accounts)
	for i := range names {
		names[i] = fmt.Sprintf("acct-%02d", i)
		latency["bureau/"+names[i]] = map[bool]time.Duration{true: 300 * time.Millisecond, false: 40 * time.Millisecond}[i%2 == 0]
	}
	m := newMeter(latency)
	target := httptest.NewServer(m)
	t.Cleanup(target.Close)
	h := setup(t, targetLimitYAML, provider.Faults{}) // its own provider stands unused: the replicas call the meter

	procs := startReplicas(t, h, 3, target.URL)

	var ids []string
	for _, a := range names {
		ids = append(ids, h.Submit(a, "order.create", keys(a, perAccount), orderPayload)...)
	}
	natstest.Eventually(t, servicetest.WaitFor, func() bool { return len(m.callsOf("bureau")) > 0 }, "want the bureau's first call")
	start := m.callsOf("bureau")[0]
	window := 15 * time.Second
	if kill {
		<-time.After(5 * time.Second) // mid-run: the point of the kill, not a wait for an outcome
		procs[1].Kill(t)
	}
	natstest.Eventually(t, window+10*time.Second, func() bool { return time.Since(start) > window },
		"the measuring window")

	calls := m.callsOf("bureau")
	slices.SortFunc(calls, func(a, b time.Time) int { return a.Compare(b) })
	in := 0
	for _, at := range calls {
		if !at.Before(start) && at.Before(start.Add(window)) {
			in++
		}
	}
	if most := int(21 * window.Seconds()); in > most {
		t.Errorf("bureau (20/s): want at most %d calls in %s over 50 accounts and 3 replicas, got %d", most, window, in)
	}
	if least := int(8 * window.Seconds()); in < least {
		t.Errorf("bureau: want the target served, at least %d calls in %s, got %d", least, window, in)
	}
	busiest := busiestSecond(calls)
	if busiest > 22 {
		t.Errorf("bureau (20/s): want at most 22 calls in any one second, saw %d", busiest)
	}
	t.Logf("bureau: %d calls in %s (%.1f/s), at most %d in one second, at most %d in flight", in, window, float64(in)/window.Seconds(), busiest, m.maxInFlight("bureau"))
	if got := m.maxInFlight("bureau"); got > 3 {
		t.Errorf("bureau (concurrency 3): want at most 3 calls in flight at the target over every account and replica, saw %d", got)
	}
	if got := m.maxInFlight("bureau"); got < 3 {
		t.Errorf("bureau: want its concurrency used (3 in flight at times), saw at most %d", got)
	}

	// Nothing lost: a throttled call waits; it does not fail.
	recs := h.waitAll(ids, state.Done, 2*time.Minute)
	for id, r := range recs {
		if r.Attempts > 1 && !kill {
			t.Errorf("event %s: want one attempt (throttled calls wait, they do not fail), got %d", id, r.Attempts)
		}
	}
}

// A stop never makes a call that waited for its target's limit once the
// deadline could cut it: with the target's one slot held by a 3s call, the
// event waiting for it (in its account's slot) is not called by a Stop due
// in 5s, and nothing is recorded against it (no failed attempt): its
// claim is given back. Left unacked, it is called once by the next
// dispatcher, at its first attempt.
func TestStopMakesNoCallThatWaitedForItsTarget(t *testing.T) {
	t.Parallel()
	yaml := strings.Replace(yamlFor(4, "attempts: 3, backoff: {initial: 1s, multiplier: 1, jitter: 0}"), "timeout: 5s", "timeout: 4s, concurrency: 1", 1)
	h := setup(t, yaml, provider.Faults{Latency: 3 * time.Second})
	d1 := h.dispatcher("d1", nil)
	ids := h.Submit("acme", "order.create", keys("wait", 2), orderPayload)
	h.waitArrivals(1, servicetest.WaitFor)
	// The second event is fetched and claimed a moment after the first
	// call leaves; only once it is claimed is it waiting for the slot.
	h.WaitAll(ids, state.Running, servicetest.WaitFor)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := d1.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	h.quiesce()
	for _, c := range h.prov.Calls() {
		if c.Status == provider.StatusClientClosed {
			t.Fatalf("a call was cut by the stop deadline: %+v", c)
		}
	}
	if n := h.prov.CallCount(); n != 1 {
		t.Fatalf("want only the call that held the target's slot made by the stopping dispatcher, got %d calls", n)
	}
	yielded := 0
	for _, id := range ids {
		r := h.Record(id)
		if r.LastError != nil || (r.Status != state.Done && r.Status != state.Retrying) {
			t.Fatalf("event %s: want nothing recorded for the call that was not made, got %s with %+v (%s)", id, r.Status, r.LastError, servicetest.Actions(r))
		}
		if last := r.History[len(r.History)-1]; r.Status == state.Retrying {
			if last.Action != state.Yield || r.Attempts != 0 {
				t.Fatalf("event %s: want the claim of the call not made given back, got %d attempts (%s)", id, r.Attempts, servicetest.Actions(r))
			}
			yielded++
		}
	}
	if yielded != 1 {
		t.Fatalf("want the event that waited for the target's slot given back, %d were", yielded)
	}

	h.dispatcher("d2", nil)
	h.waitAll(ids, state.Done, 20*time.Second)
	h.quiesce()
	byKey := map[string]int{}
	for _, c := range h.prov.Calls() {
		byKey[c.IdempotencyKey]++
	}
	if len(byKey) != len(ids) || h.prov.CallCount() != len(ids) {
		t.Fatalf("want each event called once, got %s", describeCalls(h.prov.Calls()))
	}
	wantOneAttemptEach(t, h, ids)
}

// A target's "concurrency: auto" is learned over three dispatcher
// processes: the bureau takes 6 calls at once and refuses any more (429).
// Started at 8, the replicas' refusals cut the shared limit to the
// bureau's capacity, after which few calls are refused and the bureau is
// kept busy; with one replica killed mid-run, the other two go on from
// the stored limit. Every event ends done.
func TestTargetLearnedConcurrencyAcrossReplicaProcesses(t *testing.T) {
	t.Parallel()
	const capacity, accounts, perAccount = 6, 6, 120
	const latency = 150 * time.Millisecond
	lat := map[string]time.Duration{}
	names := make([]string, accounts)
	for i := range names {
		names[i] = fmt.Sprintf("acct-%d", i)
		lat["bureau/"+names[i]] = latency
	}
	m := newMeter(lat)
	m.capacity["bureau"] = capacity
	target := httptest.NewServer(m)
	t.Cleanup(target.Close)
	h := setup(t, `
streams: {ack_wait: 2s}
http: {addr: "127.0.0.1:0"}
auth: {disabled: true}
accounts:
  "*": {concurrency: 8, breaker: {failures: 1000}}
targets:
  bureau: {url: "${TARGET}/bureau/{{.Account}}", timeout: 5s, concurrency: auto, concurrency_max: 40}
kinds:
  order.create: {target: bureau, entity: order_id, attempts: 50, backoff: {initial: 1s, multiplier: 1, jitter: 0}}
`, provider.Faults{})
	procs := startReplicas(t, h, 3, target.URL)

	var ids []string
	for _, a := range names {
		ids = append(ids, h.Submit(a, "order.create", keys(a, perAccount), orderPayload)...)
	}
	natstest.Eventually(t, servicetest.WaitFor, func() bool { return len(m.callsOf("bureau")) > 0 }, "want the bureau's first call")
	start := m.callsOf("bureau")[0]
	lim := quota.OfTarget(h.cfg.Targets["bureau"])
	learned := func() int {
		u, err := quota.Read(h.Ctx(), h.JS, "", quota.TargetKey("bureau"), lim, nil)
		if err != nil {
			t.Fatal(err)
		}
		return u.Concurrency
	}
	natstest.Eventually(t, 15*time.Second, func() bool { return learned() <= capacity },
		"want the learned concurrency cut to the bureau's capacity of %d, got %d", capacity, learned())
	learnedAt := time.Since(start)

	// From here, a window of steady calls, with a replica killed in it.
	from := time.Now()
	window := 12 * time.Second
	natstest.Eventually(t, window, func() bool { return time.Since(from) > window/3 }, "a third of the window")
	procs[0].Kill(t)
	natstest.Eventually(t, window+5*time.Second, func() bool { return time.Since(from) > window }, "the window")
	count := func(ts []time.Time) int {
		n := 0
		for _, at := range ts {
			if !at.Before(from) && at.Before(from.Add(window)) {
				n++
			}
		}
		return n
	}
	calls, refused := count(m.callsOf("bureau")), count(m.refusedOf("bureau"))
	served := float64(calls-refused) / window.Seconds()
	t.Logf("bureau: learned %d within %s; in the window %d calls, %d refused, %.1f served/s (capacity %.0f/s)",
		learned(), learnedAt.Round(time.Millisecond), calls, refused, served, capacity/latency.Seconds())
	if calls == 0 || float64(refused) > 0.1*float64(calls) {
		t.Errorf("want under 10%% of the calls refused once learned, got %d of %d", refused, calls)
	}
	// The kill costs the handover of its accounts (handoverBound) out of
	// the window; the bureau is otherwise kept near its capacity.
	if least := 0.5 * capacity / latency.Seconds(); served < least {
		t.Errorf("want the bureau kept busy, at least %.0f calls served/s, got %.1f", least, served)
	}
	if got := learned(); got < capacity/2 || got > capacity+1 {
		t.Errorf("want the learned concurrency near the capacity of %d, got %d", capacity, got)
	}
	h.waitAll(ids, state.Done, 3*time.Minute)
}

// An account that calls a limited target at an endpoint of its own
// (accounts.<a>.targets.<t>.url) has the target's limit to itself: the
// provider limits its endpoint apart. Over three dispatcher processes,
// one killed mid-run, the bureau (10/s) serves quiet at its full rate
// while noisy, with its own endpoint, is held to 10/s there too. Counted
// in one record, as before, quiet got half the bureau's rate (and, under
// "auto", noisy's own refusals cut the limit of both).
func TestAccountsOwnEndpointHasTheTargetLimitToItself(t *testing.T) {
	t.Parallel()
	const perAccount = 150
	m := newMeter(map[string]time.Duration{"bureau/quiet": 20 * time.Millisecond, "own/noisy": 20 * time.Millisecond})
	target := httptest.NewServer(m)
	t.Cleanup(target.Close)
	h := setup(t, `
streams: {ack_wait: 2s}
http: {addr: "127.0.0.1:0"}
auth: {disabled: true}
accounts:
  "*": {concurrency: 4, breaker: {failures: 100}}
  noisy: {targets: {bureau: {url: "${TARGET}/own/noisy"}}}
targets:
  bureau: {url: "${TARGET}/bureau/{{.Account}}", timeout: 5s, rate: 10/s}
kinds:
  order.create: {target: bureau, entity: order_id, attempts: 20, backoff: {initial: 1s, multiplier: 1, jitter: 0}}
`, provider.Faults{})
	procs := startReplicas(t, h, 3, target.URL)
	var ids []string
	for _, a := range []string{"quiet", "noisy"} {
		ids = append(ids, h.Submit(a, "order.create", keys(a, perAccount), orderPayload)...)
	}
	natstest.Eventually(t, servicetest.WaitFor, func() bool { return len(m.callsOf("bureau")) > 0 && len(m.callsOf("own")) > 0 },
		"want both endpoints' first calls")
	start := time.Now()
	steady, window := 4*time.Second, 10*time.Second
	<-time.After(steady) // mid-run: the point of the kill, not a wait for an outcome
	procs[1].Kill(t)
	natstest.Eventually(t, window+5*time.Second, func() bool { return time.Since(start) > window }, "the measuring window")
	count := func(endpoint string, d time.Duration) int {
		n := 0
		for _, at := range m.callsOf(endpoint) {
			if !at.Before(start) && at.Before(start.Add(d)) {
				n++
			}
		}
		return n
	}
	for _, endpoint := range []string{"bureau", "own"} {
		before, all := count(endpoint, steady), count(endpoint, window)
		t.Logf("%s: %d calls in the %s before the kill, %d in %s", endpoint, before, steady, all, window)
		// Until the kill each has the 10/s to itself; after it, an
		// account of the killed replica waits to be taken over.
		if least := int(7.5 * steady.Seconds()); before < least {
			t.Errorf("%s: want the 10/s to itself, at least %d calls in %s, got %d", endpoint, least, steady, before)
		}
		if most := int(11 * window.Seconds()); all > most {
			t.Errorf("%s (10/s): want at most %d calls in %s, got %d", endpoint, most, window, all)
		}
	}
	h.waitAll(ids, state.Done, 2*time.Minute)
}

// An account's rate holds at the provider while its calls wait for their
// target's slots. hog holds the bureau's one slot with a 2s call while 10
// calls of paced (5/s) pass their permits; when the slot comes free, they
// go one after another, as fast as the bureau answers. No second may hold
// more than 6 of paced's calls (its rate + 1), over two dispatcher
// processes. Before, a call took its permit before it waited for the
// slot, and paced's calls went out 10 in a second.
func TestAccountRateHoldsWhileItsCallsWaitForTheTarget(t *testing.T) {
	t.Parallel()
	m := newMeter(map[string]time.Duration{"bureau/hog": 2 * time.Second, "bureau/paced": 10 * time.Millisecond})
	target := httptest.NewServer(m)
	t.Cleanup(target.Close)
	h := setup(t, `
streams: {ack_wait: 10s}
http: {addr: "127.0.0.1:0"}
auth: {disabled: true}
accounts:
  "*": {concurrency: 10}
  paced: {concurrency: 10, rate: 5/s}
targets:
  bureau: {url: "${TARGET}/bureau/{{.Account}}", timeout: 5s, concurrency: 1}
kinds:
  order.create: {target: bureau, entity: order_id}
`, provider.Faults{})
	startReplicas(t, h, 2, target.URL)

	hog := h.Submit("hog", "order.create", keys("hog", 1), orderPayload)
	natstest.Eventually(t, servicetest.WaitFor, func() bool { return m.inFlightOf("bureau/hog") == 1 }, "want hog's call holding the bureau's slot")
	paced := h.Submit("paced", "order.create", keys("paced", 10), orderPayload)
	h.waitAll(append(hog, paced...), state.Done, time.Minute)

	calls := m.callsOf("bureau/paced")
	slices.SortFunc(calls, func(a, b time.Time) int { return a.Compare(b) })
	if len(calls) != len(paced) {
		t.Fatalf("want one call per event of paced, got %d", len(calls))
	}
	busiest := busiestSecond(calls)
	hogDone := m.callsOf("bureau/hog")[0].Add(2 * time.Second)
	waited := 0
	for _, at := range calls {
		if !at.Before(hogDone) {
			waited++
		}
	}
	t.Logf("paced (5/s): %d calls, %d after hog's slot came free, at most %d in one second", len(calls), waited, busiest)
	if waited < 5 {
		t.Errorf("want most of paced's calls to have waited for hog's slot, %d did", waited)
	}
	if busiest > 6 {
		t.Errorf("paced (5/s): want at most 6 calls in any one second at the bureau, saw %d", busiest)
	}
}

// busiestSecond is the most of calls (sorted) in any one second.
func busiestSecond(calls []time.Time) int {
	most := 0
	for i := range calls {
		j, _ := slices.BinarySearchFunc(calls, calls[i].Add(time.Second), func(a, b time.Time) int { return a.Compare(b) })
		most = max(most, j-i)
	}
	return most
}

// A slow account's call holds no slot of a target every account shares
// while it waits for its account's pace. hog holds the bureau's one slot,
// which every account shares, for 6 s; meanwhile slow (12/m) has two
// calls waiting for it, both past their permits. When hog's call ends,
// slow's first call goes and its second may go 5 s later. fast's five
// events, submitted then, are all done within 2.5 s: slow's second call
// gives the slot back and waits for its time without it. Before, it took
// the slot and held it through its 5 s gap, and fast's events waited
// with it. slow's owner is then killed: the other replica takes slow
// over, and slow's calls stay 5 s apart across the takeover.
func TestSlowAccountHoldsNoSharedSlotThroughItsGap(t *testing.T) {
	t.Parallel()
	const interval = 5 * time.Second
	m := newMeter(map[string]time.Duration{"bureau/hog": 6 * time.Second, "bureau/slow": 10 * time.Millisecond, "bureau/fast": 10 * time.Millisecond})
	target := httptest.NewServer(m)
	t.Cleanup(target.Close)
	h := setup(t, `
streams: {ack_wait: 2s}
http: {addr: "127.0.0.1:0"}
auth: {disabled: true}
accounts:
  "*": {concurrency: 4}
  slow: {concurrency: 4, rate: 12/m}
targets:
  bureau: {url: "${TARGET}/bureau/{{.Account}}", timeout: 10s, concurrency: 1}
kinds:
  order.create: {target: bureau, entity: order_id}
`, provider.Faults{})
	procs := startReplicas(t, h, 2, target.URL)

	hog := h.Submit("hog", "order.create", keys("hog", 1), orderPayload)
	natstest.Eventually(t, servicetest.WaitFor, func() bool { return m.inFlightOf("bureau/hog") == 1 }, "want hog's call holding the bureau's slot")
	slow := h.Submit("slow", "order.create", keys("slow", 3), orderPayload)
	natstest.Eventually(t, 20*time.Second, func() bool { return len(m.callsOf("bureau/slow")) == 1 && m.inFlightOf("bureau/slow") == 0 },
		"want slow's first call made once hog's call ended")

	submitted := time.Now()
	fast := h.Submit("fast", "order.create", keys("fast", 5), orderPayload)
	h.WaitAll(fast, state.Done, 2*interval)
	if took := time.Since(submitted); took > interval/2 {
		t.Errorf("fast: want its events done within %s while slow waits for its pace, took %s", interval/2, took)
	}
	if n := len(m.callsOf("bureau/slow")); n != 1 {
		t.Errorf("want slow's second call still waiting for its pace when fast was done, slow made %d calls", n)
	}

	ownerOf(t, h, procs, "slow").Kill(t)
	h.waitAll(append(hog, slow...), state.Done, time.Minute)
	calls := m.callsOf("bureau/slow")
	slices.SortFunc(calls, func(a, b time.Time) int { return a.Compare(b) })
	if len(calls) != len(slow) {
		t.Fatalf("want one call per event of slow, got %d", len(calls))
	}
	for i := 1; i < len(calls); i++ {
		if gap := calls[i].Sub(calls[i-1]); gap < interval-100*time.Millisecond {
			t.Errorf("slow (12/m): calls %d and %d went %s apart, want %s", i, i+1, gap, interval)
		}
	}
}

// A call whose request cannot be made gives its target's token back: at
// 1/m, an event whose URL does not fit (its entity id, escaped and
// repeated, past the URL's 8 KiB) fails for good without reaching the
// target, and the next event's call goes at once, not a minute later
// behind a token nothing used.
func TestACallNotSentGivesItsTokenBack(t *testing.T) {
	t.Parallel()
	url := "${TARGET}/api/" + strings.Repeat("{{.EntityID}}", 12)
	yaml := `
accounts:
  "*": {concurrency: 1}
targets:
  erp: {url: "` + url + `", timeout: 5s, rate: 1/m}
kinds:
  order.create: {target: erp, entity: order_id, attempts: 1}
`
	h := setup(t, yaml, provider.Faults{})
	h.dispatcher("d1", nil)
	long := strings.Repeat("/", names.MaxKeyLen) // 3 bytes each once escaped
	bad := h.Submit("acme", "order.create", []string{"bad"}, func(string) string { return `{"order_id":"` + long + `"}` })
	dead := h.waitAll(bad, state.Dead, servicetest.WaitFor)[bad[0]]
	if e := dead.LastError; e == nil || !strings.Contains(e.Message, "expands to more than") {
		t.Fatalf("want the event whose URL does not fit dead for its URL, got %+v", e)
	}
	// Submitted once the first is dead: submitted together, it could be
	// claimed first, take the bucket's one token, and leave the first
	// waiting a minute for the next.
	good := h.Submit("acme", "order.create", []string{"good"}, orderPayload)
	h.waitAll(good, state.Done, 20*time.Second)
	if n := len(h.prov.Calls()); n != 1 {
		t.Fatalf("want one call at the target (the event whose URL fits), got %d", n)
	}
}
