package dispatcher_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/owner"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
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

// Two dispatchers and two accounts, 100 events each, a target that is not
// idempotent: each account is served by the one dispatcher that owns it,
// both dispatchers deliver, and every event is delivered exactly once.
func TestTwoDispatchersOwnAnAccountEach(t *testing.T) {
	t.Parallel()
	h := setup(t, yamlFor(8, "attempts: 3, backoff: {initial: 1s, multiplier: 1, jitter: 0}"), provider.Faults{})
	h.dispatcher("d1", nil)
	h.dispatcher("d2", nil)
	owned := map[string]string{} // owner → its account
	for i := 0; len(owned) < 2; i++ {
		a := fmt.Sprintf("shop%d", i)
		if o := owner.Assign([]string{"d1", "d2"}, a); owned[o] == "" {
			owned[o] = a
		}
	}
	var ids []string
	for _, a := range owned {
		ids = append(ids, h.Submit(a, "order.create", keys(a, 100), orderPayload)...)
	}
	recs := h.waitAll(ids, state.Done, 20*time.Second)

	if d := h.prov.DuplicateEffects(); len(d) > 0 {
		t.Fatalf("provider: want no effect applied twice, got %d keys applied more than once: %v", len(d), d)
	}
	for _, id := range ids {
		if n, calls := h.prov.Effects(id), h.prov.CallsFor(id); n != 1 || len(calls) != 1 {
			t.Fatalf("event %s: want one call and its effect applied once, got %d effects, calls %s", id, n, describeCalls(calls))
		}
	}
	for o, a := range owned {
		for _, r := range recs {
			if r.Account != a {
				continue
			}
			if r.Attempts != 1 {
				t.Fatalf("event %s: want attempts 1, got %d (%s)", r.ID, r.Attempts, servicetest.Actions(r))
			}
			if got := r.History[len(r.History)-1].Actor; got != "dispatcher/"+o {
				t.Fatalf("event %s of %s: want it delivered by its account's owner %s, got %s", r.ID, a, o, got)
			}
		}
	}
}

// SIGTERM-style drain: with 20 calls in flight (and more events queued
// than the consumer hands one replica), Stop under the 20s of the default
// stop_timeout returns once the calls in flight, and those of the messages
// it had taken, have finished and their outcomes are stored; nothing is
// left running or lost, and a new dispatcher finishes the rest.
func TestStopDrainsInFlight(t *testing.T) {
	t.Parallel()
	h := setup(t, yamlFor(20, "attempts: 3, backoff: {initial: 1s, multiplier: 1, jitter: 0}"), provider.Faults{Latency: 300 * time.Millisecond})
	d1 := h.dispatcher("d1", nil)
	ks := keys("drain", 60)
	ids := h.Submit("acme", "order.create", ks, orderPayload)
	h.waitArrivals(20, servicetest.WaitFor)

	ctx, cancel := context.WithTimeout(context.Background(), config.DefaultStopTimeout.D())
	defer cancel()
	start := time.Now()
	if err := d1.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	took := time.Since(start)
	if ctx.Err() != nil {
		t.Fatalf("Stop: want it to finish the in-flight calls within its deadline, it took %s", took)
	}
	// Records as Stop left them (nothing runs now to change them), then
	// the calls the provider received, once it has logged every answer.
	after := make([]state.Record, len(ids))
	for i, id := range ids {
		after[i] = h.Record(id)
	}
	h.quiesce()
	called := 0
	for i, id := range ids {
		r := after[i]
		if r.Status == state.Running {
			t.Fatalf("after Stop: event %s is still running (%s): its outcome was not stored", id, servicetest.Actions(r))
		}
		if n := len(h.calls(ks[i])); n > 0 {
			called++
			if r.Status != state.Done {
				t.Fatalf("after Stop: event %s was delivered (%d calls) but is %s", id, n, r.Status)
			}
		}
	}
	t.Logf("Stop took %s; %d of %d events were delivered before it returned", took, called, len(ids))
	if called < 20 {
		t.Fatalf("want at least the 20 in-flight events delivered before Stop returned, got %d", called)
	}

	h.dispatcher("d2", nil)
	recs := h.waitAll(ids, state.Done, servicetest.WaitFor)
	checkExactlyOnce(t, h, ks, ids, recs)
	if n := h.prov.CallCount(); n != len(ids) {
		t.Fatalf("provider: want %d calls in all, got %d", len(ids), n)
	}
}

// A stop never starts a call that its deadline could cut: with concurrency
// 1 and a 3s call in flight, the message taken behind it is not called by
// a Stop due in 5s (its target's timeout is 4s, and a call must end
// config.StopMargin before the deadline). Left unacked, with its claim
// given back, it is called once by the next dispatcher, at its first
// attempt. Called at 3s, it would have been cut at 5s and
// made again.
func TestStopStartsNoCallItsDeadlineCouldCut(t *testing.T) {
	t.Parallel()
	yaml := strings.Replace(yamlFor(1, "attempts: 3, backoff: {initial: 1s, multiplier: 1, jitter: 0}"), "timeout: 5s", "timeout: 4s", 1)
	h := setup(t, yaml, provider.Faults{Latency: 3 * time.Second})
	d1 := h.dispatcher("d1", nil)
	ks := keys("cut", 2)
	ids := h.Submit("acme", "order.create", ks, orderPayload)
	h.waitArrivals(1, servicetest.WaitFor)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := d1.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if ctx.Err() != nil {
		t.Fatal("Stop: want it to return once the call in flight ended, it ran to its deadline")
	}
	h.quiesce()
	for _, c := range h.prov.Calls() {
		if c.Status == provider.StatusClientClosed {
			t.Fatalf("a call was cut by the stop deadline: %+v", c)
		}
	}
	if n := h.prov.CallCount(); n != 1 {
		t.Fatalf("want only the call in flight made by the stopping dispatcher, got %d calls", n)
	}

	h.dispatcher("d2", nil)
	h.waitAll(ids, state.Done, servicetest.WaitFor)
	h.quiesce()
	byKey := map[string]int{}
	for _, c := range h.prov.Calls() {
		byKey[c.IdempotencyKey]++
	}
	if len(byKey) != len(ids) || h.prov.CallCount() != len(ids) || len(h.prov.DuplicateEffects()) != 0 {
		t.Fatalf("want each event called once, got %s", describeCalls(h.prov.Calls()))
	}
	wantOneAttemptEach(t, h, ids)
}

