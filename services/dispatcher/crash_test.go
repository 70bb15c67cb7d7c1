package dispatcher_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/outcome"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/services/dispatcher"
)

const crashKind = "attempts: 3, backoff: {initial: 1s, multiplier: 1, jitter: 0}"

// The dispatcher dies after claiming and before calling: the message is
// not acked, comes back after AckWait (1s), and the next run reclaims the
// event; the target is called once.
func TestCrashAfterClaim(t *testing.T) {
	t.Parallel()
	h := setup(t, yamlFor(8, crashKind), provider.Faults{})
	id := event.ID("acme", "crash-0")
	var mu sync.Mutex
	runs := 0
	h.dispatcher("d1", &dispatcher.Hooks{AfterClaim: failOnce(id, &runs, &mu)})
	ids := h.Submit("acme", "order.create", keys("crash", 3), orderPayload)
	recs := h.waitAll(ids, state.Done, servicetest.WaitFor)

	r := recs[id]
	wantHistory(t, r, state.Accept, state.Claim, state.Reclaim, state.Succeed)
	if rc := r.History[2]; rc.From != state.Running || rc.To != state.Running || rc.Attempt != 2 || rc.Actor != "dispatcher/d1" {
		t.Fatalf("reclaim entry: want {running → running, attempt 2, actor dispatcher/d1}, got %+v", rc)
	}
	if r.Attempts != 2 {
		t.Fatalf("want attempts 2 (the lost run and the reclaim), got %d", r.Attempts)
	}
	c := h.mustCalls("crash-0", 1)[0]
	if c.Attempt != 2 || h.effects("crash-0") != 1 {
		t.Fatalf("want one call (Tenaz-Attempt 2) applying the effect once, got %s, effects %d", describeCalls([]provider.Call{c}), h.effects("crash-0"))
	}
	for _, other := range []string{"crash-1", "crash-2"} {
		h.mustCalls(other, 1)
		wantHistory(t, recs[event.ID("acme", other)], state.Accept, state.Claim, state.Succeed)
	}
	mu.Lock()
	defer mu.Unlock()
	if runs != 2 {
		t.Fatalf("AfterClaim: want 2 runs for the event (the crash, the reclaim), got %d", runs)
	}
}

// The dispatcher dies after the target applied the effect and before the
// outcome is stored: the reclaim calls again with the same Idempotency-Key,
// and an idempotent target applies the effect once: done exactly once at
// the target.
func TestCrashAfterCall(t *testing.T) {
	t.Parallel()
	h := setup(t, yamlFor(8, crashKind), provider.Faults{}, provider.WithIdempotent())
	id := event.ID("acme", "call-1")
	var mu sync.Mutex
	runs := 0
	h.dispatcher("d1", &dispatcher.Hooks{AfterCall: failOnce(id, &runs, &mu)})
	ids := h.Submit("acme", "order.create", []string{"call-1"}, orderPayload)
	r := h.waitAll(ids, state.Done, servicetest.WaitFor)[id]

	wantHistory(t, r, state.Accept, state.Claim, state.Reclaim, state.Succeed)
	calls := h.mustCalls("call-1", 2)
	if calls[0].IdempotencyKey != id || calls[1].IdempotencyKey != id || !calls[0].Applied || !calls[1].Replayed {
		t.Fatalf("want two calls with the event's Idempotency-Key %s, the first applied, the second replayed, got %+v", id, calls)
	}
	if n := h.effects("call-1"); n != 1 {
		t.Fatalf("want the effect applied once at the target, got %d", n)
	}
}

