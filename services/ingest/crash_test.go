package ingest_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/services/ingest"
)

var errCrash = errors.New("simulated crash")

// assertDeliveredOnce checks that the event is done after exactly one
// claim and one call, and that the provider applied its effect once.
func (h *harness) assertDeliveredOnce(id, key string) {
	h.t.Helper()
	rec := h.WaitStatus(id, state.Done, servicetest.WaitFor)
	if rec.Attempts != 1 {
		h.t.Fatalf("event %s: want done on attempt 1, got attempts %d (history %+v)", id, rec.Attempts, rec.History)
	}
	var actions []state.ActionName
	for _, e := range rec.History {
		actions = append(actions, e.Action)
	}
	if len(actions) != 3 || actions[0] != state.Accept || actions[1] != state.Claim || actions[2] != state.Succeed {
		h.t.Fatalf("event %s: want history accept, claim, succeed, got %v", id, actions)
	}
	// The provider logs a call just after answering it: wait for the log.
	if err := h.prov.WaitCalls(h.WaitCtx(), 1); err != nil {
		h.t.Fatal(err)
	}
	// The target sees the event id as Idempotency-Key, not the key.
	if n := len(h.prov.CallsFor(id)); n != 1 {
		h.t.Fatalf("provider: want 1 call for %s, got %d", key, n)
	}
	if n := h.prov.Effects(id); n != 1 {
		h.t.Fatalf("provider: want the effect of %s applied once, got %d", key, n)
	}
}

// The accept path dies after the record is written and before the EVENTS
// publish: the INTAKE message is not acked, its redelivery finds the
// record not started and publishes it, and the event reaches EVENTS once
// and is delivered once.
func TestCrashBetweenCreateAndPublish(t *testing.T) {
	t.Parallel()
	id := event.ID("acme", "crash-1")
	var calls atomic.Int32
	h := setup(t, baseYAML, withHooks(&ingest.Hooks{AfterCreate: func(got string) error {
		if got == id && calls.Add(1) == 1 {
			return errCrash
		}
		return nil
	}}))
	ack := h.publishIntake(intakeOrderCreate, []byte(`{"order_id":"o-crash"}`), "Nats-Msg-Id", "crash-1")

	natstest.Eventually(t, servicetest.WaitFor, func() bool { return h.intakeSettled(ack.Sequence) },
		"INTAKE message not settled after the redelivery")
	if n := calls.Load(); n != 2 {
		t.Fatalf("AfterCreate: want 2 runs (the crash, then the redelivery), got %d", n)
	}
	rec, ok := h.Lookup(id)
	if !ok || rec.Status != state.Pending || len(rec.History) != 1 {
		t.Fatalf("record: want pending with only its creation, got %+v (exists %v)", rec, ok)
	}
	if n := h.SubjectMsgs(h.Subj.EventsStream("acme"), h.Subj.EventsOf("acme")); n != 1 {
		t.Fatalf("acme's messages in EVENTS: want exactly 1 (the event, once), got %d", n)
	}
	if n := h.EventMsgs(); n != 1 {
		t.Fatalf("EVENTS: want the event exactly once, got %d messages", n)
	}

	h.startDispatcher("d1")
	h.assertDeliveredOnce(id, "crash-1")
}

// An HTTP submission whose first accept dies after its record is written
// is answered by its redelivery: 202, its first submission, not the 200
// of a duplicate (its record was made from this very message).
func TestCrashedAcceptAnswersItsSubmitterAsNew(t *testing.T) {
	t.Parallel()
	id := event.ID("acme", "crash-http")
	var calls atomic.Int32
	h := setup(t, baseYAML, withHooks(&ingest.Hooks{AfterCreate: func(got string) error {
		if got == id && calls.Add(1) == 1 {
			return errCrash
		}
		return nil
	}}))
	r := h.do(http.MethodPost, "/v1/events", `{"account":"acme","kind":"order.create","payload":{"order_id":"o-h"}}`, "Idempotency-Key", "crash-http")
	if r.Status != http.StatusAccepted || calls.Load() != 2 {
		t.Fatalf("a submission whose first accept died: want 202 from its redelivery (2 accepts), got %d after %d accepts: %s", r.Status, calls.Load(), r.Body)
	}
}

// The ingest process stops right after writing the record (before the
// EVENTS publish); a fresh ingest on the same server takes the INTAKE
// message over and the event completes.
func TestCrashIngestStopsAfterCreate(t *testing.T) {
	t.Parallel()
	id := event.ID("acme", "crash-2")
	created := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	h := setup(t, baseYAML, withHooks(&ingest.Hooks{AfterCreate: func(got string) error {
		crashed := false
		if got == id {
			once.Do(func() {
				crashed = true
				close(created)
				<-release
			})
		}
		if crashed {
			return errCrash
		}
		return nil
	}}))
	h.startDispatcher("d1")
	h.publishIntake(intakeOrderCreate, []byte(`{"order_id":"o-crash-2"}`), "Nats-Msg-Id", "crash-2")

	select {
	case <-created:
	case <-time.After(servicetest.WaitFor):
		t.Fatal("AfterCreate was not reached")
	}
	if rec, ok := h.Lookup(id); !ok || rec.Status != state.Pending {
		t.Fatalf("record: want it written (pending) before the crash, got %+v (exists %v)", rec, ok)
	}
	stopped := make(chan error, 1)
	expired, cancel := context.WithCancel(context.Background())
	cancel()
	go func() { stopped <- h.ing.Stop(expired) }()
	close(release)
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("Stop: %v", err)
		}
	case <-time.After(servicetest.WaitFor):
		t.Fatal("Stop with an expired context did not return")
	}
	if n := h.EventMsgs(); n != 0 || h.arrived.Load() != 0 {
		t.Fatalf("the stopped ingest must not have enqueued the event, got %d EVENTS messages and %d provider calls", n, h.arrived.Load())
	}

	h.startIngest(nil)
	h.assertDeliveredOnce(id, "crash-2")
}
