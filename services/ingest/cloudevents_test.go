package ingest_test

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tenaz/tenaz/pkg/dead"
	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
)

// ceYAML adds a second kind to baseYAML.
const ceYAML = baseYAML + `  order.ship: {target: erp, attempts: 3}
`

const ceStructured = `{"specversion":"1.0","type":"order.create","source":"/erp/orders","id":"ce-1",
	"subject":"o-1","tenazaccount":"acme","partitionkey":"customer-7","time":"2026-03-01T06:00:00Z",
	"datacontenttype":"application/json","data":{"order_id":"o-1"}}`

// A structured CloudEvent over HTTP is a submission: type → kind, id →
// idempotency key, subject → entity id, partitionkey → ordering key,
// tenazaccount → account, data → payload. Sent again it is the same event.
func TestCloudEventStructuredHTTP(t *testing.T) {
	t.Parallel()
	h := setup(t, ceYAML)
	r := h.do(http.MethodPost, "/v1/events", ceStructured, "Content-Type", "application/cloudevents+json")
	if r.Status != http.StatusAccepted {
		t.Fatalf("POST a structured CloudEvent: want 202, got %d %s", r.Status, r.Body)
	}
	id := event.ID("acme", "ce-1")
	rec := h.WaitStatus(id, state.Pending, servicetest.WaitFor)
	if rec.Kind != "order.create" || rec.IdempotencyKey != "ce-1" || rec.EntityID != "o-1" || rec.OrderingKey != "customer-7" ||
		string(rec.Payload) != `{"order_id":"o-1"}` {
		t.Fatalf("want the event mapped from the CloudEvent, got %+v", rec)
	}
	if r := h.do(http.MethodPost, "/v1/events", ceStructured, "Content-Type", "application/cloudevents+json; charset=utf-8"); r.Status != http.StatusOK {
		t.Fatalf("the same CloudEvent again: want 200 (the same event), got %d %s", r.Status, r.Body)
	}
}

// A binary CloudEvent over HTTP: the ce- headers (percent-encoded) and the
// data as the body.
func TestCloudEventBinaryHTTP(t *testing.T) {
	t.Parallel()
	h := setup(t, ceYAML)
	r := h.do(http.MethodPost, "/v1/events", `{"order_id":"o-2"}`, "Content-Type", "application/json",
		"ce-specversion", "1.0", "ce-type", "order.create", "ce-source", "urn:erp", "ce-id", "ce-2",
		"ce-subject", "o-2", "ce-tenazaccount", "acme", "ce-traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	if r.Status != http.StatusAccepted {
		t.Fatalf("POST a binary CloudEvent: want 202, got %d %s", r.Status, r.Body)
	}
	rec := h.WaitStatus(event.ID("acme", "ce-2"), state.Pending, servicetest.WaitFor)
	if rec.Kind != "order.create" || rec.EntityID != "o-2" || string(rec.Payload) != `{"order_id":"o-2"}` {
		t.Fatalf("want the event mapped from the headers, got %+v", rec)
	}
}

// tenaz's headers give a CloudEvent over HTTP the fields its attributes
// leave out, as they do one published to INTAKE: Tenaz-Not-Before delays
// it (no attribute does), Tenaz-Ordering-Key and Tenaz-Entity-Id stand in
// for partitionkey and subject. Before, they were dropped without a word:
// the delayed event ran at once and the ordered one ran out of its lane.
func TestCloudEventHTTPKeepsTenazHeaders(t *testing.T) {
	t.Parallel()
	h := setup(t, ceYAML)
	due := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	r := h.do(http.MethodPost, "/v1/events", `{"order_id":"o-3"}`, "Content-Type", "application/json",
		"ce-specversion", "1.0", "ce-type", "order.create", "ce-source", "urn:erp", "ce-id", "ce-3", "ce-tenazaccount", "acme",
		"Tenaz-Not-Before", due.Format(time.RFC3339), "Tenaz-Ordering-Key", "customer-9", "Tenaz-Entity-Id", "o-3")
	if r.Status != http.StatusAccepted {
		t.Fatalf("POST a binary CloudEvent with tenaz's headers: want 202, got %d %s", r.Status, r.Body)
	}
	rec := h.WaitStatus(event.ID("acme", "ce-3"), state.Scheduled, servicetest.WaitFor)
	if rec.NextRunAt == nil || !rec.NextRunAt.Equal(due) || rec.OrderingKey != "customer-9" || rec.EntityID != "o-3" {
		t.Fatalf("want the event scheduled for %s, ordered by customer-9, of entity o-3; got next_run_at %v, %q, %q", due, rec.NextRunAt, rec.OrderingKey, rec.EntityID)
	}
}

