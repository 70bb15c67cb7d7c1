package ingest_test

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/servicetest"
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
