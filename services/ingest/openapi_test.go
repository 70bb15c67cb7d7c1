package ingest_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/httpapi/apitest"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/webhook"
)

// contractYAML is authYAML with a target that sends webhooks.
var contractYAML = `
http: {max_body_bytes: 4096}
targets:
  erp: {url: "${TARGET}/api/{{.Kind}}", timeout: 5s}
  bureau: {url: "${TARGET}/proposals", timeout: 3s, callback_secret: "` + cbSecret + `"}
kinds:
  order.create: {target: erp, entity: order_id}
` + strings.TrimPrefix(authYAML, baseYAML)

// Every route of ingest, driven through the binaries' handler (the Guard,
// the keys' scopes and rates) by a client that checks each request and
// answer against the OpenAPI document: every success and error answer the
// document gives these routes is produced once, and none it does not give.
// The 503s come last, with the NATS server stopped.
func TestOpenAPIContractIngest(t *testing.T) {
	t.Parallel()
	h := setup(t, contractYAML)
	base := secureAPI(t, h, nil)
	c := apitest.New(t)
	client := c.Client()
	t.Cleanup(client.CloseIdleConnections)
	send := func(method, path, key, body string, headers ...string) response {
		t.Helper()
		r := servicetest.Send(t, h.Ctx(), client, method, base+path, key, body, headers...)
		return response{Status: r.Status, Body: r.Body}
	}
	want := func(r response, status int, what string) {
		t.Helper()
		if r.Status != status {
			t.Errorf("%s: want %d, got %d", what, status, r.Status)
		}
	}
	order := func(key string) string {
		return `{"account":"acme","kind":"order.create","payload":{"order_id":"` + key + `"}}`
	}

	// POST /v1/events
	want(send("POST", "/v1/events", keyAcme, order("c-1"), "Idempotency-Key", "c-1"), 202, "a new submission")
	want(send("POST", "/v1/events", keyAcme, order("c-1"), "Idempotency-Key", "c-1"), 200, "the same submission again")
	want(send("POST", "/v1/events", keyAcme, ceStructured, "Content-Type", "application/cloudevents+json"), 202, "a structured CloudEvent")
	want(send("POST", "/v1/events", keyAcme, `{"order_id":"c-b"}`, "ce-specversion", "1.0", "ce-id", "c-b", "ce-source", "/erp",
		"ce-type", "order.create"), 202, "a binary CloudEvent")
	want(send("POST", "/v1/events", keyAcme, `{"account":"acme"`), 400, "malformed JSON")
	want(send("POST", "/v1/events", keyAcme, ceStructured, "Content-Type", "application/cloudevents+json", "Idempotency-Key", "x"), 400, "a CloudEvent whose id differs from its key")
	want(send("POST", "/v1/events", "", order("c-2")), 401, "no key")
	want(send("POST", "/v1/events", keyAcme, strings.Replace(order("c-3"), "acme", "globex", 1)), 403, "another account's submission")
	want(send("POST", "/v1/events", keyAcme, order("c-other"), "Idempotency-Key", "c-1"), 409, "a key reused for another payload")
	want(send("POST", "/v1/events", keyAcme, order(strings.Repeat("x", 5000))), 413, "a payload over max_body_bytes")
	want(send("POST", "/v1/events", keyAcme, strings.Replace(order("c-4"), "order.create", "order.unknown", 1)), 422, "an unknown kind")
	for i, status := range []int{202, 202, 429} { // acme-slow: a burst of 2, then 1 a minute
		want(send("POST", "/v1/events", keySlow, order(fmt.Sprint("slow-", i))), status, "acme-slow's submissions")
	}

	// GET /v1/events/{id} and /history, DELETE /v1/events/{id}
	id := event.ID("acme", "c-1")
	for _, p := range []string{"/v1/events/" + id, "/v1/events/" + id + "/history"} {
		want(send("GET", p, keyAcme, ""), 200, "GET "+p)
		want(send("GET", p, "", ""), 401, "GET "+p+" without a key")
		want(send("GET", p, keySlow, ""), 403, "GET "+p+" with a submit-only key")
		want(send("GET", strings.Replace(p, id, event.ID("acme", "none"), 1), keyAcme, ""), 404, "GET of an unknown event")
	}
	want(send("DELETE", "/v1/events/"+id, keyAcme, ""), 403, "a cancel without the operate scope")
	want(send("DELETE", "/v1/events/"+id, "", ""), 401, "a cancel without a key")
	want(send("DELETE", "/v1/events/"+event.ID("acme", "none"), keyAcmeOps, ""), 404, "a cancel of an unknown event")
	want(send("DELETE", "/v1/events/"+id, keyAcmeOps, ""), 200, "a cancel of a pending event")
	want(send("DELETE", "/v1/events/"+id, keyAcmeOps, ""), 409, "a cancel of a cancelled event")

	// POST /v1/callbacks/{target} and /{account}
	signedBody := func(body string) []string { return signed("wh-"+body[:min(len(body), 8)], time.Now(), body) }
	for _, p := range []string{"/v1/callbacks/bureau", "/v1/callbacks/bureau/acme"} {
		want(send("POST", p, "", `{"id":"ev_x"}`, signedBody(`{"id":"ev_x"}`)...), 200, p+": a verified webhook of an unknown event")
		want(send("POST", p, "", `[1]`, signedBody(`[1]`)...), 400, p+": a body that is not an object")
		big := `{"pad":"` + strings.Repeat("x", 5000) + `"}`
		want(send("POST", p, "", big, signedBody(big)...), 413, p+": a body over max_body_bytes")
		want(send("POST", strings.Replace(p, "bureau", "erp", 1), "", `{}`, signedBody(`{}`)...), 404, p+": a target that takes no webhooks")
	}
	want(send("POST", "/v1/callbacks/bureau/ac.me", "", `{}`, signedBody(`{}`)...), 404, "an account that is no account name")
	for _, p := range []string{"/v1/callbacks/bureau", "/v1/callbacks/bureau/acme"} {
		h401, h429 := false, false
		forged := webhook.Headers("whsec_Zm9yZ2VkLXNlY3JldC1mb3JnZWQtc2VjcmV0LWZvcmdlZA==", "wh-f", time.Now(), []byte(`{}`))
		// The budget is the target's, over both routes, per second: keep
		// sending (a second at most past the first) until both are seen.
		for end := time.Now().Add(3 * time.Second); time.Now().Before(end) && !(h401 && h429); {
			r := send("POST", p, "", `{}`, "webhook-id", forged.Get("webhook-id"), "webhook-timestamp", forged.Get("webhook-timestamp"),
				"webhook-signature", forged.Get("webhook-signature"))
			h401, h429 = h401 || r.Status == 401, h429 || r.Status == 429
		}
		if !h401 || !h429 {
			t.Errorf("%s: forged webhooks: want 401, then 429 past the refusal budget; got 401 %v, 429 %v", p, h401, h429)
		}
	}

	want(send("GET", "/v1/openapi.json", "", ""), 200, "the document")

	// With the NATS server gone nothing can be stored or read: 503.
	h.Srv.Stop()
	var wg sync.WaitGroup
	for _, r := range []struct{ method, path, key, body string }{
		{"POST", "/v1/events", keyAcme, order("c-down")},
		{"GET", "/v1/events/" + id, keyAcme, ""},
		{"GET", "/v1/events/" + id + "/history", keyAcme, ""},
		{"DELETE", "/v1/events/" + id, keyAcmeOps, ""},
		{"POST", "/v1/callbacks/bureau", "", `{"event_id":"` + id + `"}`},
		{"POST", "/v1/callbacks/bureau/acme", "", `{"event_id":"` + id + `"}`},
	} {
		wg.Go(func() {
			var hs []string
			if strings.HasPrefix(r.path, "/v1/callbacks") {
				hs = signed("wh-down", time.Now(), r.body)
			}
			want(send(r.method, r.path, r.key, r.body, hs...), 503, r.method+" "+r.path+" with NATS down")
		})
	}
	wg.Wait()
	// Retrying an event now and cancelling its wait are deadletter's
	// (services/deadletter TestOpenAPIContractOperatorActions).
	ingest := apitest.Under("/v1/events", "/v1/callbacks", "/v1/openapi.json")
	c.Covered(t, func(op string) bool {
		return ingest(op) && !strings.HasSuffix(op, "/retry") && !strings.HasSuffix(op, "/cancel-wait") && op != "GET /v1/events"
	}, nil)
}
