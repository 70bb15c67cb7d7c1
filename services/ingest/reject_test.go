package ingest_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/dead"
	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natsd"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/store"
	"github.com/tenaz/tenaz/services/ingest"
)

// withInvoice is baseYAML with a second kind, invoice.send.
const withInvoice = baseYAML + `  invoice.send: {target: erp, attempts: 3}
`

// deadEntries decodes every entry DEAD holds.
func (h *harness) deadEntries() []dead.Entry {
	h.t.Helper()
	ds, err := h.JS.Stream(h.Ctx(), names.StreamDead)
	if err != nil {
		h.t.Fatal(err)
	}
	var out []dead.Entry
	for seq := uint64(1); seq <= h.StreamState(names.StreamDead).LastSeq; seq++ {
		raw, err := ds.GetMsg(h.Ctx(), seq)
		if err != nil {
			continue // deleted
		}
		var e dead.Entry
		if err := json.Unmarshal(raw.Data, &e); err != nil {
			h.t.Fatalf("DEAD seq %d: want JSON, got %q: %v", seq, raw.Data, err)
		}
		out = append(out, e)
	}
	return out
}

// handedToB is replica A (config a), which hands every intake message
// back, and replica B (config b), which takes each one and holds those of
// held until release(id): A's handler answers them 202 first.
func handedToB(t *testing.T, a, b string, held ...string) (h *harness, release func(id string)) {
	t.Helper()
	errHandBack := errors.New("handed back: B takes every submission")
	h = setup(t, a, withHooks(&ingest.Hooks{BeforeIntake: func(string) error { return errHandBack }}))
	gates := map[string]chan struct{}{}
	opens := map[string]func(){}
	for _, id := range held {
		gate := make(chan struct{})
		gates[id], opens[id] = gate, sync.OnceFunc(func() { close(gate) })
		t.Cleanup(opens[id])
	}
	h.startIngestConfig(h.config(b), &ingest.Hooks{BeforeIntake: func(id string) error { // replica B
		if gate, ok := gates[id]; ok {
			select {
			case <-gate:
			case <-h.Ctx().Done():
			}
		}
		return nil
	}})
	return h, func(id string) { opens[id]() }
}

// In a rolling deploy, replica A knows invoice.send and answers its HTTP
// callers; replica B runs a config without it and takes its share of
// INTAKE. A submission A answered 202 and B then refused is never lost:
// it is its event, dead with the refusal (reason rejected_at_intake,
// class unknown_kind), readable at its status URL and kept in DEAD under
// its id. One B refused while A's handler still waited is answered with
// the refusal instead (the caller was told), and nothing is kept.
// A hands every intake message back, so that B takes each one; B holds
// "kept" until A has answered it 202 (A waits its default ReplyTimeout,
// 5s: B's refusal of "told", held by nobody, comes back well within it).
func TestRefusedAfter202ByAnotherReplicaIsKeptAsDeadEvent(t *testing.T) {
	t.Parallel()
	toldID, keptID := event.ID("acme", "told"), event.ID("acme", "kept")
	h, release := handedToB(t, withInvoice, baseYAML, keptID)
	const body = `{"account":"acme","kind":"invoice.send","payload":{"n":1}}`

	r := h.do(http.MethodPost, "/v1/events", body, "Idempotency-Key", "told")
	if r.Status != http.StatusUnprocessableEntity || r.errorCode(t) != "unknown_kind" {
		t.Fatalf("POST told, refused by B while A waited: want 422 unknown_kind, got %d %s", r.Status, r.Body)
	}

	r = h.do(http.MethodPost, "/v1/events", body, "Idempotency-Key", "kept")
	var v view
	r.json(t, &v)
	if r.Status != http.StatusAccepted || v.ID != keptID || v.Status != "accepted" || v.StatusURL != h.api.URL+"/v1/events/"+keptID {
		t.Fatalf("POST kept, held by B: want 202 accepted for %s, got %d %s", keptID, r.Status, r.Body)
	}
	release(keptID)
	rec := h.WaitStatus(keptID, state.Dead, servicetest.WaitFor)
	if rec.LastError == nil || rec.LastError.Class != "unknown_kind" || len(rec.History) != 1 || rec.History[0].Action != state.Reject ||
		!strings.HasPrefix(rec.History[0].Detail, dead.ReasonRejected+":") || string(rec.Payload) != `{"n":1}` {
		t.Fatalf("event %s refused by B after the 202: want dead by reject, last_error unknown_kind, the payload kept, got %+v", keptID, rec)
	}
	r = h.do(http.MethodGet, "/v1/events/"+keptID, "")
	r.json(t, &v)
	if r.Status != http.StatusOK || v.Status != state.Dead {
		t.Fatalf("GET the status URL of %s: want 200 and status dead, got %d %s", keptID, r.Status, r.Body)
	}

	natstest.Eventually(t, servicetest.WaitFor, func() bool { return h.SubjectMsgs(names.StreamIntake, "tenaz.intake.>") == 0 }, "INTAKE: want every submission settled")
	entries := h.deadEntries()
	if len(entries) != 1 || entries[0].ID != keptID || entries[0].Reason != dead.ReasonRejected || entries[0].Class != "unknown_kind" ||
		entries[0].Event == nil || entries[0].Record == nil {
		t.Fatalf("DEAD: want one entry, %s with its event and record (told's caller was told: nothing kept), got %+v", keptID, entries)
	}
	if rec, ok := h.Lookup(toldID); ok {
		t.Fatalf("event %s: its caller was told 422, want nothing kept, got %+v", toldID, rec)
	}
}

