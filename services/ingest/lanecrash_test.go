package ingest_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
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

// An account flooding ordered submissions does not hold up another
// account's: its ordered loop accepts one at a time (several round
// trips each), and its queue takes what the ack window lets this
// replica have, so the consumer hands the next account's submissions on
// at once. With the small channel the queue replaced, the intake callback
// waited for the flood, and calm's submissions, behind it in INTAKE, came
// only after nearly all of it. The flood's lane keeps INTAKE's order.
func TestOrderedFloodDoesNotHoldUpAnotherAccount(t *testing.T) {
	t.Parallel()
	const flood, calm = 1000, 20
	h := setup(t, baseYAML)
	servicetest.Stop(t, h.ing)
	var acks []jetstream.PubAckFuture
	publish := func(account, key string, headers ...string) {
		m := nats.NewMsg("tenaz.intake." + account + ".order.create")
		m.Data = []byte(`{"order_id":"` + key + `"}`)
		m.Header.Set("Idempotency-Key", key)
		for i := 0; i+1 < len(headers); i += 2 {
			m.Header.Set(headers[i], headers[i+1])
		}
		f, err := h.JS.PublishMsgAsync(m)
		if err != nil {
			t.Fatal(err)
		}
		acks = append(acks, f)
	}
	for i := range flood {
		publish("flood", fmt.Sprintf("f-%04d", i), "Tenaz-Ordering-Key", "lane")
	}
	for i := range calm {
		publish("calm", fmt.Sprintf("c-%02d", i))
	}
	for _, f := range acks {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			t.Fatal(err)
		case <-time.After(servicetest.WaitFor):
			t.Fatal("no PubAck")
		}
	}

	h.startIngest(nil)
	accepted := func(account, format string, n int) int {
		got := 0
		for i := range n {
			if _, ok := h.Lookup(event.ID(account, fmt.Sprintf(format, i))); ok {
				got++
			}
		}
		return got
	}
	natstest.Eventually(t, servicetest.WaitFor, func() bool { return accepted("calm", "c-%02d", calm) == calm },
		"want calm's %d submissions accepted", calm)
	if n := accepted("flood", "f-%04d", flood); n > flood/2 {
		t.Fatalf("want calm's submissions accepted while most of the flood waits, got %d of the flood's %d accepted first", n, flood)
	}
	natstest.Eventually(t, 3*time.Minute, func() bool { return accepted("flood", "f-%04d", flood) == flood },
		"want the flood accepted")
	for i := 1; i < flood; i++ {
		r, _ := h.Lookup(event.ID("flood", fmt.Sprintf("f-%04d", i)))
		if want := event.ID("flood", fmt.Sprintf("f-%04d", i-1)); r.After != want {
			t.Fatalf("f-%04d: want it behind f-%04d in the lane, got after %q", i, i-1, r.After)
		}
	}
}
