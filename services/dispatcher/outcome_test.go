package dispatcher_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/dead"
	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
)

// wantHistory fails unless r's history is exactly the actions given.
func wantHistory(t *testing.T, r state.Record, want ...state.ActionName) {
	t.Helper()
	ok := len(r.History) == len(want)
	for i := 0; ok && i < len(want); i++ {
		ok = r.History[i].Action == want[i]
	}
	if !ok {
		var w state.Record
		for _, a := range want {
			w.History = append(w.History, state.Entry{Action: a})
		}
		t.Fatalf("event %s: want history %s, got %s", r.ID, servicetest.Actions(w), servicetest.Actions(r))
	}
}

// 20 healthy deliveries: each done on attempt 1, its effect applied once,
// its history accept → claim → succeed by this dispatcher, and the call
// carrying the payload and tenaz's headers.
func TestDeliverSuccess(t *testing.T) {
	t.Parallel()
	h := setup(t, yamlFor(8, "attempts: 3, backoff: {initial: 1s, multiplier: 1, jitter: 0}"), provider.Faults{})
	h.dispatcher("d1", nil)
	ks := keys("ok", 20)
	ids := h.Submit("acme", "order.create", ks, orderPayload)
	recs := h.waitAll(ids, state.Done, servicetest.WaitFor)

	for i, id := range ids {
		r := recs[id]
		if r.Attempts != 1 {
			t.Fatalf("event %s: want attempts 1, got %d", id, r.Attempts)
		}
		wantHistory(t, r, state.Accept, state.Claim, state.Succeed)
		claim, succeed := r.History[1], r.History[2]
		if claim.From != state.Pending || claim.To != state.Running || claim.Actor != "dispatcher/d1" || claim.Attempt != 1 {
			t.Fatalf("event %s: want claim {pending → running, actor dispatcher/d1, attempt 1}, got %+v", id, claim)
		}
		if succeed.From != state.Running || succeed.To != state.Done || succeed.Actor != "dispatcher/d1" {
			t.Fatalf("event %s: want succeed {running → done, actor dispatcher/d1}, got %+v", id, succeed)
		}
		if n := h.effects(ks[i]); n != 1 {
			t.Fatalf("provider: want the effect of %s applied once, got %d", ks[i], n)
		}
		c := h.mustCalls(ks[i], 1)[0]
		if c.Method != http.MethodPost || c.Path != "/api/order.create" || c.EventID != id || c.Attempt != 1 ||
			compact(t, c.Body) != compact(t, []byte(orderPayload(ks[i]))) {
			t.Fatalf("call for %s: want POST /api/order.create, Tenaz-Event-Id %s, Tenaz-Attempt 1, body %s; got %s %s, %s, %d, %s",
				ks[i], id, orderPayload(ks[i]), c.Method, c.Path, c.EventID, c.Attempt, c.Body)
		}
		if len(r.Result) == 0 {
			t.Fatalf("event %s: want the target's answer kept as result, got none", id)
		}
	}
	if n := h.prov.CallCount(); n != 20 {
		t.Fatalf("provider: want 20 calls, got %d", n)
	}
}

