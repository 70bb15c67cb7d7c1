package dispatcher_test

import (
	"errors"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/queue"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/services/dispatcher"
)

// While nats-server is down, a dispatcher's in-progress signals for the
// message of a call in flight are lost; when the server comes back it
// finds the message past its AckWait and redelivers it, while the
// dispatcher is still calling the target for it. A copy that reclaimed the
// event would make a second run and a second call, the first run's
// outcome would land on top of the reclaim's, and the loser's schedule
// could replace the winner's (an event left retrying or polling with no
// next step). So a copy of a message whose event has a run in flight in
// this dispatcher is left alone: one run, one call, one outcome
// (docs/chaos.md, bug 2).
func TestRedeliveryAfterServerRestartDuringCall(t *testing.T) {
	t.Parallel()
	h := setup(t, yamlFor(4, "attempts: 3, backoff: {initial: 1s, multiplier: 1, jitter: 0}"),
		provider.Faults{Latency: 4500 * time.Millisecond}, provider.WithIdempotent())
	h.dispatcher("d1", nil)
	ids := h.Submit("acme", "order.create", []string{"restart-1"}, orderPayload)
	h.waitArrivals(1, servicetest.WaitFor)
	restartServer(t, h)

	r := h.waitAll(ids, state.Done, 30*time.Second)[ids[0]]
	wantHistory(t, r, state.Accept, state.Claim, state.Succeed)
	if calls := h.calls("restart-1"); len(calls) != 1 {
		t.Fatalf("want one call, got %s", describeCalls(calls))
	}
}

// The other half, when the copy reaches another replica: it takes the
// run over (a second call, absorbed by the Idempotency-Key), and the first
// run's outcome, when it comes, is only noted as late: before, it was
// applied on top of the takeover (here a retry, with its schedule, so the
// event ran a third time after the winner's success was ignored). Another
// replica gets the copy only once it owns the account: d2 takes d1, which
// heartbeats too seldom for d2's taste, for dead while d1's call runs.
func TestTakenOverRunsOutcomeIsOnlyNoted(t *testing.T) {
	t.Parallel()
	// The first call fails (FailFirst), every call takes 1s.
	h := setup(t, yamlFor(4, "attempts: 3, backoff: {initial: 1s, multiplier: 1, jitter: 0}"),
		provider.Faults{FailFirst: 1, Latency: time.Second}, provider.WithIdempotent())
	id := event.ID("acme", "over-1")
	// d1's first run holds its outcome back until d2 has taken the run
	// over (its message, no longer kept in progress, comes back after
	// AckWait; d1 leaves the copies alone while its run is in flight).
	tookOver := func() bool {
		r := h.Record(id)
		for _, e := range r.History {
			if e.Action == state.Reclaim && e.Actor == "dispatcher/d2" {
				return true
			}
		}
		return false
	}
	h.dispatcher("d1", &dispatcher.Hooks{AfterCall: func(got string, attempt int) error {
		if got == id && attempt == 1 {
			natstest.Eventually(t, 20*time.Second, tookOver, "want d2 to take the run over")
		}
		return nil
	}}, seldomHeartbeat)
	ids := h.Submit("acme", "order.create", []string{"over-1"}, orderPayload)
	h.waitArrivals(1, servicetest.WaitFor)
	h.dispatcher("d2", nil, quickHeartbeat)

	r := h.waitAll(ids, state.Done, 30*time.Second)[id]
	wantHistory(t, r, state.Accept, state.Claim, state.Reclaim, state.Note, state.Succeed)
	if n := r.History[3]; n.Actor != "dispatcher/d1" || !strings.Contains(n.Detail, "late outcome ignored: retry") {
		t.Fatalf("want d1's retry noted as late, got %+v", n)
	}
	if n := h.effects("over-1"); n != 1 {
		t.Fatalf("want the effect applied once, got %d", n)
	}
}

