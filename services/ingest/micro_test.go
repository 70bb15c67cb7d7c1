package ingest_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/tenaz/tenaz/pkg/auth"
	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/metrics"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
)

// tenaz-ingest answers get on NATS with the record, and answers pings
// with the build's version.
func TestMicroService(t *testing.T) {
	t.Parallel()
	h := setup(t, baseYAML)
	r := h.do(http.MethodPost, "/v1/events", `{"account":"acme","kind":"order.create","payload":{"order_id":"o-m"}}`, "Idempotency-Key", "micro-1")
	if r.Status != http.StatusAccepted {
		t.Fatalf("POST: want 202, got %d %s", r.Status, r.Body)
	}
	id := event.ID("acme", "micro-1")

	m, err := h.NC.Request("tenaz.api.ingest.get", []byte(id), 5*time.Second)
	if err != nil {
		t.Fatalf("tenaz.api.ingest.get: want an answer, got %v", err)
	}
	if got := m.Header.Get("Tenaz-Status"); got != "200" {
		t.Fatalf("get: want Tenaz-Status 200, got %q (%s)", got, m.Data)
	}
	var v view
	if err := json.Unmarshal(m.Data, &v); err != nil {
		t.Fatalf("get: want JSON, got %q", m.Data)
	}
	if v.ID != id || v.Status != state.Pending || v.IdempotencyKey != "micro-1" {
		t.Fatalf("get: want {id %s, status pending, idempotency_key micro-1}, got %s", id, m.Data)
	}

	m, err = h.NC.Request("tenaz.api.ingest.get", []byte(event.ID("acme", "unknown")), 5*time.Second)
	if err != nil {
		t.Fatalf("get unknown: want an answer, got %v", err)
	}
	if got := m.Header.Get("Tenaz-Status"); got != "404" {
		t.Fatalf("get unknown: want Tenaz-Status 404, got %q (%s)", got, m.Data)
	}

	m, err = h.NC.Request("$SRV.PING.tenaz-ingest", nil, 5*time.Second)
	if err != nil {
		t.Fatalf("$SRV.PING.tenaz-ingest: want an answer, got %v", err)
	}
	var ping struct{ Name, Type, ID, Version string }
	if err := json.Unmarshal(m.Data, &ping); err != nil || ping.Name != "tenaz-ingest" || ping.Type != "io.nats.micro.v1.ping_response" || ping.ID == "" ||
		ping.Version != metrics.Build().SemVer() {
		t.Fatalf("ping: want {name tenaz-ingest, type io.nats.micro.v1.ping_response, id, version %s (the build's)}, got %s (%v)", metrics.Build().SemVer(), m.Data, err)
	}
}

// cancelAs requests tenaz.api.ingest.cancel with data and, unless key is
// "", the credential "Authorization: Bearer <key>"; it returns the answer's
// Tenaz-Status and error code.
func (h *harness) cancelAs(key, data string) (status, code string, m *nats.Msg) {
	h.t.Helper()
	msg := nats.NewMsg("tenaz.api.ingest.cancel")
	msg.Data = []byte(data)
	if key != "" {
		msg.Header.Set("Authorization", "Bearer "+key)
	}
	m, err := h.NC.RequestMsg(msg, 5*time.Second)
	if err != nil {
		h.t.Fatalf("tenaz.api.ingest.cancel: want an answer, got %v", err)
	}
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	_ = json.Unmarshal(m.Data, &e)
	return m.Header.Get("Tenaz-Status"), e.Error.Code, m
}