// A key names one submission. The same key with the same payload (even
// written differently, or after the event ran) is the same event: 200.
// With another payload or another kind it is refused with 409
// idempotency_key_reused, and the original event is unchanged. The
// caller was told: nothing is kept in DEAD.
func TestHTTPIdempotencyKeyReused(t *testing.T) {
	t.Parallel()
	h := setup(t, withInvoice)
	h.startDispatcher("d1")
	post := func(body string) response {
		t.Helper()
		return h.do(http.MethodPost, "/v1/events", body, "Idempotency-Key", "k1")
	}
	const first = `{"account":"acme","kind":"order.create","payload":{"order_id": "o-1", "note": "<ok>"}}`
	if r := post(first); r.Status != http.StatusAccepted {
		t.Fatalf("POST: want 202, got %d %s", r.Status, r.Body)
	}
	id := event.ID("acme", "k1")
	orig := h.WaitStatus(id, state.Done, servicetest.WaitFor) // the dispatcher's claim rewrote it from the EVENTS copy
	for _, body := range []string{
		first,
		`{"account":"acme","kind":"order.create","payload":{"note":"<ok>","order_id":"o-1"}}`,
	} {
		r := post(body)
		var v view
		r.json(t, &v)
		if r.Status != http.StatusOK || v.ID != id {
			t.Fatalf("POST the same submission %s: want 200 and event %s, got %d %s", body, id, r.Status, r.Body)
		}
	}
	for _, body := range []string{
		`{"account":"acme","kind":"order.create","payload":{"order_id":"o-1","note":"changed"}}`,
		`{"account":"acme","kind":"invoice.send","payload":{"order_id": "o-1", "note": "<ok>"}}`,
	} {
		r := post(body)
		if r.Status != http.StatusConflict || r.errorCode(t) != "idempotency_key_reused" || !strings.Contains(string(r.Body), id) {
			t.Fatalf("POST %s with key k1: want 409 idempotency_key_reused naming %s, got %d %s", body, id, r.Status, r.Body)
		}
	}
	rec, _ := h.Lookup(id)
	if rec.Kind != "order.create" || string(rec.Payload) != string(orig.Payload) || len(rec.History) != len(orig.History) || rec.Status != state.Done {
		t.Fatalf("the original event: want it unchanged (%+v), got %+v", orig, rec)
	}
	if n := h.StreamState(names.StreamDead).Msgs; n != 0 {
		t.Fatalf("DEAD: the callers were told, want nothing kept, got %d entries", n)
	}
}