// The run that took over holds the same message (a redelivery), so the
// first run's late outcome, acking it, would settle it for the new run
// too; if the new run then died before its outcome, nothing would bring
// the event back (left running until the reconciler's grace of an hour).
// The late outcome is only noted, and the message left to its new owner:
// here d2 dies after its call, the message comes back after AckWait, and
// the event ends (docs/chaos.md, bug 8).
func TestTakeoverThatDiesAfterALateOutcomeStillEnds(t *testing.T) {
	t.Parallel()
	h := setup(t, yamlFor(4, "attempts: 3, backoff: {initial: 1s, multiplier: 1, jitter: 0}"),
		provider.Faults{FailFirst: 1, Latency: time.Second}, provider.WithIdempotent())
	id := event.ID("acme", "over-2")
	has := func(action state.ActionName, actor string) func() bool {
		return func() bool {
			for _, e := range h.Record(id).History {
				if e.Action == action && e.Actor == actor {
					return true
				}
			}
			return false
		}
	}
	h.dispatcher("d1", &dispatcher.Hooks{AfterCall: func(got string, attempt int) error {
		if got == id && attempt == 1 {
			natstest.Eventually(t, 20*time.Second, has(state.Reclaim, "dispatcher/d2"), "want d2 to take the run over")
		}
		return nil
	}}, seldomHeartbeat)
	ids := h.Submit("acme", "order.create", []string{"over-2"}, orderPayload)
	h.waitArrivals(1, servicetest.WaitFor)
	var once sync.Once
	h.dispatcher("d2", &dispatcher.Hooks{AfterCall: func(got string, _ int) error {
		died := false
		once.Do(func() {
			natstest.Eventually(t, 20*time.Second, has(state.Note, "dispatcher/d1"), "want d1's late outcome noted")
			died = true
		})
		if died {
			return errors.New("d2 dies after its call") // the message stays unacked, as a crash leaves it
		}
		return nil
	}}, quickHeartbeat)

	r := h.waitAll(ids, state.Done, 30*time.Second)[id]
	wantHistory(t, r, state.Accept, state.Claim, state.Reclaim, state.Note, state.Reclaim, state.Succeed)
	if n := h.effects("over-2"); n != 1 {
		t.Fatalf("want the effect applied once, got %d", n)
	}
}

// seldomHeartbeat and quickHeartbeat make a replica that another takes for
// dead while it runs: d1 heartbeats every 10s, and d2, whose own beat is
// 100ms, takes a replica unheard for 300ms for dead and its accounts over.
func seldomHeartbeat(o *dispatcher.Options) { o.Heartbeat = 10 * time.Second }
func quickHeartbeat(o *dispatcher.Options)  { o.Heartbeat = 100 * time.Millisecond }

// restartServer stops the test's nats-server for longer than AckWait (1s)
// and starts it again on the same address and store.
func restartServer(t *testing.T, h *harness) {
	t.Helper()
	u, err := url.Parse(h.Srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	h.Srv.Stop()
	<-time.After(2 * time.Second) // the outage itself, not a wait for an outcome
	natstest.Start(t, natstest.StoreDir(h.Srv.Dir), natstest.Listen(u.Host))
	// Cleanups run last in, first out: without this the new server would
	// stop before the dispatchers, whose Stop then waits on every request.
	t.Cleanup(func() {
		for _, stop := range h.stops {
			stop()
		}
	})
}

// A lane's event is done, and nats-server goes down before its finisher
// wakes the next event. Had the message been acked already, the next one
// would wait for its parking schedule's safety net, five minutes; the lane
// advances before the ack, so a finisher that dies (or fails to wake)
// leaves its message to a redelivery that wakes the next (docs/chaos.md,
// bug 6).
func TestFinisherDyingBeforeTheWakeLeavesTheLaneMoving(t *testing.T) {
	t.Parallel()
	// Calls of 500ms: lane-2 parks while lane-1's call runs.
	h := setup(t, yamlFor(4, "attempts: 3, backoff: {initial: 1s, multiplier: 1, jitter: 0}"),
		provider.Faults{Latency: 500 * time.Millisecond}, provider.WithIdempotent())
	first := event.ID("acme", "lane-1")
	var once sync.Once
	h.dispatcher("d1", &dispatcher.Hooks{AfterStore: func(id string, st state.State) error {
		crash := false
		if id == first && st == state.Done {
			once.Do(func() { crash = true })
		}
		if crash {
			return errCrash
		}
		return nil
	}})
	// Two events of one lane, one after the other.
	var ids []string
	for _, k := range []string{"lane-1", "lane-2"} {
		m := nats.NewMsg("tenaz.intake.acme.order.create")
		m.Data = []byte(orderPayload(k))
		m.Header.Set(names.HeaderIdempotencyKey, k)
		m.Header.Set(names.HeaderOrderingKey, "order-9")
		if _, err := h.JS.PublishMsg(h.Ctx(), m); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, event.ID("acme", k))
	}
	recs := h.waitAll(ids, state.Done, 15*time.Second)
	if recs[ids[1]].After != first {
		t.Fatalf("want lane-2 behind lane-1, got after %q", recs[ids[1]].After)
	}
}

