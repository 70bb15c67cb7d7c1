package dispatcher_test

import (
	"context"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/tenaz"
)

// checkExactlyOnce fails unless every key's effect was applied exactly
// once and, with no crash involved, each attempt made exactly one call.
func checkExactlyOnce(t *testing.T, h *harness, ks, ids []string, recs map[string]state.Record) {
	t.Helper()
	if d := h.prov.DuplicateEffects(); len(d) > 0 {
		t.Fatalf("provider: want no effect applied twice, got %d keys applied more than once: %v", len(d), d)
	}
	for i, k := range ks {
		if n := h.effects(k); n != 1 {
			t.Fatalf("provider: want the effect of %s applied once, got %d", k, n)
		}
		if r := recs[ids[i]]; len(h.calls(k)) != r.Attempts {
			t.Fatalf("event %s: want one call per attempt (%d), got %s", ids[i], r.Attempts, describeCalls(h.calls(k)))
		}
	}
}

// Two dispatchers on one account, 200 events, a target that is not
// idempotent: every event is delivered exactly once.
func TestTwoDispatchersNoDuplicates(t *testing.T) {
	t.Parallel()
	h := setup(t, yamlFor(8, "attempts: 3, backoff: {initial: 1s, multiplier: 1, jitter: 0}"), provider.Faults{})
	h.dispatcher("d1", nil)
	h.dispatcher("d2", nil)
	ks := keys("two", 200)
	ids := h.submit(ks, orderPayload)
	recs := h.waitAll(ids, tenaz.StateDone, 20*time.Second)

	checkExactlyOnce(t, h, ks, ids, recs)
	if n := h.prov.CallCount(); n != 200 {
		t.Fatalf("provider: want 200 calls, got %d", n)
	}
	by := map[string]int{}
	for _, r := range recs {
		if r.Attempts != 1 {
			t.Fatalf("event %s: want attempts 1, got %d (%s)", r.ID, r.Attempts, actions(r))
		}
		by[r.History[len(r.History)-1].Actor]++
	}
	if by["dispatcher/d1"] == 0 || by["dispatcher/d2"] == 0 || by["dispatcher/d1"]+by["dispatcher/d2"] != 200 {
		t.Fatalf("want both dispatchers to deliver (200 together), got %v", by)
	}
}

// SIGTERM-style drain: with 20 calls in flight (and more events queued
// than the consumer hands one replica), Stop under a 10s deadline returns
// once the calls in flight have finished and their outcomes are stored;
// nothing is left running or lost, and a new dispatcher finishes the rest.
func TestStopDrainsInFlight(t *testing.T) {
	t.Parallel()
	h := setup(t, yamlFor(20, "attempts: 3, backoff: {initial: 1s, multiplier: 1, jitter: 0}"), provider.Faults{Latency: 300 * time.Millisecond})
	d1 := h.dispatcher("d1", nil)
	ks := keys("drain", 60)
	ids := h.submit(ks, orderPayload)
	h.waitArrivals(20, waitFor)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	if err := d1.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	took := time.Since(start)
	if ctx.Err() != nil {
		t.Fatalf("Stop: want it to finish the in-flight calls within the 10s deadline, it took %s", took)
	}
	// Records as Stop left them (nothing runs now to change them), then
	// the calls the provider received, once it has logged every answer.
	after := make([]state.Record, len(ids))
	for i, id := range ids {
		after[i] = h.record(id)
	}
	h.quiesce()
	called := 0
	for i, id := range ids {
		r := after[i]
		if r.Status == tenaz.StateRunning {
			t.Fatalf("after Stop: event %s is still running (%s): its outcome was not stored", id, actions(r))
		}
		if n := len(h.calls(ks[i])); n > 0 {
			called++
			if r.Status != tenaz.StateDone {
				t.Fatalf("after Stop: event %s was delivered (%d calls) but is %s", id, n, r.Status)
			}
		}
	}
	t.Logf("Stop took %s; %d of %d events were delivered before it returned", took, called, len(ids))
	if called < 20 {
		t.Fatalf("want at least the 20 in-flight events delivered before Stop returned, got %d", called)
	}

	h.dispatcher("d2", nil)
	recs := h.waitAll(ids, tenaz.StateDone, waitFor)
	checkExactlyOnce(t, h, ks, ids, recs)
	if n := h.prov.CallCount(); n != len(ids) {
		t.Fatalf("provider: want %d calls in all, got %d", len(ids), n)
	}
}

// Three dispatchers race for 300 events on a target that answers 20% of
// calls 503 and is not idempotent: all are done, none is applied twice.
func TestClaimRaceAtScale(t *testing.T) {
	t.Parallel()
	h := setup(t, yamlFor(8, "attempts: 10, backoff: {initial: 1s, max: 2s, multiplier: 1, jitter: 0.2}"),
		provider.Faults{ErrorRate: 0.2}, provider.WithSeed(9))
	for _, name := range []string{"d1", "d2", "d3"} {
		h.dispatcher(name, nil)
	}
	ks := keys("race", 300)
	ids := h.submit(ks, orderPayload)
	recs := h.waitAll(ids, tenaz.StateDone, 40*time.Second)

	checkExactlyOnce(t, h, ks, ids, recs)
	attempts, retried := 0, 0
	for _, r := range recs {
		attempts += r.Attempts
		if r.Attempts > 1 {
			retried++
		}
	}
	if n := h.prov.CallCount(); n != attempts {
		t.Fatalf("provider: want one call per attempt (%d), got %d", attempts, n)
	}
	if retried == 0 {
		t.Fatalf("want some events retried (20%% of calls fail), got none")
	}
	t.Logf("300 events, %d calls, %d events retried", attempts, retried)
}
