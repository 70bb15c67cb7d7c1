package ingest_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
)

// view is the part of an event's JSON the tests read.
type view struct {
	ID             string      `json:"id"`
	Status         state.State `json:"status"`
	IdempotencyKey string      `json:"idempotency_key"`
	StatusURL      string      `json:"status_url"`
	Account        string      `json:"account"`
	Kind           string      `json:"kind"`
	EntityID       string      `json:"entity_id"`
}

// POST answers 202 with the new event; the same submission again (same
// Idempotency-Key, or no key and the same payload written differently)
// answers 200 with the same event; GET and GET …/history read it.
func TestHTTPSubmitDuplicateAndRead(t *testing.T) {
	t.Parallel()
	h := setup(t, baseYAML)

	const body = `{"account":"acme","kind":"order.create","payload":{"order_id":"o-1","total":1990}}`
	r := h.do(http.MethodPost, "/v1/events", body, "Idempotency-Key", "o-1")
	if r.Status != http.StatusAccepted {
		t.Fatalf("POST: want 202, got %d %s", r.Status, r.Body)
	}
	var first view
	r.json(t, &first)
	wantID := event.ID("acme", "o-1")
	if first.ID != wantID || first.Status != state.Pending || first.IdempotencyKey != "o-1" ||
		first.StatusURL != h.api.URL+"/v1/events/"+wantID {
		t.Fatalf("POST: want {id %s, status pending, idempotency_key o-1, status_url %s/v1/events/%s}, got %s",
			wantID, h.api.URL, wantID, r.Body)
	}

	r = h.do(http.MethodPost, "/v1/events", body, "Idempotency-Key", "o-1")
	if r.Status != http.StatusOK {
		t.Fatalf("POST again with the same Idempotency-Key: want 200, got %d %s", r.Status, r.Body)
	}
	var again view
	r.json(t, &again)
	if again.ID != first.ID {
		t.Fatalf("POST again: want the existing event %s, got %s", first.ID, again.ID)
	}

	// No key: the key is derived from kind, entity and the canonical
	// payload, so the same payload with another key order and spacing is
	// the same event.
	const derived1 = `{"account":"acme","kind":"order.create","payload":{"order_id":"o-2","total":500,"lines":[{"sku":"a","qty":1}]}}`
	const derived2 = `{ "kind": "order.create", "account": "acme",
		"payload": { "lines": [ { "qty": 1, "sku": "a" } ], "total": 500, "order_id": "o-2" } }`
	canon, err := event.Canonical([]byte(`{"order_id":"o-2","total":500,"lines":[{"sku":"a","qty":1}]}`))
	if err != nil {
		t.Fatal(err)
	}
	wantKey := event.DerivedKey("order.create", "o-2", canon)
	r = h.do(http.MethodPost, "/v1/events", derived1)
	if r.Status != http.StatusAccepted {
		t.Fatalf("POST without a key: want 202, got %d %s", r.Status, r.Body)
	}
	var d1 view
	r.json(t, &d1)
	if d1.IdempotencyKey != wantKey || d1.ID != event.ID("acme", wantKey) {
		t.Fatalf("POST without a key: want derived key %s (id %s), got key %s id %s", wantKey, event.ID("acme", wantKey), d1.IdempotencyKey, d1.ID)
	}
	r = h.do(http.MethodPost, "/v1/events", derived2)
	if r.Status != http.StatusOK {
		t.Fatalf("POST the same payload reordered and respaced: want 200 (a duplicate), got %d %s", r.Status, r.Body)
	}
	var d2 view
	r.json(t, &d2)
	if d2.ID != d1.ID {
		t.Fatalf("derived-key duplicate: want the existing event %s, got %s", d1.ID, d2.ID)
	}

	// Two events, each enqueued once: the duplicates added nothing.
	if n := h.SubjectMsgs(h.Subj.EventsStream("acme"), h.Subj.EventsOf("acme")); n != 2 {
		t.Fatalf("EVENTS for acme: want 2 messages (one per event), got %d", n)
	}

	r = h.do(http.MethodGet, "/v1/events/"+first.ID, "")
	var got view
	if r.Status != http.StatusOK {
		t.Fatalf("GET: want 200, got %d %s", r.Status, r.Body)
	}
	r.json(t, &got)
	if got.ID != first.ID || got.Status != state.Pending || got.Account != "acme" || got.Kind != "order.create" || got.EntityID != "o-1" {
		t.Fatalf("GET: want {id %s, status pending, account acme, kind order.create, entity_id o-1}, got %s", first.ID, r.Body)
	}

	r = h.do(http.MethodGet, "/v1/events/"+first.ID+"/history", "")
	if r.Status != http.StatusOK {
		t.Fatalf("GET history: want 200, got %d %s", r.Status, r.Body)
	}
	var hist struct {
		ID      string        `json:"id"`
		Status  state.State   `json:"status"`
		History []state.Entry `json:"history"`
	}
	r.json(t, &hist)
	if hist.ID != first.ID || len(hist.History) != 1 || hist.History[0].Action != state.Accept ||
		hist.History[0].To != state.Pending || hist.History[0].Actor != "ingest" {
		t.Fatalf("GET history: want one entry {action accept, to pending, actor ingest}, got %s", r.Body)
	}

	for _, id := range []string{event.ID("acme", "never-submitted"), "ev_nope", "not-an-id"} {
		r = h.do(http.MethodGet, "/v1/events/"+id, "")
		if r.Status != http.StatusNotFound {
			t.Fatalf("GET unknown %s: want 404, got %d %s", id, r.Status, r.Body)
		}
		if code := r.errorCode(t); code != "not_found" {
			t.Fatalf("GET unknown %s: want code not_found, got %q", id, code)
		}
		r = h.do(http.MethodGet, "/v1/events/"+id+"/history", "")
		if r.Status != http.StatusNotFound {
			t.Fatalf("GET unknown %s/history: want 404, got %d %s", id, r.Status, r.Body)
		}
	}
}