// A stop never starts a call its account's pace held past the time the
// stop leaves: at 2/m, once the account's first call went, the runs a
// dispatcher claimed wait 30 s and more for their permits. Stop, due in 8 s (a call must end config.StopMargin, 5 s,
// before it, and the target's timeout is 1 s), gives their claims back
// uncalled once no call could end in time, and returns. Before, the
// pace's wait ignored the stop: Stop ran to its deadline, and a permit
// that came in time would have let a call start that the deadline cut.
func TestStopStartsNoCallItsPaceHolds(t *testing.T) {
	t.Parallel()
	yaml := strings.Replace(yamlFor(4, "attempts: 3"), `{concurrency: 4,`, `{concurrency: 4, rate: 2/m,`, 1)
	yaml = strings.Replace(yaml, "timeout: 5s", "timeout: 1s", 1)
	h := setup(t, yaml, provider.Faults{})
	d1 := h.dispatcher("d1", nil)
	first := h.Submit("acme", "order.create", keys("first", 1), orderPayload)
	h.waitAll(first, state.Done, servicetest.WaitFor)
	ids := h.Submit("acme", "order.create", keys("paced", 3), orderPayload)
	running := func() int {
		n := 0
		for _, id := range ids {
			if r, ok := h.Lookup(id); ok && r.Status == state.Running {
				n++
			}
		}
		return n
	}
	natstest.Eventually(t, servicetest.WaitFor, func() bool { return running() == len(ids) }, "want the runs claimed, waiting for the account's pace; %v",
		natstest.Lazy(func() any {
			var st []string
			for _, id := range ids {
				r, _ := h.Lookup(id)
				st = append(st, string(r.Status))
			}
			return st
		}))

	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	if err := d1.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if ctx.Err() != nil {
		t.Fatal("Stop: want it to return once no call could end in time, it ran to its deadline")
	}
	if n := h.prov.CallCount(); n != 1 {
		t.Fatalf("want no call made by the stopping dispatcher but the account's first, got %d", n)
	}
	for _, id := range ids {
		if r := h.Record(id); r.Status == state.Running || r.Attempts != 0 {
			t.Errorf("event %s after Stop: want its claim given back (not running, no attempt), got %s with %d attempts (%s)", id, r.Status, r.Attempts, servicetest.Actions(r))
		}
	}
}

// wantOneAttemptEach fails unless each of ids counts one attempt: the
// claim of a call that a stop did not make was given back.
func wantOneAttemptEach(t *testing.T, h *harness, ids []string) {
	t.Helper()
	for _, id := range ids {
		if r := h.Record(id); r.Attempts != 1 {
			t.Errorf("event %s: called once, want 1 attempt, got %d (%s)", id, r.Attempts, servicetest.Actions(r))
		}
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
	ids := h.Submit("acme", "order.create", ks, orderPayload)
	recs := h.waitAll(ids, state.Done, 40*time.Second)

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

// A replica takes up many new accounts at once (more than it starts at a
// time), and one stopped while their starts are still queued or under
// way gives every lease back: the next replica serves them all at once,
// and every event is delivered.
func TestManyNewAccountsAndAStopWhileTheyStart(t *testing.T) {
	t.Parallel()
	h := setup(t, yamlFor(2, "attempts: 3, backoff: {initial: 1s, multiplier: 1, jitter: 0}"), provider.Faults{})
	const n = 120
	d1 := h.dispatcher("d1", nil)
	var ids []string
	for i := range n {
		a := fmt.Sprintf("new%03d", i)
		ids = append(ids, h.Submit(a, "order.create", keys(a, 1), orderPayload)...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := d1.Stop(ctx); err != nil {
		t.Fatalf("d1 Stop: %v", err)
	}
	owners, err := h.JS.KeyValue(ctx, h.Subj.Bucket(names.BucketOwners))
	if err != nil {
		t.Fatal(err)
	}
	held := 0
	if l, err := owners.ListKeysFiltered(ctx, "a.>"); err == nil {
		for k := range l.Keys() {
			if e, err := owners.Get(ctx, k); err == nil && string(e.Value()) == "d1" {
				held++
			}
		}
	} else if !errors.Is(err, jetstream.ErrNoKeysFound) {
		t.Fatal(err)
	}
	if held != 0 {
		t.Fatalf("want every lease given back once d1 stopped, %d still name d1", held)
	}

	h.dispatcher("d2", nil)
	recs := h.waitAll(ids, state.Done, 60*time.Second)
	for _, id := range ids {
		if n := h.prov.Effects(id); n != 1 {
			t.Fatalf("event %s: want its effect applied once, got %d (%s)", id, n, servicetest.Actions(recs[id]))
		}
	}
}
