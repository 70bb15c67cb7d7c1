package ingest_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/httpapi"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/services/ingest"
)

// FuzzSubmit sends any body with any Idempotency-Key header to
// POST /v1/events on a real ingest (real nats-server, real intake
// consumer). Every answer is a 4xx with a JSON error naming a code, or a
// 200/202 whose event is stored under the id the key makes; sending the
// same request again answers 200 with the same event. Never a 5xx, never a
// panic, never an accepted submission that cannot be read back.
func FuzzSubmit(f *testing.F) {
	for _, s := range []struct{ body, key string }{
		{`{"account":"acme","kind":"order.create","payload":{"order_id":"o-1"}}`, "k-1"},
		{`{"account":"acme","kind":"order.create","payload":{"order_id":"o-1"}}`, ""},
		{`{"account":"acme","kind":"order.create","not_before":"2099-01-01T00:00:00Z","payload":{"order_id":"o-2"}}`, "k-2"},
		{`{"account":"acme","kind":"order.create","not_before":"yesterday","payload":{}}`, "k-3"},
		{`{"account":"ac.me","kind":"order.create","payload":{}}`, "k-4"},
		{`{"account":"acme","kind":"order.>","payload":{}}`, "k-5"},
		{`{"account":"acme","kind":"nope","payload":{}}`, "k-6"},
		{`{"account":"acme","kind":"order.create","payload":null}`, "k-7"},
		{`{"account":"acme","kind":"order.create","payload":{}}}`, "k 8\x00"},
		{`[]`, ""}, {``, ""}, {`{"account":"acme"`, "k-9"},
		// Payloads decoders read two ways: refused on every way in.
		{`{"account":"acme","kind":"order.create","payload":{"order_id":"o-1","amount":1,"amount":2}}`, "k-10"},
		{`{"account":"acme","kind":"order.create","payload":{"order_id":"o-1","note":"\ud800"}}`, ""},
		{`{"account":"acme","kind":"order.create","payload":{"order_id":"o-1","note":"\ud83d\ude00"}}`, "k-11"},
	} {
		f.Add([]byte(s.body), s.key)
	}
	mux := fuzzIngest(f, `
http: {max_body_bytes: 4096}
targets: {erp: {url: "http://127.0.0.1:1/orders"}}
kinds: {order.create: {target: erp, entity: order_id}}
`, 10*time.Second)
	post := func(body []byte, key string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/v1/events", bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header[names.HeaderIdempotencyKey] = []string{key} // as sent, even a value net/http would refuse to write
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		return w
	}
	f.Fuzz(func(t *testing.T, body []byte, key string) {
		w := post(body, key)
		switch {
		case w.Code >= 400 && w.Code < 500:
			var e httpapi.ErrorBody
			if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Error.Code == "" || e.Error.Message == "" {
				t.Fatalf("submission %q key %q: %d without a JSON error: %s", body, key, w.Code, w.Body)
			}
			return
		case w.Code != http.StatusOK && w.Code != http.StatusAccepted:
			t.Fatalf("submission %q key %q: want 200, 202 or a 4xx, got %d %s", body, key, w.Code, w.Body)
		}
		var v ingest.View
		if err := json.Unmarshal(w.Body.Bytes(), &v); err != nil || v.ID == "" {
			t.Fatalf("submission %q key %q: %d with a body that is not an event: %s", body, key, w.Code, w.Body)
		}
		if err := names.ValidateAccount(v.Account); err != nil {
			t.Fatalf("submission %q accepted for account %q: %v", body, v.Account, err)
		}
		// The HTTP way in asks of a payload what every way in asks
		// (event.CheckPayload, held to a reference in pkg/event): no
		// payload that decoders read two ways gets past it.
		if s, err := event.ParseSubmission(body); err != nil || event.CheckPayload(s.Payload) != nil {
			t.Fatalf("submission %q accepted, though its payload is refused: %v / %v", body, err, event.CheckPayload(s.Payload))
		}
		if key != "" && v.ID != event.ID(v.Account, key) {
			t.Fatalf("submission %q key %q: id %s is not the key's %s", body, key, v.ID, event.ID(v.Account, key))
		}
		r := httptest.NewRequest(http.MethodGet, "/v1/events/"+v.ID, nil)
		g := httptest.NewRecorder()
		mux.ServeHTTP(g, r)
		var got ingest.View
		if g.Code != http.StatusOK || json.Unmarshal(g.Body.Bytes(), &got) != nil || got.ID != v.ID || got.Account != v.Account || got.Kind != v.Kind {
			t.Fatalf("submission %q key %q accepted as %+v, read back %d %s", body, key, v, g.Code, g.Body)
		}
		if key == "" {
			return // a new key each time: not a duplicate
		}
		again := post(body, key)
		var dup ingest.View
		if again.Code != http.StatusOK || json.Unmarshal(again.Body.Bytes(), &dup) != nil || dup.ID != v.ID {
			t.Fatalf("the same submission again (%q key %q): want 200 with %s, got %d %s", body, key, v.ID, again.Code, again.Body)
		}
	})
}