// schemaYAML adds a kind with an inline JSON Schema.
const schemaYAML = baseYAML + `  invoice.send:
    target: erp
    schema: '{"type": "object", "required": ["invoice_id"], "properties": {"invoice_id": {"type": "string"}, "total": {"maximum": 9007199254740992}}}'
`

// Every refused submission is answered with its code and leaves no trace:
// no record, nothing in INTAKE, EVENTS or DEAD.
func TestHTTPRefusals(t *testing.T) {
	t.Parallel()
	h := setup(t, schemaYAML)

	sub := func(account, kind, payload string) string {
		return `{"account":"` + account + `","kind":"` + kind + `","payload":` + payload + `}`
	}
	big := `{"order_id":"o-big","pad":"` + strings.Repeat("x", 5000) + `"}` // over max_body_bytes (4096)
	huge := `{"order_id":"o-huge","pad":"` + strings.Repeat("x", 80*1024) + `"}`
	cases := []struct {
		name, account, body string
		status              int
		code                string
	}{
		{"malformed JSON", "acme", `{"account":"acme","kind":`, 400, "malformed"},
		{"trailing data", "acme", sub("acme", "order.create", `{"order_id":"o"}`) + `{}`, 400, "malformed"},
		{"unknown field", "acme", `{"account":"acme","kind":"order.create","ordering-key":"x","payload":{"order_id":"o"}}`, 400, "malformed"},
		{"a field given twice", "globex", `{"account":"acme","kind":"order.create","account":"globex","payload":{"order_id":"o"}}`, 400, "malformed"},
		{"no payload", "acme", `{"account":"acme","kind":"order.create"}`, 400, "malformed"},
		{"payload over max_body_bytes", "acme", sub("acme", "order.create", big), 413, "too_large"},
		{"body far over max_body_bytes", "acme", sub("acme", "order.create", huge), 413, "too_large"},
		{"unknown kind", "acme", sub("acme", "order.nope", `{"order_id":"o"}`), 422, "unknown_kind"},
		{"schema violation", "acme", sub("acme", "invoice.send", `{"invoice_id":5}`), 422, "schema_violation"},
		{"schema: missing field", "acme", sub("acme", "invoice.send", `{"total":5}`), 422, "schema_violation"},
		{"schema: a number past 2^53", "acme", sub("acme", "invoice.send", `{"invoice_id":"i","total":9007199254740993}`), 422, "schema_violation"},
		{"account with a dot", "a.b", sub("a.b", "order.create", `{"order_id":"o"}`), 400, "invalid_account"},
		{"account with a wildcard", "a*", sub("a*", "order.create", `{"order_id":"o"}`), 400, "invalid_account"},
		{"empty account", "", sub("", "order.create", `{"order_id":"o"}`), 400, "invalid_account"},
	}
	before := h.footprint()
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			key := "refused-" + string(rune('a'+i))
			r := h.do(http.MethodPost, "/v1/events", c.body, "Idempotency-Key", key)
			if r.Status != c.status {
				t.Fatalf("want %d, got %d %s", c.status, r.Status, r.Body)
			}
			if code := r.errorCode(t); code != c.code {
				t.Fatalf("want code %q, got %q (%s)", c.code, code, r.Body)
			}
			if rec, ok := h.Lookup(event.ID(c.account, key)); ok {
				t.Fatalf("want no event, got record %+v", rec)
			}
			if got := h.footprint(); got != before {
				t.Fatalf("want INTAKE, EVENTS, DEAD and the state bucket untouched %+v, got %+v", before, got)
			}
		})
	}

	// The same API still accepts a valid submission of the schema'd kind.
	r := h.do(http.MethodPost, "/v1/events", sub("acme", "invoice.send", `{"invoice_id":"i-1"}`), "Idempotency-Key", "ok")
	if r.Status != http.StatusAccepted {
		t.Fatalf("valid submission after the refusals: want 202, got %d %s", r.Status, r.Body)
	}
	if got := h.StreamState(names.StreamDead).Msgs; got != 0 {
		t.Fatalf("DEAD: HTTP refusals are answered, not kept: want 0 entries, got %d", got)
	}
	if got := h.StateMsgs(); got != 1 {
		t.Fatalf("state bucket: want exactly the one valid event, got %d records", got)
	}
}

