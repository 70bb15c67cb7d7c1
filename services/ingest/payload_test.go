package ingest_test

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/servicetest"
)

// Messages of the two refusals of a payload that decoders may read two
// ways (event.CheckPayload).
const (
	sayLoneSurrogate = "lone UTF-16 surrogate escape"
	sayAmountTwice   = `gives the member \"amount\" twice` // as the JSON error body writes it
)

// A payload decoders may read two ways is refused 400 malformed over
// HTTP, in every form of submission, and nothing of it is kept: with a
// lone surrogate escape, "A\ud800", "A\udbff" and "A\ufffd" would be one
// event (one derived key; the same under one key), and with a member
// given twice tenaz would hash and schema-check the last value while the
// target may read the first. Before, the first of each pair was taken
// (202) and the second answered 200 as the same event, though different.
func TestHTTPPayloadReadTwoWaysRefused(t *testing.T) {
	t.Parallel()
	h := setup(t, schemaYAML)
	sub := func(kind, payload string) string {
		return `{"account":"acme","kind":"` + kind + `","payload":` + payload + `}`
	}
	ce := func(data string) string {
		return `{"specversion":"1.0","type":"order.create","source":"/erp","id":"ce-x","tenazaccount":"acme",` + data + `}`
	}
	ceBinary := []string{"Content-Type", "application/json", "ce-specversion", "1.0", "ce-type", "order.create",
		"ce-source", "/erp", "ce-id", "ce-y", "ce-tenazaccount", "acme"}
	b64 := base64.StdEncoding.EncodeToString
	before := h.footprint()
	for _, c := range []struct {
		name, body, say string
		headers         []string
	}{
		{"lone high surrogate, no key", sub("order.create", `{"order_id":"o-1","note":"A\ud800"}`), sayLoneSurrogate, nil},
		{"another lone surrogate, no key", sub("order.create", `{"order_id":"o-1","note":"A\udbff"}`), sayLoneSurrogate, nil},
		{"lone low surrogate in a name", sub("order.create", `{"order_id":"o-1","\udc00":1}`), sayLoneSurrogate, nil},
		{"member twice, a key", sub("order.create", `{"order_id":"o-2","amount":100,"amount":5}`), sayAmountTwice, []string{"Idempotency-Key", "k-amount"}},
		{"member twice again, the same key", sub("order.create", `{"order_id":"o-2","amount":999999,"amount":5}`), sayAmountTwice, []string{"Idempotency-Key", "k-amount"}},
		{"member twice, deep", sub("order.create", `{"order_id":"o-3","lines":[{"amount":1,"amount":2}]}`), `twice in the object at \"/lines/0\"`, nil},
		// The schema sees "ok"; a first-wins target would get 5.
		{"member twice past the schema", sub("invoice.send", `{"invoice_id":5,"invoice_id":"ok"}`), `gives the member \"invoice_id\" twice`, nil},
		{"CloudEvent data, member twice", ce(`"data":{"order_id":"o-4","amount":1,"amount":2}`), sayAmountTwice, []string{"Content-Type", "application/cloudevents+json"}},
		{"CloudEvent data_base64, member twice", ce(`"data_base64":"` + b64([]byte(`{"order_id":"o-4","amount":1,"amount":2}`)) + `"`), sayAmountTwice,
			[]string{"Content-Type", "application/cloudevents+json"}},
		{"CloudEvent data, lone surrogate", ce(`"data":{"order_id":"o-4","note":"\ud800"}`), sayLoneSurrogate, []string{"Content-Type", "application/cloudevents+json"}},
		{"binary CloudEvent, member twice", `{"order_id":"o-5","amount":1,"amount":2}`, sayAmountTwice, ceBinary},
		{"binary CloudEvent, lone surrogate", `{"order_id":"o-5","note":"\udfff"}`, sayLoneSurrogate, ceBinary},
	} {
		r := h.do(http.MethodPost, "/v1/events", c.body, c.headers...)
		if r.Status != http.StatusBadRequest || r.errorCode(t) != "malformed" || !strings.Contains(string(r.Body), c.say) {
			t.Errorf("%s: want 400 malformed saying %q, got %d %s", c.name, c.say, r.Status, r.Body)
		}
	}
	if got := h.footprint(); got != before {
		t.Fatalf("refused payloads: want INTAKE, EVENTS, DEAD and the state bucket untouched %+v, got %+v", before, got)
	}

	// The same text, written as what it is, is taken: each its own event.
	ids := map[string]string{}
	for _, p := range []string{
		`{"order_id":"o-1","note":"A\ufffd"}`,
		`{"order_id":"o-1","note":"A\ud83d\ude00"}`, // a surrogate pair
		`{"order_id":"o-1","note":"A\\ud800"}`,      // a backslash, then text
		`{"order_id":"o-1","note":"A","amount":5}`,
	} {
		r := h.do(http.MethodPost, "/v1/events", sub("order.create", p))
		var v view
		r.json(t, &v)
		if r.Status != http.StatusAccepted || v.ID == "" {
			t.Fatalf("POST %s: want 202, got %d %s", p, r.Status, r.Body)
		}
		if prev, ok := ids[v.ID]; ok {
			t.Fatalf("POST %s: want a new event, got %s, the event of %s", p, v.ID, prev)
		}
		ids[v.ID] = p
	}
}