// Over NATS nobody is told: a submission reusing a key with another
// payload or kind is kept in DEAD as rejected (class
// idempotency_key_reused, the body as sent); the original event is
// unchanged, and the same submission again is still a plain duplicate.
func TestNATSIdempotencyKeyReusedKeptInDead(t *testing.T) {
	t.Parallel()
	h := setup(t, withInvoice)
	id := event.ID("acme", "k1")
	h.publishIntake(intakeOrderCreate, []byte(`{"order_id":"o-1"}`), "Idempotency-Key", "k1")
	orig := h.WaitStatus(id, state.Pending, servicetest.WaitFor)
	ack := h.publishIntake(intakeOrderCreate, []byte(`{"order_id":"o-1"}`), "Idempotency-Key", "k1")
	natstest.Eventually(t, servicetest.WaitFor, func() bool { return h.intakeSettled(ack.Sequence) }, "the duplicate not settled")
	if n := h.StreamState(names.StreamDead).Msgs; n != 0 {
		t.Fatalf("DEAD after a true duplicate: want nothing, got %d entries", n)
	}
	sends := []struct{ subject, body string }{
		{intakeOrderCreate, `{"order_id":"o-2"}`},
		{"tenaz.intake.acme.invoice.send", `{"order_id":"o-1"}`},
	}
	for _, s := range sends {
		h.publishIntake(s.subject, []byte(s.body), "Idempotency-Key", "k1")
	}
	var got []dead.Entry
	natstest.Eventually(t, servicetest.WaitFor, func() bool { got = h.deadEntries(); return len(got) == len(sends) },
		"DEAD: want %d entries, got %v", len(sends), natstest.Lazy(func() any { return len(got) }))
	for _, s := range sends {
		found := false
		for _, e := range got {
			found = found || e.RawSubject == s.subject && string(e.Raw) == s.body && e.Reason == dead.ReasonRejected &&
				e.Class == "idempotency_key_reused" && e.ID == "" && strings.Contains(e.Error, id)
		}
		if !found {
			t.Fatalf("DEAD: want an entry rejected, class idempotency_key_reused, raw %s on %s, naming %s; got %+v", s.body, s.subject, id, got)
		}
	}
	rec, _ := h.Lookup(id)
	if rec.Status != state.Pending || string(rec.Payload) != string(orig.Payload) || len(rec.History) != 1 || rec.Kind != "order.create" {
		t.Fatalf("the original event: want it unchanged, got %+v", rec)
	}
}

// maxStore caps the server's JetStream file storage.
func maxStore(n int64) natstest.Option {
	return func(o *natsd.Options) { o.Configure = func(so *server.Options) { so.JetStreamMaxStore = n } }
}

// When the server's storage is full, a submission is refused with 503
// store_full (nothing was taken; the caller tries again), and every one
// answered 202 before, even one whose acceptance ran into the full store,
// becomes its event once room is freed.
func TestFullStoreRefusesWith503AndKeepsAccepted(t *testing.T) {
	t.Parallel()
	h := setup(t, baseYAML, withServer(maxStore(8<<20)), withReplyTimeout(200*time.Millisecond))
	fill, err := h.JS.CreateStream(h.Ctx(), jetstream.StreamConfig{Name: "FILL", Subjects: []string{"fill"}})
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 64<<10)
	var accepted []string
	refused := 0
	for i := 0; refused == 0; i++ {
		if i > 1000 {
			t.Fatal("the store never filled")
		}
		key := fmt.Sprintf("o-%d", i)
		r := h.do(http.MethodPost, "/v1/events", `{"account":"acme","kind":"order.create","payload":{"order_id":"`+key+`"}}`, "Idempotency-Key", key)
		switch r.Status {
		case http.StatusAccepted:
			accepted = append(accepted, event.ID("acme", key))
		case http.StatusServiceUnavailable:
			if code := r.errorCode(t); code != "store_full" {
				t.Fatalf("POST into a full store: want 503 store_full, got %s", r.Body)
			}
			refused++
		default:
			t.Fatalf("POST %s: want 202 or 503, got %d %s", key, r.Status, r.Body)
		}
		for j := 0; j < 4; j++ {
			if _, err := h.JS.Publish(h.Ctx(), "fill", chunk); err != nil && !store.IsFull(err) {
				t.Fatalf("filling: %v", err)
			}
		}
	}
	if len(accepted) == 0 {
		t.Fatal("want some submissions accepted before the store filled, got none")
	}
	if err := h.JS.DeleteStream(h.Ctx(), fill.CachedInfo().Config.Name); err != nil {
		t.Fatal(err)
	}
	for _, id := range accepted {
		natstest.Eventually(t, time.Minute, func() bool { _, ok := h.Lookup(id); return ok }, "event %s answered 202: want its record once room is freed", id)
	}
	if r := h.do(http.MethodPost, "/v1/events", `{"account":"acme","kind":"order.create","payload":{"order_id":"after"}}`, "Idempotency-Key", "after"); r.Status != http.StatusAccepted {
		t.Fatalf("POST after room was freed: want 202, got %d %s", r.Status, r.Body)
	}
}