// Two 503s, then success: done on attempt 3, three calls at least the
// backoff (1s) apart, and two retry entries recording the 503.
func TestDeliverTransientThenSuccess(t *testing.T) {
	t.Parallel()
	h := setup(t, yamlFor(8, "attempts: 5, backoff: {initial: 1s, max: 5s, multiplier: 1, jitter: 0}"), provider.Faults{FailFirst: 2})
	h.dispatcher("d1", nil)
	ids := h.Submit("acme", "order.create", []string{"tr-1"}, orderPayload)
	r := h.waitAll(ids, state.Done, 15*time.Second)[ids[0]]

	if r.Attempts != 3 {
		t.Fatalf("want done on attempt 3, got attempts %d (%s)", r.Attempts, servicetest.Actions(r))
	}
	wantHistory(t, r, state.Accept, state.Claim, state.Retry, state.Claim, state.Retry, state.Claim, state.Succeed)
	for _, i := range []int{2, 4} {
		e := r.History[i]
		if e.HTTPStatus != http.StatusServiceUnavailable || e.From != state.Running || e.To != state.Retrying {
			t.Fatalf("history[%d]: want retry {running → retrying, http_status 503}, got %+v", i, e)
		}
	}
	calls := h.mustCalls("tr-1", 3)
	for i, want := range []int{503, 503, 200} {
		if calls[i].Status != want || calls[i].Attempt != i+1 {
			t.Fatalf("call %d: want status %d with Tenaz-Attempt %d, got %s", i+1, want, i+1, describeCalls(calls))
		}
	}
	// The next attempt is due at (answer time + backoff) rounded up to the
	// second, and the server never fires a schedule early: so the gap
	// between two calls' arrivals is at least the backoff.
	for i := 1; i < len(calls); i++ {
		if gap := calls[i].At.Sub(calls[i-1].At); gap < time.Second {
			t.Fatalf("call %d came %s after call %d: want at least the 1s backoff (%s)", i+1, gap, i, describeCalls(calls))
		}
	}
}

// A business rejection (422) is permanent: dead after one call, the
// target's error kept, a DEAD entry with payload and record, and an
// advisory for operators.
func TestDeliverPermanentGoesDead(t *testing.T) {
	t.Parallel()
	h := setup(t, yamlFor(8, "attempts: 5, backoff: {initial: 1s, multiplier: 1, jitter: 0}"), provider.Faults{})
	adv, err := h.NC.SubscribeSync("tenaz.advisory.dead.acme.order.create")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	h.dispatcher("d1", nil)
	payload := `{"order_id":"p-1","reject":true}`
	ids := h.Submit("acme", "order.create", []string{"perm-1"}, func(string) string { return payload })
	id := ids[0]
	r := h.waitAll(ids, state.Dead, servicetest.WaitFor)[id]

	h.mustCalls("perm-1", 1)
	if r.Attempts != 1 || r.LastError == nil || r.LastError.Class != "permanent" || r.LastError.HTTPStatus != 422 || r.LastError.Message == "" {
		t.Fatalf("want attempts 1 and last_error {class permanent, http_status 422, message}, got attempts %d, last_error %+v", r.Attempts, r.LastError)
	}
	wantHistory(t, r, state.Accept, state.Claim, state.Fail)

	ds, err := h.JS.Stream(h.Ctx(), names.StreamDead)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := ds.GetLastMsgForSubject(h.Ctx(), "tenaz.dead.acme.order.create")
	if err != nil {
		t.Fatalf("DEAD: want an entry on tenaz.dead.acme.order.create, got %v", err)
	}
	var e dead.Entry
	if err := json.Unmarshal(raw.Data, &e); err != nil {
		t.Fatalf("DEAD entry: %v", err)
	}
	if e.ID != id || e.Reason != dead.ReasonPermanent || e.Class != "permanent" || e.Status != 422 || e.Event == nil || e.Record == nil {
		t.Fatalf("DEAD entry: want {id %s, reason permanent, class permanent, http_status 422, event, record}, got %s", id, raw.Data)
	}
	if compact(t, e.Event.Payload) != compact(t, []byte(payload)) {
		t.Fatalf("DEAD entry: want the payload %s, got %s", payload, e.Event.Payload)
	}
	if e.Record.Status != state.Dead || len(e.Record.History) != 3 {
		t.Fatalf("DEAD entry: want the dead record with its 3 history entries, got status %s, history %s", e.Record.Status, servicetest.Actions(*e.Record))
	}

	m, err := adv.NextMsg(servicetest.WaitFor)
	if err != nil {
		t.Fatalf("advisory on tenaz.advisory.dead.acme.order.create: want one, got %v", err)
	}
	var a dead.Advisory
	if err := json.Unmarshal(m.Data, &a); err != nil {
		t.Fatalf("advisory: %v", err)
	}
	if a.ID != id || a.Account != "acme" || a.Kind != "order.create" || a.Reason != dead.ReasonPermanent || a.Class != "permanent" || a.HTTPStatus != 422 || a.Attempts != 1 {
		t.Fatalf("advisory: want {id %s, acme, order.create, reason permanent, class permanent, 422, attempts 1}, got %s", id, m.Data)
	}
}