// The submit endpoint (NATS request and reply) refuses such a payload as
// POST /v1/events does, 400 malformed.
func TestMicroSubmitPayloadReadTwoWaysRefused(t *testing.T) {
	t.Parallel()
	h := setup(t, baseYAML)
	for _, c := range []struct{ data, say string }{
		{`{"account":"acme","kind":"order.create","idempotency_key":"k-m1","payload":{"order_id":"o-1","amount":1,"amount":2}}`, `gives the member "amount" twice`},
		{`{"account":"acme","kind":"order.create","payload":{"order_id":"o-1","note":"\ud800"}}`, sayLoneSurrogate},
	} {
		var rep *nats.Msg
		var err error
		// Right after start the endpoint's subscription may not have
		// reached the server yet: no responders is worth another try.
		natstest.Eventually(t, servicetest.WaitFor, func() bool {
			rep, err = h.NC.Request("tenaz.api.ingest.submit", []byte(c.data), 5*time.Second)
			return !errors.Is(err, nats.ErrNoResponders)
		}, "the submit endpoint never answered")
		if err != nil {
			t.Fatalf("submit %s: want an answer, got %v", c.data, err)
		}
		var body struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		_ = json.Unmarshal(rep.Data, &body)
		if rep.Header.Get("Tenaz-Status") != "400" || body.Error.Code != "malformed" || !strings.Contains(body.Error.Message, c.say) {
			t.Errorf("submit %s: want 400 malformed saying %q, got %q %s", c.data, c.say, rep.Header.Get("Tenaz-Status"), rep.Data)
		}
	}
	if n := h.StateMsgs(); n != 0 {
		t.Fatalf("state bucket: want no event, got %d records", n)
	}
}

// Published to INTAKE, the second of two payloads that differ only in
// the first of a member given twice is no duplicate of the first: both
// are refused and kept in DEAD as malformed (nobody is told over NATS),
// and no event is made of either.
func TestNATSPayloadMemberTwiceKeptInDead(t *testing.T) {
	t.Parallel()
	h := setup(t, baseYAML)
	bodies := []string{`{"order_id":"o-1","amount":100,"amount":5}`, `{"order_id":"o-1","amount":999999,"amount":5}`}
	for _, b := range bodies {
		h.publishIntake(intakeOrderCreate, []byte(b), names.HeaderIdempotencyKey, "k-dup")
	}
	var raws []string
	natstest.Eventually(t, servicetest.WaitFor, func() bool { raws = h.deadRaws("acme"); return len(raws) == len(bodies) },
		"DEAD: want both submissions kept, got %v", natstest.Lazy(func() any { return raws }))
	for _, e := range h.deadEntries() {
		if e.Class != "malformed" || !strings.Contains(e.Error, `gives the member "amount" twice`) {
			t.Errorf("DEAD entry of %s: want class malformed naming the member, got %s: %s", e.Raw, e.Class, e.Error)
		}
	}
	if rec, ok := h.Lookup(event.ID("acme", "k-dup")); ok {
		t.Fatalf("want no event, got %+v", rec)
	}
}