// tenaz.api.ingest.cancel is an operator endpoint: without the operator
// credential (none, a forged key, an API key even with the operate scope)
// it is refused and the event stays as it was; a body that names an actor
// is refused too. With the operator's key it cancels as DELETE does and
// the history records the operator the key proves, never a name the body
// gives; it answers 409 for an event that cannot be cancelled and 404 for
// an unknown one.
func TestMicroCancel(t *testing.T) {
	t.Parallel()
	h := setup(t, authYAML, withAuth())
	later := `"not_before":"` + time.Now().Add(time.Hour).UTC().Format(time.RFC3339) + `"`
	r := h.do(http.MethodPost, "/v1/events", `{"account":"acme","kind":"order.create","payload":{"order_id":"o-mc"},`+later+`}`,
		"Idempotency-Key", "micro-cancel-1", "Authorization", "Bearer "+keyAcme)
	if r.Status != http.StatusAccepted {
		t.Fatalf("POST: want 202, got %d %s", r.Status, r.Body)
	}
	id := event.ID("acme", "micro-cancel-1")
	h.WaitStatus(id, state.Scheduled, servicetest.WaitFor)
	req := `{"id":"` + id + `","reason":"customer withdrew"}`

	for _, c := range []struct {
		name, key, data, status, code string
	}{
		{"no credential", "", req, "401", "unauthorized"},
		{"forged key", auth.KeyPrefix + strings.Repeat("x", 43), req, "401", "unauthorized"},
		{"an API key with the operate scope", keyAcmeOps, req, "403", "forbidden"},
		{"a body that names the actor", keyAlice, `{"id":"` + id + `","actor":"mallory","reason":"customer withdrew"}`, "400", "malformed"},
	} {
		status, code, m := h.cancelAs(c.key, c.data)
		if status != c.status || code != c.code || m.Header.Get(micro.ErrorCodeHeader) != c.status && c.status != "400" {
			t.Errorf("cancel, %s: want Tenaz-Status %s and code %s, got %q %q %s", c.name, c.status, c.code, status, code, m.Data)
		}
	}
	if rec, _ := h.Lookup(id); rec.Status != state.Scheduled || strings.Contains(fmt.Sprint(rec.History), "mallory") {
		t.Fatalf("refused cancels must change nothing, got %s %+v", rec.Status, rec.History)
	}

	status, _, m := h.cancelAs(keyAlice, req)
	var v view
	if err := json.Unmarshal(m.Data, &v); status != "200" || err != nil || v.ID != id || v.Status != state.Cancelled {
		t.Fatalf("cancel by the operator: want 200 {id %s, status cancelled}, got %q %s (%v)", id, status, m.Data, err)
	}
	rec, _ := h.Lookup(id)
	last := rec.History[len(rec.History)-1]
	if last.Action != state.Cancel || last.Actor != "operator:alice" || last.Detail != "customer withdrew" {
		t.Fatalf("history: want the last entry {cancel, operator:alice, customer withdrew}, got %+v", last)
	}

	for _, c := range []struct {
		name, data, status, code string
	}{
		{"again", req, "409", "not_cancellable"},
		{"bare unknown id", "ev_00000000000000000000000000", "404", "not_found"},
		{"malformed", `{"id":`, "400", "malformed"},
	} {
		status, code, m := h.cancelAs(keyAlice, c.data)
		if status != c.status || code != c.code {
			t.Fatalf("cancel %s: want Tenaz-Status %s and code %s, got %q %s", c.name, c.status, c.code, status, m.Data)
		}
	}
}

// Without an Authenticator (auth disabled, embedded use) a NATS cancel is
// anonymous, and the history says so.
func TestMicroCancelAnonymous(t *testing.T) {
	t.Parallel()
	h := setup(t, baseYAML)
	r := h.do(http.MethodPost, "/v1/events", `{"account":"acme","kind":"order.create","payload":{"order_id":"o-ma"},"not_before":"`+
		time.Now().Add(time.Hour).UTC().Format(time.RFC3339)+`"}`, "Idempotency-Key", "micro-anon-1")
	if r.Status != http.StatusAccepted {
		t.Fatalf("POST: want 202, got %d %s", r.Status, r.Body)
	}
	id := event.ID("acme", "micro-anon-1")
	h.WaitStatus(id, state.Scheduled, servicetest.WaitFor)
	if status, _, m := h.cancelAs("", id); status != "200" {
		t.Fatalf("cancel: want 200, got %q %s", status, m.Data)
	}
	rec, _ := h.Lookup(id)
	if last := rec.History[len(rec.History)-1]; last.Action != state.Cancel || last.Actor != "anonymous" {
		t.Fatalf("history: want the cancel recorded as anonymous, got %+v", last)
	}
}

