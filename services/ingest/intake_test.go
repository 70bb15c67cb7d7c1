package ingest_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/dead"
	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/services/ingest"
)

const intakeOrderCreate = "tenaz.intake.acme.order.create"

// A submission published to INTAKE with Nats-Msg-Id becomes the event
// whose id is derived from account and that key; the same submission again,
// after INTAKE's 100ms duplicate window, is the same event and reaches
// EVENTS only once.
func TestNATSIntakeDuplicateAfterWindow(t *testing.T) {
	t.Parallel()
	h := setup(t, baseYAML)
	body := []byte(`{"order_id":"o-1","total":1990}`)
	id := event.ID("acme", "k1")

	ack1 := h.publishIntake(intakeOrderCreate, body, "Nats-Msg-Id", "k1")
	rec := h.WaitStatus(id, state.Pending, servicetest.WaitFor)
	if rec.IdempotencyKey != "k1" || rec.Account != "acme" || rec.Kind != "order.create" || rec.EntityID != "o-1" {
		t.Fatalf("record: want {key k1, account acme, kind order.create, entity o-1}, got %+v", rec)
	}

	// Publish again until INTAKE takes the copy (its window has passed):
	// only then is the second copy really submitted to ingest.
	var ack2 *jetstream.PubAck
	natstest.Eventually(t, servicetest.WaitFor, func() bool {
		ack2 = h.publishIntake(intakeOrderCreate, body, "Nats-Msg-Id", "k1")
		return !ack2.Duplicate
	}, "INTAKE kept deduplicating k1 past its 100ms window")
	if ack2.Sequence <= ack1.Sequence {
		t.Fatalf("second copy: want a new INTAKE sequence after %d, got %d", ack1.Sequence, ack2.Sequence)
	}
	natstest.Eventually(t, servicetest.WaitFor, func() bool { return h.intakeSettled(ack2.Sequence) },
		"ingest did not settle the second copy (INTAKE seq %d)", ack2.Sequence)

	rec, _ = h.Lookup(id)
	if rec.Status != state.Pending || len(rec.History) != 1 {
		t.Fatalf("after the duplicate: want the untouched pending record with one history entry, got status %s, history %+v", rec.Status, rec.History)
	}
	if n := h.StateMsgs(); n != 1 {
		t.Fatalf("state bucket: want 1 record, got %d", n)
	}
	if n := h.SubjectMsgs(h.Subj.EventsStream("acme"), h.Subj.EventsOf("acme")); n != 1 {
		t.Fatalf("acme's messages in EVENTS: want exactly 1 waiting (no dispatcher runs), got %d", n)
	}
	if n := h.EventMsgs(); n != 1 {
		t.Fatalf("EVENTS: want 1 message for the event, got %d", n)
	}
	natstest.Eventually(t, servicetest.WaitFor, func() bool { return h.SubjectMsgs(names.StreamIntake, "tenaz.intake.>") == 0 },
		"INTAKE: want both copies settled and trimmed (0 messages left)")
}

// Idempotency keys are per account: two accounts submitting the same key a
// few milliseconds apart get two events. The server dedups Nats-Msg-Id per
// stream, not per account, so the contract is: send the key as
// Idempotency-Key, or as Nats-Msg-Id in the form "<account>:<key>" (the
// prefix is not part of the key).
func TestNATSIntakeSameKeyTwoAccounts(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ header, a, b string }{
		{"Idempotency-Key", "k1", "k1"},
		{"Nats-Msg-Id", "acme:k1", "globex:k1"},
	} {
		t.Run(c.header, func(t *testing.T) {
			t.Parallel()
			h := setup(t, baseYAML)
			body := []byte(`{"order_id":"o-1"}`)
			ackA := h.publishIntake("tenaz.intake.acme.order.create", body, c.header, c.a)
			ackB := h.publishIntake("tenaz.intake.globex.order.create", body, c.header, c.b)
			if ackB.Duplicate {
				t.Fatalf("INTAKE answered globex's submission as a duplicate of acme's (seq %d): the server dropped it", ackA.Sequence)
			}
			idA, idB := event.ID("acme", "k1"), event.ID("globex", "k1")
			if idA == idB {
				t.Fatalf("event ids of two accounts with one key: want distinct, got %s twice", idA)
			}
			for _, id := range []string{idA, idB} {
				rec := h.WaitStatus(id, state.Pending, servicetest.WaitFor)
				if rec.IdempotencyKey != "k1" {
					t.Fatalf("%s: want idempotency key k1 (account prefix stripped), got %q", id, rec.IdempotencyKey)
				}
			}
			natstest.Eventually(t, servicetest.WaitFor, func() bool { return h.intakeSettled(ackB.Sequence) }, "INTAKE not settled")
			if n := h.EventMsgs(); n != 2 {
				t.Fatalf("EVENTS: want one message per account, got %d", n)
			}
		})
	}
}