// A target that stays down uses up the attempts (2): dead as transient
// after exactly 2 calls.
func TestDeliverAttemptsExhausted(t *testing.T) {
	t.Parallel()
	h := setup(t, yamlFor(8, "attempts: 2, backoff: {initial: 1s, multiplier: 1, jitter: 0}"), provider.Faults{Down: true})
	h.dispatcher("d1", nil)
	ids := h.Submit("acme", "order.create", []string{"down-1"}, orderPayload)
	r := h.waitAll(ids, state.Dead, servicetest.WaitFor)[ids[0]]

	if r.Attempts != 2 || r.LastError == nil || r.LastError.Class != "transient" || r.LastError.HTTPStatus != 503 {
		t.Fatalf("want attempts 2 and last_error {class transient, http_status 503}, got attempts %d, last_error %+v", r.Attempts, r.LastError)
	}
	wantHistory(t, r, state.Accept, state.Claim, state.Retry, state.Claim, state.Fail)
	calls := h.mustCalls("down-1", 2)
	if gap := calls[1].At.Sub(calls[0].At); gap < time.Second {
		t.Fatalf("want the second call at least the 1s backoff after the first, got %s", gap)
	}
	ds, err := h.JS.Stream(h.Ctx(), names.StreamDead)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := ds.GetLastMsgForSubject(h.Ctx(), "tenaz.dead.acme.order.create")
	if err != nil {
		t.Fatalf("DEAD: want an entry, got %v", err)
	}
	var e dead.Entry
	if err := json.Unmarshal(raw.Data, &e); err != nil || e.ID != ids[0] || e.Reason != dead.ReasonExhausted || e.Class != "transient" {
		t.Fatalf("DEAD entry: want {id %s, reason %s, class transient}, got %s (%v)", ids[0], dead.ReasonExhausted, raw.Data, err)
	}
}

// A 429 with Retry-After: 2 holds the next attempt back at least 2s even
// though the backoff (1s) is shorter.
func TestDeliverHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	h := setup(t, yamlFor(8, "attempts: 3, backoff: {initial: 1s, multiplier: 1, jitter: 0}"),
		provider.Faults{RateLimitRate: 1, RetryAfter: 2 * time.Second})
	h.dispatcher("d1", nil)
	ids := h.Submit("acme", "order.create", []string{"ra-1"}, orderPayload)
	if err := h.prov.WaitCalls(h.WaitCtx(), 1); err != nil {
		t.Fatal(err)
	}
	h.prov.SetFaults(provider.Faults{})
	r := h.waitAll(ids, state.Done, servicetest.WaitFor)[ids[0]]

	calls := h.mustCalls("ra-1", 2)
	if calls[0].Status != http.StatusTooManyRequests || calls[1].Status != http.StatusOK {
		t.Fatalf("want a 429 then a 200, got %s", describeCalls(calls))
	}
	// Mechanism: the retry is due at (time of the 429 + 2s) rounded up to
	// the second, and the server never fires a schedule early, so the gap
	// is ≥ 2s. The 100ms margin covers only the two clocks involved (the
	// wall-clock schedule versus the monotonic arrival times).
	if gap := calls[1].At.Sub(calls[0].At); gap < 1900*time.Millisecond {
		t.Fatalf("want the second call ≥ 2s (Retry-After) after the first, got %s", gap)
	}
	wantHistory(t, r, state.Accept, state.Claim, state.Retry, state.Claim, state.Succeed)
	if e := r.History[2]; e.HTTPStatus != http.StatusTooManyRequests {
		t.Fatalf("retry entry: want http_status 429, got %+v", e)
	}
}

// compact re-encodes JSON without insignificant whitespace.
func compact(t *testing.T, b []byte) string {
	t.Helper()
	c, err := event.Canonical(b)
	if err != nil {
		t.Fatalf("not JSON: %q: %v", b, err)
	}
	return string(c)
}