// An error answer of an endpoint is a micro error: the status in
// Nats-Service-Error-Code, the message in Nats-Service-Error, with the
// Tenaz-Status header and the ErrorBody the CLI reads; and the service's
// stats ($SRV.STATS, what `nats micro stats` shows) count it as an error
// of that endpoint, while a good answer counts as a request only.
func TestMicroErrorsCounted(t *testing.T) {
	t.Parallel()
	h := setup(t, baseYAML)
	r := h.do(http.MethodPost, "/v1/events", `{"account":"acme","kind":"order.create","payload":{"order_id":"o-me"}}`, "Idempotency-Key", "micro-err-1")
	if r.Status != http.StatusAccepted {
		t.Fatalf("POST: want 202, got %d %s", r.Status, r.Body)
	}
	id := event.ID("acme", "micro-err-1")
	for _, c := range []struct {
		subject, data, status, code string
	}{
		{"tenaz.api.ingest.submit", `{"account":`, "400", "malformed"},
		// Refused as POST /v1/events refuses them: a typo is not dropped
		// silently, a null payload is no submission.
		{"tenaz.api.ingest.submit", `{"account":"acme","kind":"order.create","payload":{},"ordering-key":"c-1"}`, "400", "malformed"},
		{"tenaz.api.ingest.submit", `{"account":"acme","kind":"order.create","payload":null}`, "400", "malformed"},
		{"tenaz.api.ingest.submit", `{"account":"acme","kind":"order.create","payload":{}} {}`, "400", "malformed"},
		{"tenaz.api.ingest.submit", `{"account":"acme","kind":"no.such.kind","payload":{}}`, "422", "unknown_kind"},
		{"tenaz.api.ingest.get", event.ID("acme", "unknown"), "404", "not_found"},
		{"tenaz.api.ingest.history", event.ID("acme", "unknown"), "404", "not_found"},
		{"tenaz.api.ingest.cancel", `{"id":`, "400", "malformed"},
		{"tenaz.api.ingest.get", id, "200", ""},
	} {
		m, err := h.NC.Request(c.subject, []byte(c.data), 5*time.Second)
		if err != nil {
			t.Fatalf("%s %s: want an answer, got %v", c.subject, c.data, err)
		}
		var body struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		_ = json.Unmarshal(m.Data, &body)
		gotCode, gotDesc := m.Header.Get(micro.ErrorCodeHeader), m.Header.Get(micro.ErrorHeader)
		if got := m.Header.Get("Tenaz-Status"); got != c.status || body.Error.Code != c.code {
			t.Errorf("%s %s: want Tenaz-Status %s and body code %q, got %q %s", c.subject, c.data, c.status, c.code, got, m.Data)
		}
		if c.code == "" {
			if gotCode != "" || gotDesc != "" {
				t.Errorf("%s: a good answer with micro error headers %q %q", c.subject, gotCode, gotDesc)
			}
			continue
		}
		if gotCode != c.status || gotDesc != body.Error.Message || gotDesc == "" {
			t.Errorf("%s %s: want %s %s and %s the body's message %q, got %q and %q",
				c.subject, c.data, micro.ErrorCodeHeader, c.status, micro.ErrorHeader, body.Error.Message, gotCode, gotDesc)
		}
	}

	// micro counts a request once its handler returned, after the answer
	// went out: the stats are read until they show the last one.
	type counts struct{ requests, errors int }
	want := map[string]counts{"submit": {5, 5}, "get": {2, 1}, "history": {1, 1}, "cancel": {1, 1}}
	var stats micro.Stats
	got := map[string]counts{}
	natstest.Eventually(t, 5*time.Second, func() bool {
		m, err := h.NC.Request("$SRV.STATS.tenaz-ingest", nil, 5*time.Second)
		if err != nil {
			t.Fatalf("$SRV.STATS.tenaz-ingest: want an answer, got %v", err)
		}
		if err := json.Unmarshal(m.Data, &stats); err != nil {
			t.Fatalf("stats: want micro.Stats JSON, got %q: %v", m.Data, err)
		}
		got = map[string]counts{}
		for _, ep := range stats.Endpoints {
			if _, ok := want[ep.Name]; ok {
				got[ep.Name] = counts{ep.NumRequests, ep.NumErrors}
			}
		}
		return maps.Equal(got, want)
	}, "the endpoints' stats: want %+v, got %+v", want, natstest.Lazy(func() any { return fmt.Sprintf("%+v", got) }))
	for _, ep := range stats.Endpoints {
		if ep.Name == "submit" && !strings.Contains(ep.LastError, "422") {
			t.Errorf("stats of submit: want the last error to be the 422, got %q", ep.LastError)
		}
	}
}