// A submission without a key whose entity id is long (up to the 255
// bytes an entity may have) is taken over HTTP as over NATS: its derived
// key, longer than a caller's key may be, is the same on both ways in,
// and the caller may give it back as its Idempotency-Key.
func TestDerivedKeyOfALongEntity(t *testing.T) {
	t.Parallel()
	h := setup(t, baseYAML)
	entity := strings.Repeat("e", names.MaxKeyLen)
	payload := `{"order_id":"` + entity + `","total":1}`
	canon, err := event.Canonical([]byte(payload))
	if err != nil {
		t.Fatal(err)
	}
	key := event.DerivedKey("order.create", entity, canon)
	if len(key) <= names.MaxKeyLen {
		t.Fatalf("derived key of %d bytes: want one longer than a caller's key may be", len(key))
	}
	r := h.do(http.MethodPost, "/v1/events", `{"account":"acme","kind":"order.create","payload":`+payload+`}`)
	if r.Status != http.StatusAccepted {
		t.Fatalf("POST without a key, entity of %d bytes: want 202, got %d %s", len(entity), r.Status, r.Body)
	}
	var v view
	r.json(t, &v)
	if v.ID != event.ID("acme", key) || v.IdempotencyKey != key {
		t.Fatalf("POST: want the derived key's event %s, got %s (key %.40s…)", event.ID("acme", key), v.ID, v.IdempotencyKey)
	}
	ack := h.publishIntake(intakeOrderCreate, []byte(payload))
	natstest.Eventually(t, servicetest.WaitFor, func() bool { return h.intakeSettled(ack.Sequence) }, "INTAKE not settled")
	if n := h.EventMsgs(); n != 1 {
		t.Fatalf("EVENTS after the same submission over NATS: want 1 message (one event), got %d", n)
	}
	// The key as answered, given back: the same event.
	r = h.do(http.MethodPost, "/v1/events", `{"account":"acme","kind":"order.create","payload":`+payload+`}`, "Idempotency-Key", key)
	var again view
	if r.Status != http.StatusOK {
		t.Fatalf("POST again with the derived key as Idempotency-Key: want 200, got %d %s", r.Status, r.Body)
	}
	if r.json(t, &again); again.ID != v.ID {
		t.Fatalf("POST again with the derived key: want event %s, got %s", v.ID, again.ID)
	}
}