// A bad CloudEvent is answered 400 invalid_cloudevent naming the attribute
// at fault (an unconfigured type: 422 unknown_kind naming type), and
// nothing of it is kept.
func TestCloudEventRefusalsNameTheAttribute(t *testing.T) {
	t.Parallel()
	h := setup(t, ceYAML)
	structured := func(from, to string) string { return strings.Replace(ceStructured, from, to, 1) }
	before := h.footprint()
	for _, c := range []struct {
		name    string
		body    string
		headers []string
		status  int
		code    string
		attr    string
	}{
		{"no specversion", structured(`"specversion":"1.0",`, ""), nil, 400, "invalid_cloudevent", "specversion"},
		{"specversion 0.3", structured(`"1.0"`, `"0.3"`), nil, 400, "invalid_cloudevent", "specversion"},
		{"no id", structured(`"id":"ce-1",`, ""), nil, 400, "invalid_cloudevent", "id"},
		{"id with a space", structured(`"ce-1"`, `"ce 1"`), nil, 400, "invalid_cloudevent", "id"},
		{"no source", structured(`"source":"/erp/orders",`, ""), nil, 400, "invalid_cloudevent", "source"},
		{"no type", structured(`"type":"order.create",`, ""), nil, 400, "invalid_cloudevent", "type"},
		{"type not a kind name", structured(`"order.create"`, `"com example"`), nil, 400, "invalid_cloudevent", "type"},
		{"unknown type", structured(`"order.create"`, `"com.example.order.created"`), nil, 422, "unknown_kind", "type"},
		{"no account", structured(`"tenazaccount":"acme",`, ""), nil, 400, "invalid_cloudevent", "tenazaccount"},
		{"bad time", structured(`"2026-03-01T06:00:00Z"`, `"today"`), nil, 400, "invalid_cloudevent", "time"},
		{"XML data", structured(`"application/json"`, `"application/xml"`), nil, 400, "invalid_cloudevent", "datacontenttype"},
		{"no data", structured(`,
	"datacontenttype":"application/json","data":{"order_id":"o-1"}`, ""), nil, 400, "invalid_cloudevent", "data"},
		{"a key that differs", ceStructured, []string{"Idempotency-Key", "other"}, 400, "invalid_cloudevent", "id"},
		{"an entity that differs", ceStructured, []string{"Tenaz-Entity-Id", "o-2"}, 400, "invalid_cloudevent", "subject"},
		{"an ordering key that differs", ceStructured, []string{"Tenaz-Ordering-Key", "customer-8"}, 400, "invalid_cloudevent", "partitionkey"},
		{"binary without specversion", `{}`, []string{"Content-Type", "application/json", "ce-id", "x", "ce-type", "order.create", "ce-source", "s", "ce-tenazaccount", "acme"},
			400, "invalid_cloudevent", "specversion"},
		{"binary with curl's form type", `{}`, []string{"Content-Type", "application/x-www-form-urlencoded", "ce-specversion", "1.0", "ce-id", "x",
			"ce-type", "order.create", "ce-source", "s", "ce-tenazaccount", "acme"}, 400, "invalid_cloudevent", "datacontenttype"},
	} {
		headers := c.headers
		if c.headers == nil || c.headers[0] != "Content-Type" {
			headers = append([]string{"Content-Type", "application/cloudevents+json"}, c.headers...)
		}
		r := h.do(http.MethodPost, "/v1/events", c.body, headers...)
		if r.Status != c.status || r.errorCode(t) != c.code || !strings.Contains(string(r.Body), `\"`+c.attr+`\"`) {
			t.Errorf("%s: want %d %s naming %q, got %d %s", c.name, c.status, c.code, c.attr, r.Status, r.Body)
		}
	}
	r := h.do(http.MethodPost, "/v1/events", "["+ceStructured+"]", "Content-Type", "application/cloudevents-batch+json")
	if r.Status != 400 || r.errorCode(t) != "invalid_cloudevent" || !strings.Contains(string(r.Body), "batches") {
		t.Errorf("a batch: want 400 invalid_cloudevent saying batches are not taken, got %d %s", r.Status, r.Body)
	}
	if after := h.footprint(); after != before {
		t.Fatalf("refused CloudEvents: want nothing kept, got %+v, was %+v", after, before)
	}
}

