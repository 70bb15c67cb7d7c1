package dispatcher_test

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/tenaz"
	"github.com/tenaz/tenaz/services/dispatcher"
)

// Found by make chaos: while nats-server is down, a dispatcher's
// in-progress signals for the message of a call in flight are lost; when
// the server comes back it finds the message past its AckWait and
// redelivers it, while the dispatcher is still calling the target for it. The copy reclaimed the event
// (a second run, a second call), the first run's outcome was then applied
// on top of the reclaim's, and the loser's schedule could replace the
// winner's (an event left retrying or polling with no next step). A copy
// of a message whose event has a run in flight in this dispatcher is now
// left alone: one run, one call, one outcome.
func TestRedeliveryAfterServerRestartDuringCall(t *testing.T) {
	t.Parallel()
	h := setup(t, yamlFor(4, "attempts: 3, backoff: {initial: 1s, multiplier: 1, jitter: 0}"),
		provider.Faults{Latency: 4500 * time.Millisecond}, provider.WithIdempotent())
	h.dispatcher("d1", nil)
	ids := h.submit([]string{"restart-1"}, orderPayload)
	h.waitArrivals(1, waitFor)
	restartServer(t, h)

	r := h.waitAll(ids, tenaz.StateDone, 30*time.Second)[ids[0]]
	wantHistory(t, r, state.Accept, state.Claim, state.Succeed)
	if calls := h.prov.CallsFor("restart-1"); len(calls) != 1 {
		t.Fatalf("want one call, got %s", describeCalls(calls))
	}
}

// The other half, when the copy reaches another replica: it takes the
// run over (a second call, absorbed by the Idempotency-Key), and the first
// run's outcome, when it comes, is only noted as late: before, it was
// applied on top of the takeover (here a retry, with its schedule, so the
// event ran a third time after the winner's success was ignored).
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
		r := h.record(id)
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
	}})
	ids := h.submit([]string{"over-1"}, orderPayload)
	h.waitArrivals(1, waitFor)
	h.dispatcher("d2", nil)

	r := h.waitAll(ids, tenaz.StateDone, 30*time.Second)[id]
	wantHistory(t, r, state.Accept, state.Claim, state.Reclaim, state.Note, state.Succeed)
	if n := r.History[3]; n.Actor != "dispatcher/d1" || !strings.Contains(n.Detail, "late outcome ignored: retry") {
		t.Fatalf("want d1's retry noted as late, got %+v", n)
	}
	if n := h.prov.Effects("over-1"); n != 1 {
		t.Fatalf("want the effect applied once, got %d", n)
	}
}

// restartServer stops the test's nats-server for longer than AckWait (1s)
// and starts it again on the same address and store.
func restartServer(t *testing.T, h *harness) {
	t.Helper()
	u, err := url.Parse(h.srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	h.srv.Stop()
	<-time.After(2 * time.Second) // the outage itself, not a wait for an outcome
	natstest.Start(t, natstest.StoreDir(h.srv.Dir), natstest.Listen(u.Host))
}