// The outcome of a run another replica had taken over stores its schedule
// (a retry) before its write loses, and it lands after the winner's timer
// on the event's schedule subject, replacing it: the event would be left
// polling (or awaiting its callback) with no timer. The dispatch message
// that schedule brings finds the event waiting for a timer that is not
// there and sets it again from the record (docs/chaos.md, bug 7).
func TestTimerReplacedByADispatchScheduleIsSetAgain(t *testing.T) {
	t.Parallel()
	yaml := `
streams: {ack_wait: 1s}
accounts:
  "*": {concurrency: 4, breaker: {failures: 100}}
targets:
  erp: {url: "${TARGET}/api/{{.Kind}}", timeout: 5s, callback_secret: "whsec_dGVuYXotdGVzdC1jYWxsYmFjay1zZWNyZXQ="}
kinds:
  order.create: {target: erp, entity: order_id, completion: callback, callback_sla: 1h}
`
	h := setup(t, yaml, provider.Faults{}, provider.WithIdempotent())
	h.dispatcher("d1", nil)
	ids := h.Submit("acme", "order.create", []string{"timer-1"}, orderPayload)
	rec := h.waitAll(ids, state.AwaitingCallback, servicetest.WaitFor)[ids[0]]
	timer := func() string { return h.scheduled(ids[0]).Get(names.HeaderTimer) }
	if timer() != queue.TimerDeadline {
		t.Fatalf("want the callback deadline on the event's schedule subject, got %q", timer())
	}
	// The loser's retry schedule replaces the deadline and fires.
	env, err := h.St.Envelope(rec)
	if err != nil {
		t.Fatal(err)
	}
	if err := queue.New(h.JS, h.Subj).ScheduleAt(h.Ctx(), env, time.Now(), ""); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, servicetest.WaitFor, func() bool { return timer() == queue.TimerDeadline },
		"want the deadline set again after the dispatch schedule fired")
	if r := h.Record(ids[0]); r.Status != state.AwaitingCallback {
		t.Fatalf("want the event still awaiting its callback, got %s", r.Status)
	}
}

// The outcome of a run another replica had taken over publishes its retry
// schedule after the winner's, replacing it, and the loser's retry is due
// sooner. It fires before the event is due; dropped as a stale message, it
// would leave the event retrying with no message, so the early message
// finds the event's schedule gone and sets it again from the record
// (docs/chaos.md, bug 10).
func TestRetryScheduleReplacedByAnEarlierOneIsSetAgain(t *testing.T) {
	t.Parallel()
	h := setup(t, yamlFor(4, "attempts: 3, backoff: {initial: 8s, multiplier: 1, jitter: 0}"),
		provider.Faults{FailFirst: 1}, provider.WithIdempotent())
	h.dispatcher("d1", nil)
	ids := h.Submit("acme", "order.create", []string{"early-1"}, orderPayload)
	rec := h.waitAll(ids, state.Retrying, servicetest.WaitFor)[ids[0]]
	if rec.NextRunAt == nil {
		t.Fatal("want a retrying event with its due time")
	}
	due := "@at " + rec.NextRunAt.UTC().Format(time.RFC3339)
	schedule := func() string { return h.scheduled(ids[0]).Get("Nats-Schedule") }
	if got := schedule(); got != due {
		t.Fatalf("want the retry on the event's schedule subject (%s), got %q", due, got)
	}
	// The loser's retry, due now, replaces it and fires.
	env, err := h.St.Envelope(rec)
	if err != nil {
		t.Fatal(err)
	}
	if err := queue.New(h.JS, h.Subj).ScheduleAt(h.Ctx(), env, time.Now(), ""); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, servicetest.WaitFor, func() bool { return schedule() == due && h.Record(ids[0]).Status == state.Retrying },
		"want the event's retry set again at its due time once the early one fired")
	r := h.waitAll(ids, state.Done, 30*time.Second)[ids[0]]
	wantHistory(t, r, state.Accept, state.Claim, state.Retry, state.Claim, state.Succeed)
	if n := h.effects("early-1"); n != 1 {
		t.Fatalf("want the effect applied once, got %d", n)
	}
}