// With an API key, a CloudEvent's account is the key's unless it names
// one; naming another account is 403.
func TestCloudEventAccountOfTheKey(t *testing.T) {
	t.Parallel()
	h := setup(t, authYAML)
	base := secureAPI(t, h, nil)
	binary := func(extra ...string) response {
		req, err := http.NewRequestWithContext(h.Ctx(), http.MethodPost, base+"/v1/events", strings.NewReader(`{"order_id":"o-k"}`))
		if err != nil {
			t.Fatal(err)
		}
		for i, kv := 0, append([]string{"Authorization", "Bearer " + keyAcme, "Content-Type", "application/json", "ce-specversion", "1.0",
			"ce-type", "order.create", "ce-source", "/shop", "ce-id", "ce-k"}, extra...); i+1 < len(kv); i += 2 {
			req.Header.Set(kv[i], kv[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return response{Status: resp.StatusCode, Body: b}
	}
	if r := binary("ce-tenazaccount", "globex"); r.Status != http.StatusForbidden {
		t.Fatalf("acme's key, tenazaccount globex: want 403, got %d %s", r.Status, r.Body)
	}
	if r := binary(); r.Status != http.StatusAccepted {
		t.Fatalf("acme's key, no tenazaccount: want 202 for acme, got %d %s", r.Status, r.Body)
	}
	h.WaitStatus(event.ID("acme", "ce-k"), state.Pending, servicetest.WaitFor)
}

// Published to an intake subject with ce- headers, a binary CloudEvent is
// a submission too (the subject's account and kind; its type must agree);
// a bad one is kept in DEAD as a refused submission naming the attribute.
func TestCloudEventBinaryNATS(t *testing.T) {
	t.Parallel()
	h := setup(t, ceYAML)
	h.publishIntake("tenaz.intake.acme.order.create", []byte(`{"order_id":"o-n"}`), "content-type", "application/json",
		"ce-specversion", "1.0", "ce-type", "order.create", "ce-source", "/erp", "ce-id", "ce-n", "ce-subject", "o-n", "ce-partitionkey", "c-1")
	rec := h.WaitStatus(event.ID("acme", "ce-n"), state.Pending, servicetest.WaitFor)
	if rec.EntityID != "o-n" || rec.OrderingKey != "c-1" || rec.IdempotencyKey != "ce-n" {
		t.Fatalf("want the event mapped from the ce- headers, got %+v", rec)
	}
	bad := []struct{ attr, body string }{{"type", `{"a":1}`}, {"specversion", `{"a":2}`}, {"", `{"a":3}`}}
	h.publishIntake("tenaz.intake.acme.order.create", []byte(bad[0].body), "content-type", "application/json",
		"ce-specversion", "1.0", "ce-type", "order.ship", "ce-source", "/erp", "ce-id", "ce-b1")
	h.publishIntake("tenaz.intake.acme.order.create", []byte(bad[1].body), "content-type", "application/json",
		"ce-specversion", "0.3", "ce-type", "order.create", "ce-source", "/erp", "ce-id", "ce-b2")
	h.publishIntake("tenaz.intake.acme.order.create", []byte(bad[2].body), "Content-Type", "application/cloudevents+json")
	var entries []dead.Entry
	natstest.Eventually(t, servicetest.WaitFor, func() bool { entries = h.deadEntries(); return len(entries) == len(bad) },
		"DEAD: want the %d bad CloudEvents kept, got %v", len(bad), natstest.Lazy(func() any { return len(entries) }))
	for _, b := range bad {
		found := false
		for _, e := range entries {
			found = found || string(e.Raw) == b.body && e.Reason == dead.ReasonRejected && e.Class == "invalid_cloudevent" &&
				strings.Contains(e.Error, `"`+b.attr+`"`) == (b.attr != "") && e.RawSubject == "tenaz.intake.acme.order.create"
		}
		if !found {
			t.Errorf("DEAD: want %s kept as rejected, class invalid_cloudevent, naming %q; got %+v", b.body, b.attr, entries)
		}
	}
}

// The micro submit endpoint takes a CloudEvent in either mode, its account
// in tenazaccount.
func TestCloudEventMicroSubmit(t *testing.T) {
	t.Parallel()
	h := setup(t, ceYAML)
	request := func(data string, headers ...string) *nats.Msg {
		m := nats.NewMsg("tenaz.api.ingest.submit")
		m.Data = []byte(data)
		for i := 0; i+1 < len(headers); i += 2 {
			m.Header.Set(headers[i], headers[i+1])
		}
		var rep *nats.Msg
		var err error
		// Right after start the endpoint's subscription may not have
		// reached the server yet: no responders is worth another try.
		natstest.Eventually(t, servicetest.WaitFor, func() bool {
			rep, err = h.NC.RequestMsg(m, 5*time.Second)
			return !errors.Is(err, nats.ErrNoResponders)
		}, "submit: the endpoint never answered")
		if err != nil {
			t.Fatalf("submit: want an answer, got %v", err)
		}
		return rep
	}
	if rep := request(ceStructured, "Content-Type", "application/cloudevents+json"); rep.Header.Get("Tenaz-Status") != "202" {
		t.Fatalf("structured: want Tenaz-Status 202, got %q %s", rep.Header.Get("Tenaz-Status"), rep.Data)
	}
	h.WaitStatus(event.ID("acme", "ce-1"), state.Pending, servicetest.WaitFor)
	rep := request(`{"order_id":"o-m"}`, "content-type", "application/json", "ce-specversion", "1.0", "ce-type", "order.create",
		"ce-source", "/erp", "ce-id", "ce-m", "ce-tenazaccount", "acme")
	if rep.Header.Get("Tenaz-Status") != "202" {
		t.Fatalf("binary: want Tenaz-Status 202, got %q %s", rep.Header.Get("Tenaz-Status"), rep.Data)
	}
	h.WaitStatus(event.ID("acme", "ce-m"), state.Pending, servicetest.WaitFor)
	rep = request(`{"order_id":"o-x"}`, "content-type", "application/json", "ce-specversion", "1.0", "ce-type", "order.create",
		"ce-source", "/erp", "ce-id", "ce-x")
	if rep.Header.Get("Tenaz-Status") != "400" || !strings.Contains(string(rep.Data), `tenazaccount`) {
		t.Fatalf("binary without tenazaccount: want 400 naming tenazaccount, got %q %s", rep.Header.Get("Tenaz-Status"), rep.Data)
	}
}