// A submission one replica answered 202 and another's config refuses
// before it can make an envelope (a lower http.max_body_bytes here) is
// still kept as the event the 202 promised: dead, with the refusal, at
// its status URL. It was kept only as a refused submission, with no
// record, and the status URL answered 404 for good.
func TestRefusedAfter202WithNoEnvelopeIsKeptAsThePromisedEvent(t *testing.T) {
	t.Parallel()
	bigID, hugeID := event.ID("acme", "big"), event.ID("acme", "huge")
	h, release := handedToB(t,
		strings.Replace(withInvoice, "max_body_bytes: 4096", "max_body_bytes: 200000", 1),
		strings.Replace(withInvoice, "max_body_bytes: 4096", "max_body_bytes: 64", 1), bigID, hugeID)
	payload := `{"n":1,"note":"` + strings.Repeat("x", 100) + `"}`

	r := h.do(http.MethodPost, "/v1/events", `{"account":"acme","kind":"invoice.send","payload":`+payload+`}`, "Idempotency-Key", "big")
	var v view
	r.json(t, &v)
	if r.Status != http.StatusAccepted || v.ID != bigID || v.StatusURL != h.api.URL+"/v1/events/"+bigID {
		t.Fatalf("POST big, held by B: want 202 accepted for %s, got %d %s", bigID, r.Status, r.Body)
	}
	release(bigID)
	rec := h.WaitStatus(bigID, state.Dead, servicetest.WaitFor)
	if rec.LastError == nil || rec.LastError.Class != "too_large" || rec.Kind != "invoice.send" || string(rec.Payload) != payload {
		t.Fatalf("event %s refused by B after the 202: want dead, too_large, its kind and payload kept, got %+v", bigID, rec)
	}
	r = h.do(http.MethodGet, "/v1/events/"+bigID, "")
	r.json(t, &v)
	if r.Status != http.StatusOK || v.Status != state.Dead {
		t.Fatalf("GET the status URL of %s: want 200 and status dead, got %d %s", bigID, r.Status, r.Body)
	}
	natstest.Eventually(t, servicetest.WaitFor, func() bool { return h.SubjectMsgs(names.StreamIntake, "tenaz.intake.>") == 0 }, "INTAKE: want every submission settled")
	if entries := h.deadEntries(); len(entries) != 1 || entries[0].ID != bigID || entries[0].Class != "too_large" {
		t.Fatalf("DEAD: want one entry, %s's, got %+v", bigID, entries)
	}

	// One too large to keep as the event's payload (over 64 KiB): the
	// event is kept without it, its DEAD entry with the message.
	huge := `{"n":2,"note":"` + strings.Repeat("y", 70<<10) + `"}`
	r = h.do(http.MethodPost, "/v1/events", `{"account":"acme","kind":"invoice.send","payload":`+huge+`}`, "Idempotency-Key", "huge")
	if r.Status != http.StatusAccepted {
		t.Fatalf("POST huge, held by B: want 202, got %d %.200s", r.Status, r.Body)
	}
	release(hugeID)
	rec = h.WaitStatus(hugeID, state.Dead, servicetest.WaitFor)
	if rec.LastError == nil || rec.LastError.Class != "too_large" || len(rec.Payload) != 0 {
		t.Fatalf("event %s: want dead, too_large, no payload kept in the record, got %+v", hugeID, rec.LastError)
	}
	natstest.Eventually(t, servicetest.WaitFor, func() bool { return len(h.deadEntries()) == 2 }, "DEAD: want huge's entry too")
	for _, e := range h.deadEntries() {
		if e.ID == hugeID && (len(e.Raw) == 0 || !strings.HasPrefix(string(e.Raw), `{"n":2,"note":"yyy`)) {
			t.Fatalf("huge's DEAD entry: want the message it came in, got %d bytes", len(e.Raw))
		}
	}
}