// The submit endpoint of an account (submit.<account>, which NATS
// permissions can grant per account) takes that account's submissions
// only: one naming no account is the subject's, one naming another
// account is refused 403, as a CloudEvent of another account is, and
// nothing is created for it.
func TestMicroSubmitOfAnAccount(t *testing.T) {
	t.Parallel()
	h := setup(t, baseYAML)
	for _, c := range []struct {
		name, key, data string
		headers         nats.Header
		status          string
		account         string // whose event is created ("": none)
	}{
		{"the subject's account", "k1", `{"account":"globex","kind":"order.create","payload":{"order_id":"o-1"},"idempotency_key":"k1"}`, nil, "202", "globex"},
		{"no account", "k2", `{"kind":"order.create","payload":{"order_id":"o-2"},"idempotency_key":"k2"}`, nil, "202", "globex"},
		{"another account", "k3", `{"account":"acme","kind":"order.create","payload":{"order_id":"o-3"},"idempotency_key":"k3"}`, nil, "403", ""},
		{"a CloudEvent of another account", "k4", `{"specversion":"1.0","id":"k4","source":"shop","type":"order.create","tenazaccount":"acme","data":{"order_id":"o-4"}}`,
			nats.Header{"Content-Type": {"application/cloudevents+json"}}, "403", ""},
		{"a CloudEvent naming no account", "k5", `{"specversion":"1.0","id":"k5","source":"shop","type":"order.create","data":{"order_id":"o-5"}}`,
			nats.Header{"Content-Type": {"application/cloudevents+json"}}, "202", "globex"},
	} {
		m := &nats.Msg{Subject: "tenaz.api.ingest.submit.globex", Data: []byte(c.data), Header: c.headers}
		ans, err := h.NC.RequestMsg(m, 5*time.Second)
		if err != nil {
			t.Fatalf("%s: want an answer, got %v", c.name, err)
		}
		if got := ans.Header.Get("Tenaz-Status"); got != c.status {
			t.Fatalf("%s: want Tenaz-Status %s, got %s %s", c.name, c.status, got, ans.Data)
		}
		key := c.key
		if c.account == "" {
			if _, ok := h.Lookup(event.ID("acme", key)); ok {
				t.Fatalf("%s: want no event of acme, got one", c.name)
			}
			continue
		}
		if rec := h.WaitStatus(event.ID(c.account, key), state.Pending, servicetest.WaitFor); rec.Account != c.account {
			t.Fatalf("%s: want %s's event, got %s's", c.name, c.account, rec.Account)
		}
	}
}

// The submit endpoint reads tenaz's field headers as POST /v1/events
// and INTAKE do: Tenaz-Not-Before delays the event, Tenaz-Ordering-Key
// orders it, Idempotency-Key keys it, each when the body leaves its
// field out, and a header that differs from its field is refused naming
// both. Before, the endpoint ignored them without a word: the delayed
// event ran at once.
func TestMicroSubmitReadsFieldHeaders(t *testing.T) {
	t.Parallel()
	h := setup(t, baseYAML)
	due := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	submit := func(data string, header nats.Header) (string, []byte) {
		t.Helper()
		ans, err := h.NC.RequestMsg(&nats.Msg{Subject: "tenaz.api.ingest.submit.acme", Data: []byte(data), Header: header}, 5*time.Second)
		if err != nil {
			t.Fatalf("submit: want an answer, got %v", err)
		}
		return ans.Header.Get("Tenaz-Status"), ans.Data
	}
	status, body := submit(`{"kind":"order.create","payload":{"order_id":"o-1"}}`,
		nats.Header{"Tenaz-Not-Before": {due.Format(time.RFC3339)}, "tenaz-ordering-key": {"cust-1"}, "Idempotency-Key": {"mh-1"}})
	if status != "202" {
		t.Fatalf("fields as headers: want 202, got %s %s", status, body)
	}
	rec := h.WaitStatus(event.ID("acme", "mh-1"), state.Scheduled, servicetest.WaitFor)
	if rec.NextRunAt == nil || !rec.NextRunAt.Equal(due) || rec.OrderingKey != "cust-1" {
		t.Fatalf("want the headers' not_before %s and ordering key cust-1, got next_run_at %v, %q", due, rec.NextRunAt, rec.OrderingKey)
	}
	before := h.footprint()
	for _, c := range []struct {
		name, data string
		header     nats.Header
		names      []string
	}{
		{"an ordering key that differs", `{"kind":"order.create","ordering_key":"cust-2","payload":{"order_id":"o-2"},"idempotency_key":"mh-2"}`,
			nats.Header{"Tenaz-Ordering-Key": {"cust-3"}}, []string{"Tenaz-Ordering-Key", "ordering_key"}},
		{"a key that differs", `{"kind":"order.create","payload":{"order_id":"o-3"},"idempotency_key":"mh-3"}`,
			nats.Header{"Idempotency-Key": {"mh-4"}}, []string{"Idempotency-Key", "idempotency_key"}},
		{"a header given twice", `{"kind":"order.create","payload":{"order_id":"o-5"},"idempotency_key":"mh-5"}`,
			nats.Header{"Tenaz-Not-Before": {due.Format(time.RFC3339)}, "tenaz-not-before": {"soon"}}, []string{"Tenaz-Not-Before"}},
		{"a header given twice, beside a CloudEvent", `{"specversion":"1.0","id":"mh-6","source":"shop","type":"order.create","data":{"order_id":"o-6"}}`,
			nats.Header{"Content-Type": {"application/cloudevents+json"}, "Tenaz-Not-Before": {due.Format(time.RFC3339)}, "tenaz-not-before": {"soon"}}, []string{"Tenaz-Not-Before"}},
	} {
		status, body := submit(c.data, c.header)
		for _, n := range c.names {
			if status != "400" || !strings.Contains(string(body), n) {
				t.Errorf("%s: want 400 naming %s, got %s %s", c.name, n, status, body)
			}
		}
	}
	if got := h.footprint(); got != before {
		t.Fatalf("refused: want nothing kept %+v, got %+v", before, got)
	}
}