// A real stop while a call hangs in the target: Stop with an expired
// context cuts the call short and leaves the message unacked; a second
// dispatcher reclaims it after AckWait and completes it, effect applied
// once.
func TestCrashStopDuringCall(t *testing.T) {
	t.Parallel()
	h := setup(t, yamlFor(8, crashKind), provider.Faults{Latency: 20 * time.Second}, provider.WithIdempotent())
	d1 := h.dispatcher("d1", nil)
	ids := h.Submit("acme", "order.create", []string{"stop-1"}, orderPayload)
	h.waitArrivals(1, servicetest.WaitFor)

	expired, cancel := context.WithCancel(context.Background())
	cancel()
	stopped := make(chan error, 1)
	start := time.Now()
	go func() { stopped <- d1.Stop(expired) }()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("Stop: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Stop with an expired context did not return within 5s while a call hung")
	}
	t.Logf("Stop returned after %s", time.Since(start))
	if r := h.Record(ids[0]); r.Status != state.Running {
		t.Fatalf("after the stop: want the event still running (its run lost), got %s (%s)", r.Status, servicetest.Actions(r))
	}

	// The arrival is counted before the provider reads its faults: clear
	// them only once the cut call is recorded, or it could answer at once.
	if err := h.prov.WaitCalls(h.WaitCtx(), 1); err != nil {
		t.Fatalf("the cut call was never recorded: %v", err)
	}
	h.prov.SetFaults(provider.Faults{})
	h.dispatcher("d2", nil)
	r := h.waitAll(ids, state.Done, servicetest.WaitFor)[ids[0]]
	wantHistory(t, r, state.Accept, state.Claim, state.Reclaim, state.Succeed)
	if r.History[2].Actor != "dispatcher/d2" || r.History[3].Actor != "dispatcher/d2" {
		t.Fatalf("want d2 to reclaim and complete, got %+v", r.History[2:])
	}
	calls := h.mustCalls("stop-1", 2)
	if calls[0].Status != provider.StatusClientClosed || calls[1].Status != 200 {
		t.Fatalf("want the cut call (client closed) then a 200, got %s", describeCalls(calls))
	}
	if n := h.effects("stop-1"); n != 1 {
		t.Fatalf("want the effect applied once, got %d", n)
	}
}

// A worker that dies during the call every time (a handler that kills
// its process, a payload that makes it run out of memory) never reaches
// the tail's count of deliveries: each new owner counts afresh. The
// record's attempts bound it: with attempts 2, the third owner's reclaim
// calls no more and the event ends dead, class crash, after two calls.
func TestRunsLostPastTheAttemptsEndTheEvent(t *testing.T) {
	t.Parallel()
	h := setup(t, yamlFor(8, "attempts: 2"), provider.Faults{Latency: 20 * time.Second})
	ids := h.Submit("acme", "order.create", []string{"lost-1"}, orderPayload)
	natstest.Eventually(t, servicetest.WaitFor, func() bool { _, _, err := h.St.Get(h.Ctx(), "acme", ids[0]); return err == nil }, "the event accepted")
	expired, cancel := context.WithCancel(context.Background())
	cancel()
	for i := 1; h.Record(ids[0]).Status != state.Dead; i++ {
		if i > 4 {
			r := h.Record(ids[0])
			t.Fatalf("after %d owners lost its run, want the event dead; got %s, attempts %d, %d calls (%s)", i-1, r.Status, r.Attempts, h.arrivals(), servicetest.Actions(r))
		}
		d := h.dispatcher(fmt.Sprintf("d%d", i), nil)
		natstest.Eventually(t, servicetest.WaitFor, func() bool { return h.arrivals() >= i || h.Record(ids[0]).Status == state.Dead },
			"owner %d to call or end the event", i)
		if err := d.Stop(expired); err != nil { // the call cut: its run lost
			t.Fatal(err)
		}
	}
	r := h.Record(ids[0])
	if h.arrivals() != 2 || r.LastError == nil || r.LastError.Class != string(outcome.ClassCrash) {
		t.Fatalf("want two calls, then dead with class crash; got %d calls, last error %+v", h.arrivals(), r.LastError)
	}
}

// A call slower than AckWait is still in progress, not lost: the message
// must not be redelivered (and the target called again) while it runs.
func TestSlowCallOutlivesAckWait(t *testing.T) {
	t.Parallel()
	h := setup(t, yamlFor(8, crashKind), provider.Faults{Latency: 2500 * time.Millisecond})
	h.dispatcher("d1", nil)
	ids := h.Submit("acme", "order.create", []string{"slow-1"}, orderPayload)
	r := h.waitAll(ids, state.Done, servicetest.WaitFor)[ids[0]]

	wantHistory(t, r, state.Accept, state.Claim, state.Succeed)
	h.mustCalls("slow-1", 1)
	if n := h.effects("slow-1"); n != 1 {
		t.Fatalf("want the effect applied once, got %d", n)
	}
}