// A field's header given twice with different values (an Idempotency-Key
// a client and a proxy each set, say) is refused, as a JSON member given
// twice is, and leaves no trace; the same value twice is one value.
func TestHTTPHeaderGivenTwice(t *testing.T) {
	t.Parallel()
	h := setup(t, baseYAML)
	post := func(headers ...string) response {
		req, err := http.NewRequestWithContext(h.Ctx(), http.MethodPost, h.api.URL+"/v1/events",
			strings.NewReader(`{"account":"acme","kind":"order.create","payload":{"order_id":"o-twice"}}`))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Add(headers[i], headers[i+1])
		}
		resp, err := h.api.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return response{Status: resp.StatusCode, Body: b}
	}
	before := h.footprint()
	for _, hs := range [][]string{
		{"Idempotency-Key", "twice-a", "Idempotency-Key", "twice-b"},
		{"Idempotency-Key", "twice-a", "idempotency-key", "twice-b"},
		{"Idempotency-Key", "twice-a", "Tenaz-Not-Before", "2030-01-01T00:00:00Z", "Tenaz-Not-Before", "2030-01-02T00:00:00Z"},
	} {
		r := post(hs...)
		if r.Status != http.StatusBadRequest || r.errorCode(t) != "malformed" || !strings.Contains(string(r.Body), "given twice") {
			t.Fatalf("%q: want 400 malformed, saying the header is given twice, got %d %s", hs, r.Status, r.Body)
		}
	}
	for _, key := range []string{"twice-a", "twice-b"} {
		if rec, ok := h.Lookup(event.ID("acme", key)); ok {
			t.Fatalf("want no event, got record %+v", rec)
		}
	}
	if got := h.footprint(); got != before {
		t.Fatalf("want INTAKE, EVENTS, DEAD and the state bucket untouched %+v, got %+v", before, got)
	}
	if r := post("Idempotency-Key", "twice-a", "Idempotency-Key", "twice-a"); r.Status != http.StatusAccepted {
		t.Fatalf("the same key twice: want 202, got %d %s", r.Status, r.Body)
	}
	if _, ok := h.Lookup(event.ID("acme", "twice-a")); !ok {
		t.Fatal("the same key twice: want its event")
	}
}

// The headers a submission over NATS gives its fields in are read over
// HTTP too, where the body leaves the field out: a producer moving from
// NATS to HTTP keeps its delay, entity and order. A header and a body
// field that disagree are refused, naming both. Before, the headers were
// ignored: a Tenaz-Not-Before a month ahead ran at once.
func TestHTTPFieldHeaders(t *testing.T) {
	t.Parallel()
	h := setup(t, baseYAML)
	post := func(key, body string, headers ...string) response {
		return h.do(http.MethodPost, "/v1/events", body, append([]string{"Idempotency-Key", key}, headers...)...)
	}
	at := time.Now().Add(30 * 24 * time.Hour).UTC().Truncate(time.Second)
	later := at.Format(time.RFC3339)
	r := post("hdr-1", `{"account":"acme","kind":"order.create","payload":{"order_id":"o-h1"}}`,
		"Tenaz-Not-Before", later, "Tenaz-Ordering-Key", "cust-7", "Tenaz-Entity-Id", "o-h1")
	if r.Status != http.StatusAccepted {
		t.Fatalf("fields as headers: want 202, got %d %s", r.Status, r.Body)
	}
	rec := h.WaitStatus(event.ID("acme", "hdr-1"), state.Scheduled, servicetest.WaitFor)
	if rec.NextRunAt == nil || rec.NextRunAt.Sub(at).Abs() > time.Second || rec.OrderingKey != "cust-7" || rec.EntityID != "o-h1" {
		t.Fatalf("want the headers' not_before, ordering_key and entity_id, got next_run_at %v, %q, %q", rec.NextRunAt, rec.OrderingKey, rec.EntityID)
	}
	if r := post("hdr-2", `{"account":"acme","kind":"order.create","not_before":"`+later+`","payload":{"order_id":"o-h2"}}`, "Tenaz-Not-Before", later); r.Status != http.StatusAccepted {
		t.Fatalf("a header that agrees with the body: want 202, got %d %s", r.Status, r.Body)
	}
	before := h.footprint()
	r = post("hdr-3", `{"account":"acme","kind":"order.create","ordering_key":"cust-8","payload":{"order_id":"o-h3"}}`, "Tenaz-Ordering-Key", "cust-9")
	if r.Status != http.StatusBadRequest || r.errorCode(t) != "malformed" || !strings.Contains(string(r.Body), "Tenaz-Ordering-Key") || !strings.Contains(string(r.Body), "ordering_key") {
		t.Fatalf("a header that disagrees with the body: want 400 malformed naming both, got %d %s", r.Status, r.Body)
	}
	if r := post("hdr-4", `{"account":"acme","kind":"order.create","payload":{"order_id":"o-h4"}}`, "Tenaz-Not-Before", "soon"); r.Status != http.StatusBadRequest || !strings.Contains(string(r.Body), "not_before") {
		t.Fatalf("a header that is not a time: want 400 naming not_before, got %d %s", r.Status, r.Body)
	}
	if got := h.footprint(); got != before {
		t.Fatalf("refused: want INTAKE, EVENTS, DEAD and the state bucket untouched %+v, got %+v", before, got)
	}
}