// status_url is the event's status at http.public_url when it is set,
// whatever Host a client sent; without it, an HTTP answer's is at the
// request's own Host, and one over NATS, which has none, is the path,
// for a CloudEvent as for the tenaz form.
func TestStatusURL(t *testing.T) {
	t.Parallel()
	submit := func(h *harness, key string) (fromHTTP, fromNATS, fromCE string) {
		t.Helper()
		req, err := http.NewRequestWithContext(h.Ctx(), http.MethodPost, h.api.URL+"/v1/events",
			strings.NewReader(`{"account":"acme","kind":"order.create","payload":{"order_id":"`+key+`"}}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Host = "evil.example"
		req.Header.Set("Idempotency-Key", key)
		resp, err := h.api.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v, w view
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || resp.StatusCode != http.StatusAccepted {
			t.Fatalf("POST: want 202, got %d (%v)", resp.StatusCode, err)
		}
		ans, err := h.NC.Request("tenaz.api.ingest.submit", []byte(`{"account":"acme","kind":"order.create","payload":{"order_id":"`+key+`"},"idempotency_key":"`+key+`-n"}`), 5*time.Second)
		if err != nil || json.Unmarshal(ans.Data, &w) != nil || ans.Header.Get("Tenaz-Status") != "202" {
			t.Fatalf("submit over NATS: want 202, got %v %s", err, ans.Data)
		}
		var c view
		ce := nats.NewMsg("tenaz.api.ingest.submit")
		ce.Header.Set("Content-Type", "application/cloudevents+json")
		ce.Data = []byte(`{"specversion":"1.0","type":"order.create","source":"/erp","id":"` + key + `-c","tenazaccount":"acme","data":{"order_id":"` + key + `"}}`)
		ans, err = h.NC.RequestMsg(ce, 5*time.Second)
		if err != nil || json.Unmarshal(ans.Data, &c) != nil || ans.Header.Get("Tenaz-Status") != "202" {
			t.Fatalf("a CloudEvent over NATS: want 202, got %v %s", err, ans.Data)
		}
		return v.StatusURL, w.StatusURL, c.StatusURL
	}
	h := setup(t, baseYAML)
	fromHTTP, fromNATS, fromCE := submit(h, "su-1")
	if fromHTTP != "http://evil.example/v1/events/"+event.ID("acme", "su-1") || fromNATS != "/v1/events/"+event.ID("acme", "su-1-n") || fromCE != "/v1/events/"+event.ID("acme", "su-1-c") {
		t.Errorf("without http.public_url: want the request's Host over HTTP and the path over NATS, got %q, %q and %q", fromHTTP, fromNATS, fromCE)
	}
	h = setup(t, strings.Replace(baseYAML, "http: {max_body_bytes: 4096}", `http: {max_body_bytes: 4096, public_url: "https://tenaz.example.com/api/"}`, 1))
	fromHTTP, fromNATS, fromCE = submit(h, "su-2")
	if want := "https://tenaz.example.com/api/v1/events/"; fromHTTP != want+event.ID("acme", "su-2") || fromNATS != want+event.ID("acme", "su-2-n") || fromCE != want+event.ID("acme", "su-2-c") {
		t.Errorf("with http.public_url: want all under it, got %q, %q and %q", fromHTTP, fromNATS, fromCE)
	}
}