// An invalid NATS submission is not lost: it is kept in DEAD with reason
// rejected_at_intake and its raw body and headers, and its INTAKE message
// is gone.
func TestNATSRejectedSubmissionKeptInDead(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, subject, deadSubject, code, why string
		body                                  []byte
		headers                               []string
	}{
		{"unknown kind", "tenaz.intake.acme.order.nope", "tenaz.dead.acme.order.nope", "unknown_kind", "is not configured", []byte(`{"order_id":"o-1"}`), nil},
		{"not JSON", intakeOrderCreate, "tenaz.dead.acme.order.create", "malformed", "not valid JSON", []byte(`order o-1, total 1990`), nil},
		// JSON, but no payload: refused as every other way in refuses it.
		{"null", intakeOrderCreate, "tenaz.dead.acme.order.create", "malformed", "payload is required", []byte(` null `), nil},
		// JSON that decoders read two ways: refused as every way in
		// refuses it (event.CheckPayload), not made an event whose hash
		// or schema check saw other than its target will.
		{"a member given twice", intakeOrderCreate, "tenaz.dead.acme.order.create", "malformed", `gives the member "order_id" twice`,
			[]byte(`{"order_id":"o-1","order_id":"o-2"}`), nil},
		{"a lone surrogate escape", intakeOrderCreate, "tenaz.dead.acme.order.create", "malformed", "lone UTF-16 surrogate escape",
			[]byte(`{"order_id":"o-1","note":"\ud800"}`), nil},
		// The key in two spellings, with two values: which one it meant
		// cannot be told.
		{"key given twice", intakeOrderCreate, "tenaz.dead.acme.order.create", "malformed", "Idempotency-Key header is given twice",
			[]byte(`{"order_id":"o-1"}`), []string{"idempotency-key", "bad-2"}},
		// The header by which the HTTP handler waits for its answer, set
		// by a publisher: nobody takes the refusal, so it is kept.
		{"unknown kind, a reply header of nobody", "tenaz.intake.acme.order.nope", "tenaz.dead.acme.order.nope", "unknown_kind", "is not configured",
			[]byte(`{"order_id":"o-1"}`), []string{"Tenaz-Reply", "tenaz.api.dead.discard"}},
	}
	notBefore := time.Now().Add(48 * time.Hour).UTC().Format(time.RFC3339) // a valid one: the refusal is the case's
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := setup(t, baseYAML)
			ack := h.publishIntake(c.subject, c.body, append([]string{"Idempotency-Key", "bad-1", "Tenaz-Entity-Id", "o-1", "Tenaz-Not-Before", notBefore}, c.headers...)...)
			ds, err := h.JS.Stream(h.Ctx(), names.StreamDead)
			if err != nil {
				t.Fatal(err)
			}
			var raw *jetstream.RawStreamMsg
			natstest.Eventually(t, servicetest.WaitFor, func() bool {
				raw, err = ds.GetLastMsgForSubject(h.Ctx(), c.deadSubject)
				return err == nil
			}, "DEAD: want an entry on %s, last error %v", c.deadSubject, natstest.Lazy(func() any { return errString(err) }))
			var e dead.Entry
			if err := json.Unmarshal(raw.Data, &e); err != nil {
				t.Fatalf("DEAD entry: want JSON, got %q: %v", raw.Data, err)
			}
			if e.Reason != dead.ReasonRejected || e.Class != c.code || string(e.Raw) != string(c.body) || e.RawSubject != c.subject || !strings.Contains(e.Error, c.why) {
				t.Fatalf("DEAD entry: want {reason %s, class %s, raw %q, raw_subject %s, error saying %q}, got %s",
					dead.ReasonRejected, c.code, c.body, c.subject, c.why, raw.Data)
			}
			// The headers are the submission too: without them, the
			// operator could not resubmit it as it was meant.
			for k, v := range map[string]string{"Idempotency-Key": "bad-1", "Tenaz-Entity-Id": "o-1", "Tenaz-Not-Before": notBefore} {
				if got := e.RawHeader[k]; len(got) != 1 || got[0] != v {
					t.Fatalf("DEAD entry: want raw header %s: %s, got %q (entry %s)", k, v, got, raw.Data)
				}
			}
			natstest.Eventually(t, servicetest.WaitFor, func() bool { return h.intakeSettled(ack.Sequence) }, "INTAKE message not settled")
			is, err := h.JS.Stream(h.Ctx(), names.StreamIntake)
			if err != nil {
				t.Fatal(err)
			}
			natstest.Eventually(t, servicetest.WaitFor, func() bool {
				_, err = is.GetMsg(h.Ctx(), ack.Sequence)
				return errors.Is(err, jetstream.ErrMsgNotFound)
			}, "INTAKE seq %d: want it gone (settled and trimmed), got %v", ack.Sequence, natstest.Lazy(func() any { return errString(err) }))
			if info := h.ConsumerInfo(names.StreamIntake, "ingest"); info.NumRedelivered != 0 {
				t.Fatalf("ingest consumer: want the rejection settled at once, got %d redeliveries", info.NumRedelivered)
			}
			if rec, ok := h.Lookup(event.ID("acme", "bad-1")); ok {
				t.Fatalf("want no event, got %+v", rec)
			}
			if n := h.EventMsgs(); n != 0 {
				t.Fatalf("EVENTS: want nothing enqueued, got %d messages", n)
			}
			if n := h.StreamState(names.StreamDead).Msgs; n != 1 {
				t.Fatalf("DEAD: want exactly 1 entry, got %d", n)
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// A submission ingest fails on every time (here its deliveries are handed
// back, as an ingest dying on it would) is kept in DEAD after
// maxDeliveries attempts, by ingest itself: the consumer never gives a
// message up, so INTAKE can be trimmed to its ack floor.
func TestSubmissionIngestFailsOnIsKeptInDead(t *testing.T) {
	t.Parallel()
	const maxDeliveries = 20 // ingest's
	id := event.ID("acme", "poison-1")
	var tries atomic.Int32
	h := setup(t, baseYAML, withHooks(&ingest.Hooks{BeforeIntake: func(got string) error {
		if got == id && tries.Add(1) <= maxDeliveries {
			return errors.New("ingest died on it")
		}
		return nil
	}}))
	ack := h.publishIntake(intakeOrderCreate, []byte(`{"order_id":"poison"}`), "Idempotency-Key", "poison-1")
	ds, err := h.JS.Stream(h.Ctx(), names.StreamDead)
	if err != nil {
		t.Fatal(err)
	}
	var raw *jetstream.RawStreamMsg
	natstest.Eventually(t, servicetest.WaitFor, func() bool {
		raw, err = ds.GetLastMsgForSubject(h.Ctx(), "tenaz.dead.acme.order.create")
		return err == nil
	}, "DEAD: want the submission kept after %d failed deliveries (%s so far), last error %v", maxDeliveries,
		natstest.Lazy(func() any { return tries.Load() }), natstest.Lazy(func() any { return errString(err) }))
	var e dead.Entry
	if err := json.Unmarshal(raw.Data, &e); err != nil {
		t.Fatalf("DEAD entry: want JSON, got %q: %v", raw.Data, err)
	}
	if e.Reason != dead.ReasonCrash || e.Account != "acme" || e.Kind != "order.create" || string(e.Raw) != `{"order_id":"poison"}` || e.RawSubject != intakeOrderCreate {
		t.Fatalf("DEAD entry: want {reason %s, account acme, kind order.create, raw body, raw subject}, got %s", dead.ReasonCrash, raw.Data)
	}
	natstest.Eventually(t, servicetest.WaitFor, func() bool { return h.intakeSettled(ack.Sequence) }, "INTAKE message not settled")
	if got := tries.Load(); got != maxDeliveries+1 {
		t.Fatalf("want %d deliveries (the last one kept in DEAD), got %d", maxDeliveries+1, got)
	}
	if rec, ok := h.Lookup(id); ok {
		t.Fatalf("want no event, got %+v", rec)
	}
}

// An account cannot drop another's HTTP submission through INTAKE's
// stream-wide dedup: acme publishes, over NATS, every Nats-Msg-Id globex's
// submission could carry (its event id, alone or with kind and payload
// hash, as ingest once sent it), then globex submits over HTTP at once.
// Globex's event exists, and acme's messages are acme's own events.
func TestAnotherAccountsMsgIDDropsNoSubmission(t *testing.T) {
	t.Parallel()
	h := setup(t, baseYAML)
	body := `{"order_id":"o-9","total":5}`
	victim := event.ID("globex", "k9")
	for i, forged := range []string{victim, victim + "/order.create/" + event.PayloadSHA256([]byte(body))[:16], "globex:k9"} {
		h.publishIntake(intakeOrderCreate, []byte(body), "Nats-Msg-Id", forged, "Idempotency-Key", fmt.Sprintf("acme-%d", i))
	}
	r := h.do("POST", "/v1/events", `{"account":"globex","kind":"order.create","payload":`+body+`}`, "Idempotency-Key", "k9")
	if r.Status != 202 && r.Status != 200 {
		t.Fatalf("globex's submission: want 202, got %d %s", r.Status, r.Body)
	}
	rec := h.WaitStatus(victim, state.Pending, servicetest.WaitFor)
	if rec.Account != "globex" {
		t.Fatalf("event %s: want globex's, got account %s", victim, rec.Account)
	}
	for i := range 3 {
		if rec := h.WaitStatus(event.ID("acme", fmt.Sprintf("acme-%d", i)), state.Pending, servicetest.WaitFor); rec.Account != "acme" {
			t.Fatalf("acme's submission %d: want acme's event, got account %s", i, rec.Account)
		}
	}
}

// NATS keeps header names as the publisher wrote them: tenaz's headers
// in lower case (as a HTTP/2 habit or a CLI writes them) are read, not
// ignored. Ignored, two submissions with different keys would derive one
// key and the second would be lost as a duplicate, and a delay dropped.
func TestNATSIntakeHeadersInAnyCase(t *testing.T) {
	t.Parallel()
	h := setup(t, baseYAML)
	body := []byte(`{"order_id":"o-1","total":1}`)
	notBefore := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	h.publishIntake(intakeOrderCreate, body, "idempotency-key", "lk-1", "tenaz-not-before", notBefore, "TENAZ-ENTITY-ID", "e-9")
	h.publishIntake(intakeOrderCreate, body, "idempotency-key", "lk-2")
	rec := h.WaitStatus(event.ID("acme", "lk-1"), state.Scheduled, servicetest.WaitFor)
	if rec.EntityID != "e-9" || rec.IdempotencyKey != "lk-1" {
		t.Fatalf("lk-1: want entity e-9 and key lk-1 from lower- and upper-case headers, got %q and %q", rec.EntityID, rec.IdempotencyKey)
	}
	h.WaitStatus(event.ID("acme", "lk-2"), state.Pending, servicetest.WaitFor)
}
