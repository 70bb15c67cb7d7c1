package ingest_test

import (
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/services/ingest"
)

// An ingest dies holding a lane's first submission (taken from INTAKE, not
// yet accepted); the next ingest gets the lane's later submissions at
// once, while the first comes back only after the consumer's AckWait
// (30s). Appended then, it would join the lane at its tail, out of
// submission order, so an ordered submission first accepts the older
// submissions of its account still waiting in INTAKE (docs/chaos.md,
// bug 3).
func TestOrderedSubmissionHeldByADeadIngestKeepsItsPlace(t *testing.T) {
	t.Parallel()
	h := setup(t, baseYAML)
	servicetest.Stop(t, h.ing)
	lane := []string{"Tenaz-Ordering-Key", "lane-1"}
	h.publishIntake(intakeOrderCreate, []byte(`{"order_id":"o-1"}`), append([]string{"Idempotency-Key", "first"}, lane...)...)
	// The dead ingest: it took the first submission and never settled it.
	cons, err := h.JS.Consumer(h.Ctx(), names.StreamIntake, "ingest")
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(servicetest.WaitFor))
	if err != nil {
		t.Fatal(err)
	}
	for range batch.Messages() {
	}
	if err := batch.Error(); err != nil {
		t.Fatal(err)
	}

	h.startIngest(nil)
	h.publishIntake(intakeOrderCreate, []byte(`{"order_id":"o-2"}`), append([]string{"Idempotency-Key", "second"}, lane...)...)
	first, second := event.ID("acme", "first"), event.ID("acme", "second")
	// The second is created before its predecessor is pointed at it
	// (link): wait for both writes, whichever order they came in.
	natstest.Eventually(t, servicetest.WaitFor, func() bool {
		_, ok2 := h.Lookup(second)
		r1, ok1 := h.Lookup(first)
		return ok2 && ok1 && r1.Next != ""
	}, "want the second submission accepted and a successor linked to the first")
	r2, _ := h.Lookup(second)
	r1, ok := h.Lookup(first)
	if !ok || r2.After != first || r1.Next != second {
		t.Fatalf("want the first submission accepted first and the second behind it; got first exists %v (next %q), second after %q", ok, r1.Next, r2.After)
	}
}

// The accept of a lane's first event dies after its record is written and
// before its EVENTS publish, and a later event of the lane is linked to it
// meanwhile (by another ingest replica; here by hand). The redelivery
// finds a record that is no longer the one ingest made, so its message
// must not be claimed without a read: claimed from the envelope, the
// record would lose its link to the next event, which then waits for the
// lane's safety net instead of being woken.
func TestRetriedAcceptKeepsTheLanesLink(t *testing.T) {
	t.Parallel()
	id := event.ID("acme", "lane-link-1")
	next := event.ID("acme", "lane-link-2")
	crashed, linked := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	h := setup(t, baseYAML, withHooks(&ingest.Hooks{AfterCreate: func(got string) error {
		if got == id && calls.Add(1) == 1 {
			close(crashed)
			<-linked
			return errCrash
		}
		return nil
	}}))
	ack := h.publishIntake(intakeOrderCreate, []byte(`{"order_id":"o-1"}`), "Idempotency-Key", "lane-link-1", "Tenaz-Ordering-Key", "lane-link")
	select {
	case <-crashed:
	case <-h.Ctx().Done():
		t.Fatal("the accept never reached its create")
	}
	if _, _, err := h.St.Update(h.Ctx(), "acme", id, func(r state.Record) (state.Record, error) {
		r.Next = next
		return r, nil
	}); err != nil {
		t.Fatal(err)
	}
	close(linked)
	natstest.Eventually(t, servicetest.WaitFor, func() bool { return h.intakeSettled(ack.Sequence) },
		"INTAKE message not settled after the redelivery")
	h.startDispatcher("d1")
	natstest.Eventually(t, servicetest.WaitFor, func() bool {
		r, ok := h.Lookup(id)
		return ok && r.Status == state.Done
	}, "the lane's first event should be done")
	if r, _ := h.Lookup(id); r.Next != next {
		t.Fatalf("the done record's link to the next event: want %s, got %q", next, r.Next)
	}
}
