package dispatcher_test

import (
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/state"
)

// An account's rate limit spaces its calls, and only its own: another
// account's events are done before the limited account is halfway.
func TestAccountRateLimitIsolated(t *testing.T) {
	t.Parallel()
	yaml := `
accounts:
  "*": {concurrency: 8}
  slow: {rate: 10/s}
targets:
  erp: {url: "${TARGET}/api/{{.Kind}}", timeout: 5s}
kinds:
  order.create: {target: erp, entity: order_id}
`
	h := setup(t, yaml, provider.Faults{})
	h.dispatcher("d1", nil)
	submit := func(account string, n int) []string {
		var ids []string
		for i := range n {
			key := fmt.Sprintf("%s-%d", account, i)
			m := nats.NewMsg("tenaz.intake." + account + ".order.create")
			m.Data = []byte(fmt.Sprintf(`{"order_id":%q}`, key))
			m.Header.Set(names.HeaderIdempotencyKey, key)
			if _, err := h.JS.PublishMsg(h.Ctx(), m, jetstream.WithExpectStream(names.StreamIntake)); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, event.ID(account, key))
		}
		return ids
	}
	start := time.Now()
	slow := submit("slow", 20)
	fast := submit("fast", 20)
	h.waitAll(fast, state.Done, 20*time.Second)
	fastDone := time.Since(start)
	h.waitAll(slow, state.Done, 20*time.Second)

	var at []time.Time
	for _, c := range h.prov.Calls() {
		if slices.Contains(slow, c.EventID) {
			at = append(at, c.At)
		}
	}
	sort.Slice(at, func(i, j int) bool { return at[i].Before(at[j]) })
	if len(at) != 20 {
		t.Fatalf("want 20 calls for the limited account, got %d", len(at))
	}
	if span := at[len(at)-1].Sub(at[0]); span < 1700*time.Millisecond {
		t.Fatalf("20 calls at 10/s must span at least ~1.9s; they spanned %s", span)
	}
	if slowSpan := at[len(at)-1].Sub(start); fastDone > slowSpan/2 {
		t.Fatalf("the unlimited account took %s, more than half of the limited one's %s: it was slowed down", fastDone, slowSpan)
	}
}

// A change of an account's rate holds for the calls already waiting for a
// permit, not only for those that come after it: raised 5 → 20/s, then
// lowered 20 → 5/s by a reload, with 8 calls waiting each time, no second
// that starts after the reload holds more than the new rate + 1 calls.
// Before, the waiters kept the old limiter's permits and went out beside
// the new one's calls: 23 in a second at 20/s, 9 at 5/s.
func TestRateChangeHoldsForTheCallsWaiting(t *testing.T) {
	t.Parallel()
	const yaml = `
auth: {disabled: true}
accounts:
  acme: {concurrency: 8, rate: %s}
targets:
  erp: {url: "${TARGET}/api/{{.Kind}}", timeout: 5s}
kinds:
  order.create: {target: erp}
`
	h := setup(t, fmt.Sprintf(yaml, "5/s"), provider.Faults{Latency: 20 * time.Millisecond})
	set := h.reloadable("d1", yaml, "5/s")
	for _, key := range keys("o", 80) {
		m := nats.NewMsg("tenaz.intake.acme.order.create")
		m.Data = []byte(orderPayload(key))
		m.Header.Set(names.HeaderIdempotencyKey, key)
		if _, err := h.JS.PublishMsg(h.Ctx(), m, jetstream.WithExpectStream(names.StreamIntake)); err != nil {
			t.Fatal(err)
		}
	}
	// reload puts rate in force once the calls have passed n, and returns
	// when it did.
	reload := func(rate string, n int) time.Time {
		h.waitArrivals(n, 30*time.Second)
		set(rate)
		return time.Now()
	}
	raised := reload("20/s", 6)
	lowered := reload("5/s", h.arrivals()+40)
	h.waitArrivals(h.arrivals()+10, 30*time.Second)

	var at []time.Time
	for _, c := range h.prov.Calls() {
		at = append(at, c.At)
	}
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	// most is the most calls in one second starting from a call at or
	// after from and ending before until.
	most := func(from, until time.Time) (n int, when time.Time) {
		for i, a := range at {
			if a.Before(from) || !a.Before(until) {
				continue
			}
			k := 0
			for _, b := range at[i:] {
				if b.Sub(a) >= time.Second || !b.Before(until) {
					break
				}
				k++
			}
			if k > n {
				n, when = k, a
			}
		}
		return n, when
	}
	if n, when := most(raised, lowered); n > 21 {
		t.Errorf("at 20/s: %d calls in the second from %s after the change, want at most 21", n, when.Sub(raised))
	}
	if n, when := most(lowered, time.Now()); n > 6 {
		t.Errorf("at 5/s: %d calls in the second from %s after the change, want at most 6", n, when.Sub(lowered))
	}
}

// A reload of a target's provider-wide rate holds for the calls already
// waiting for its token: at 12/m, calls wait five seconds each; raised to
// 50/s, the ones waiting go at once. Before, the target's limit stayed as
// it was made until a restart.
func TestTargetRateChangeHoldsForTheCallsWaiting(t *testing.T) {
	t.Parallel()
	const yaml = `
auth: {disabled: true}
accounts:
  acme: {concurrency: 8}
targets:
  erp: {url: "${TARGET}/api/{{.Kind}}", timeout: 5s, rate: %s}
kinds:
  order.create: {target: erp}
`
	h := setup(t, fmt.Sprintf(yaml, "12/m"), provider.Faults{})
	set := h.reloadable("d1", yaml, "12/m")
	ids := h.Submit("acme", "order.create", keys("o", 8), orderPayload)
	h.waitArrivals(1, 30*time.Second)
	set("50/s")
	changed := time.Now()
	h.waitAll(ids, state.Done, 30*time.Second)
	if took := time.Since(changed); took > 2*time.Second {
		t.Fatalf("after the target's rate went from 12/m to 50/s: want the 7 waiting calls made at once, took %s", took)
	}
}