// A message can wait in a lane behind slow calls for longer than AckWait
// (the account's concurrency all taken). Kept alive only from its own call
// on, it would be redelivered meanwhile and the other replica would take
// its run over: a second call to the target for one attempt. So a message
// is kept alive from the moment the lane takes it (docs/chaos.md,
// bug 10).
func TestMessageWaitingForASlotIsNotTakenOver(t *testing.T) {
	t.Parallel()
	// Two calls at a time, each longer than the AckWait (1s); the server
	// lets the account have four messages unacked (two per slot), so d1
	// takes four: two call, two wait a whole call for a slot.
	h := setup(t, yamlFor(2, "attempts: 3, backoff: {initial: 1s, multiplier: 1, jitter: 0}"),
		provider.Faults{Latency: 1500 * time.Millisecond}, provider.WithIdempotent())
	h.dispatcher("d1", nil)
	ks := keys("slot", 4)
	ids := h.Submit("acme", "order.create", ks, orderPayload)
	h.waitArrivals(2, servicetest.WaitFor)
	// d2 would get any message the server redelivers meanwhile.
	h.dispatcher("d2", nil)
	recs := h.waitAll(ids, state.Done, 30*time.Second)
	for _, id := range ids {
		if r := recs[id]; r.Attempts != 1 {
			t.Errorf("%s: want one attempt, got %s", id, servicetest.Actions(r))
		}
	}
	for _, k := range ks {
		h.mustCalls(k, 1)
	}
}

// After a nats-server restart the account's next events are delivered:
// the watch makes itself again and wakes the account's tail.
func TestAccountServedAgainAfterAServerRestart(t *testing.T) {
	t.Parallel()
	h := setup(t, yamlFor(4, "attempts: 3, backoff: {initial: 1s, multiplier: 1, jitter: 0}"), provider.Faults{})
	h.dispatcher("d1", nil)
	ids := h.Submit("acme", "order.create", keys("before", 3), orderPayload)
	h.waitAll(ids, state.Done, 30*time.Second)
	restartServer(t, h)
	ids = h.Submit("acme", "order.create", keys("after", 3), orderPayload)
	h.waitAll(ids, state.Done, 20*time.Second)
}

// The account's concurrency holds across a server restart while calls are
// in flight: the tail hands nothing out beyond its limit however its reads
// fail and resume. (The chaos suite once saw 9 calls of an account in
// flight at concurrency 8 right after a server restart, when a lost
// consumer's reader was replaced before its calls returned.)
func TestServerRestartKeepsTheAccountsConcurrency(t *testing.T) {
	t.Parallel()
	const call = 4500 * time.Millisecond // within the target's 5 s timeout
	h := setup(t, yamlFor(2, "attempts: 3, backoff: {initial: 1s, multiplier: 1, jitter: 0}"), provider.Faults{Latency: call})
	h.dispatcher("d1", nil)
	ids := h.Submit("acme", "order.create", keys("slow", 4), orderPayload)
	if err := h.prov.WaitCalls(h.Ctx(), 2); err != nil {
		t.Fatal(err)
	}
	first := h.prov.Calls()[1].At
	restartServer(t, h)
	h.waitAll(ids, state.Done, 40*time.Second)
	calls := h.prov.Calls()
	for _, c := range calls[2:] {
		if c.At.Before(first.Add(call - 500*time.Millisecond)) {
			t.Fatalf("a third call arrived at %s while the first two (from %s, %s each) were in flight: concurrency 2 exceeded", c.At.Format("15:04:05.000"), first.Format("15:04:05.000"), call)
		}
	}
}
