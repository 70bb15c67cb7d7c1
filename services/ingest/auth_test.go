package ingest_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tenaz/tenaz/pkg/auth"
	"github.com/tenaz/tenaz/pkg/daemon"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/services/ingest"
)

// Keys of the auth tests: acme may submit and read, acme-ops may also
// cancel, globex may read and cancel its own account's events, alice is
// an operator. acme-slow submits at most 2 at once, then 1 a minute.
var (
	keyAcme, hashAcme       = newKey()
	keyAcmeOps, hashAcmeOps = newKey()
	keyGlobex, hashGlobex   = newKey()
	keyAlice, hashAlice     = newKey()
	keySlow, hashSlow       = newKey()
)

func newKey() (string, string) {
	k, h, err := auth.NewKey()
	if err != nil {
		panic(err)
	}
	return k, h
}

var authYAML = baseYAML + `
auth:
  keys:
    acme:      {account: acme, scopes: [submit, read], hash: "` + hashAcme + `"}
    acme-ops:  {account: acme, scopes: [read, operate], hash: "` + hashAcmeOps + `"}
    globex:    {account: globex, scopes: [submit, read, operate], hash: "` + hashGlobex + `"}
    acme-slow: {account: acme, scopes: [submit], hash: "` + hashSlow + `", rate: 1/m, burst: 2}
  operators:
    alice: {hash: "` + hashAlice + `"}
`

// secureAPI starts an ingest service with auth (and the logger, if any)
// behind the same handler a binary serves: Guard over the routes, the body
// limit over everything. It returns the API's base URL.
func secureAPI(t *testing.T, h *harness, log *zerolog.Logger) string {
	t.Helper()
	a, err := auth.New(h.cfg)
	if err != nil {
		t.Fatalf("auth.New: %v", err)
	}
	nc, _ := h.Srv.Conn(t)
	svc, err := ingest.New(ingest.Options{Conn: nc, Config: h.cfg, Auth: a, Logger: log})
	if err != nil {
		t.Fatalf("ingest.New: %v", err)
	}
	servicetest.Run(t, h.Ctx(), svc)
	mux := http.NewServeMux()
	svc.Routes(mux)
	api := httptest.NewServer(daemon.Handler(h.cfg, a, mux))
	t.Cleanup(api.Close)
	return api.URL
}

// call sends one request with an optional bearer key.
func (h *harness) call(base, method, path, key, body string) response {
	h.t.Helper()
	req, err := http.NewRequestWithContext(h.Ctx(), method, base+path, strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{Status: resp.StatusCode, Body: b}
}

// Every refusal of the issue: no key, a forged key, the wrong scope, the
// wrong account (403 on submit, 404 on another account's event — the same
// answer as an id that does not exist, so ids do not leak), and an
// operator who may read and cancel any account's event, recorded by name.
func TestAuthRefusals(t *testing.T) {
	t.Parallel()
	h := setup(t, authYAML)
	api := secureAPI(t, h, nil)
	later := `"not_before":"` + time.Now().Add(time.Hour).UTC().Format(time.RFC3339) + `"` // stays scheduled: cancellable
	acmeBody := `{"account":"acme","kind":"order.create","payload":{"order_id":"o-1"},` + later + `}`

	r := h.call(api, "POST", "/v1/events", keyAcme, acmeBody)
	if r.Status != http.StatusAccepted {
		t.Fatalf("acme's key submitting for acme: want 202, got %d %s", r.Status, r.Body)
	}
	var v view
	r.json(t, &v)
	id := v.ID
	unknown := "/v1/events/ev_00000000000000000000000000"
	notFound := h.call(api, "GET", unknown, keyGlobex, "")

	for _, c := range []struct {
		name, method, path, key, body string
		want                          int
		code                          string
	}{
		{"no key", "POST", "/v1/events", "", acmeBody, 401, "unauthorized"},
		{"forged key", "POST", "/v1/events", auth.KeyPrefix + strings.Repeat("x", 43), acmeBody, 401, "unauthorized"},
		{"hash as key", "GET", "/v1/events/" + id, hashAcme, "", 401, "unauthorized"},
		{"no key on read", "GET", "/v1/events/" + id, "", "", 401, "unauthorized"},
		{"wrong scope: read-only submit", "POST", "/v1/events", keyAcmeOps, acmeBody, 403, "forbidden"},
		{"wrong scope: cancel without operate", "DELETE", "/v1/events/" + id, keyAcme, "", 403, "forbidden"},
		{"other account's submit", "POST", "/v1/events", keyGlobex, acmeBody, 403, "forbidden"},
		{"other account's read", "GET", "/v1/events/" + id, keyGlobex, "", 404, "not_found"},
		{"other account's history", "GET", "/v1/events/" + id + "/history", keyGlobex, "", 404, "not_found"},
		{"other account's cancel", "DELETE", "/v1/events/" + id, keyGlobex, "", 404, "not_found"},
		{"operators do not submit", "POST", "/v1/events", keyAlice, acmeBody, 403, "forbidden"},
	} {
		r := h.call(api, c.method, c.path, c.key, c.body)
		if r.Status != c.want || r.errorCode(t) != c.code {
			t.Errorf("%s: want %d %s, got %d %s", c.name, c.want, c.code, r.Status, r.Body)
		}
	}
	// Another account's event looks exactly like one that does not exist.
	other := h.call(api, "GET", "/v1/events/"+id, keyGlobex, "")
	if want := strings.Replace(string(notFound.Body), "ev_00000000000000000000000000", id, 1); string(other.Body) != want {
		t.Errorf("want another account's event answered as a missing one:\n%s\ngot\n%s", want, other.Body)
	}
	// Nothing the refused calls did reached the record.
	if rec := h.WaitStatus(id, state.Scheduled, servicetest.WaitFor); len(rec.History) == 0 {
		t.Fatalf("want the event's history, got none")
	}
	for _, c := range []struct{ name, key string }{{"own account", keyAcme}, {"operator", keyAlice}} {
		if r := h.call(api, "GET", "/v1/events/"+id, c.key, ""); r.Status != 200 {
			t.Errorf("%s reads: want 200, got %d %s", c.name, r.Status, r.Body)
		}
	}
	if r := h.call(api, "GET", "/v1/events/"+id+"/history", keyAlice, ""); r.Status != 200 {
		t.Errorf("operator reads history: want 200, got %d %s", r.Status, r.Body)
	}
	r = h.call(api, "DELETE", "/v1/events/"+id, keyAlice, "")
	if r.Status != 200 {
		t.Fatalf("operator cancels acme's event: want 200, got %d %s", r.Status, r.Body)
	}
	rec := h.WaitStatus(id, state.Cancelled, servicetest.WaitFor)
	if last := rec.History[len(rec.History)-1]; last.Actor != "api:operator:alice" {
		t.Errorf("want the cancel recorded as api:operator:alice, got %q", last.Actor)
	}
}

// A key's submission that names no account is its account's, as a
// CloudEvent without tenazaccount is; without auth an account is needed.
func TestKeySubmitsForItsOwnAccount(t *testing.T) {
	t.Parallel()
	h := setup(t, authYAML)
	api := secureAPI(t, h, nil)
	r := h.call(api, "POST", "/v1/events", keyGlobex, `{"kind":"order.create","payload":{"order_id":"o-own"}}`)
	var v view
	if r.Status != http.StatusAccepted {
		t.Fatalf("globex's key, no account: want 202, got %d %s", r.Status, r.Body)
	}
	if r.json(t, &v); v.Account != "globex" {
		t.Fatalf("globex's key, no account: want globex's event, got %+v", v)
	}
	if r := h.call(api, "POST", "/v1/events", keyAlice, `{"kind":"order.create","payload":{"order_id":"o-op"}}`); r.Status != http.StatusForbidden {
		t.Errorf("an operator, no account: want 403 (operators do not submit), got %d %s", r.Status, r.Body)
	}
	open := setup(t, baseYAML)
	if r := open.do(http.MethodPost, "/v1/events", `{"kind":"order.create","payload":{"order_id":"o-none"}}`); r.Status != http.StatusBadRequest || r.errorCode(t) != "invalid_account" {
		t.Errorf("no auth, no account: want 400 invalid_account, got %d %s", r.Status, r.Body)
	}
}

// Submissions over a key's rate are answered 429 with Retry-After and
// are not accepted; another key of the same account is not slowed.
func TestAuthRateLimit(t *testing.T) {
	t.Parallel()
	h := setup(t, authYAML)
	api := secureAPI(t, h, nil)
	body := func(i int) string {
		return `{"account":"acme","kind":"order.create","payload":{"order_id":"rl-` + strconv.Itoa(i) + `"}}`
	}
	for i := range 2 {
		if r := h.call(api, "POST", "/v1/events", keySlow, body(i)); r.Status != http.StatusAccepted {
			t.Fatalf("submission %d within the burst: want 202, got %d %s", i, r.Status, r.Body)
		}
	}
	before := h.footprint()
	req, _ := http.NewRequest("POST", api+"/v1/events", strings.NewReader(body(2)))
	req.Header.Set("Authorization", "Bearer "+keySlow)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	ra, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
	if resp.StatusCode != http.StatusTooManyRequests || ra < 1 || ra > 60 {
		t.Fatalf("over the rate: want 429 with Retry-After in 1..60, got %d %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if after := h.footprint(); after != before {
		t.Fatalf("a refused submission left a trace: before %+v, after %+v", before, after)
	}
	if r := h.call(api, "POST", "/v1/events", keyAcme, body(3)); r.Status != http.StatusAccepted {
		t.Fatalf("another key of acme: want 202, got %d %s", r.Status, r.Body)
	}
}

// The body limit holds on every route behind a binary's handler,
// including those that read no body themselves.
func TestAuthBodyLimit(t *testing.T) {
	t.Parallel()
	h := setup(t, authYAML)
	api := secureAPI(t, h, nil)
	big := `{"account":"acme","kind":"order.create","payload":{"order_id":"` + strings.Repeat("x", 200<<10) + `"}}`
	if r := h.call(api, "POST", "/v1/events", keyAcme, big); r.Status != http.StatusRequestEntityTooLarge {
		t.Fatalf("an oversized submission: want 413, got %d %s", r.Status, r.Body)
	}
}

// Neither a key nor a payload ever reaches the logs, even at debug level
// and on the refusal paths.
func TestSecretsNotLogged(t *testing.T) {
	t.Parallel()
	h := setup(t, authYAML)
	var buf servicetest.LogBuffer
	log := zerolog.New(&buf).Level(zerolog.DebugLevel)
	api := secureAPI(t, h, &log)
	const secret = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"
	h.startDispatcher("d1")

	r := h.call(api, "POST", "/v1/events", keyAcme, `{"account":"acme","kind":"order.create","payload":{"order_id":"s-1","card":"`+secret+`"}}`)
	if r.Status != http.StatusAccepted {
		t.Fatalf("submit: want 202, got %d %s", r.Status, r.Body)
	}
	var v view
	r.json(t, &v)
	h.WaitStatus(v.ID, state.Done, servicetest.WaitFor)
	h.call(api, "POST", "/v1/events", keyGlobex, `{"account":"acme","kind":"order.create","payload":{"card":"`+secret+`"}}`)
	h.call(api, "POST", "/v1/events", keyAcme, `{"account":"acme","kind":"order.create","payload":{"card":"`+secret+`"`)
	h.call(api, "POST", "/v1/events", keyAcme, `{"account":"acme","kind":"no.such.kind","payload":{"card":"`+secret+`"}}`)
	h.call(api, "GET", "/v1/events/"+v.ID, keyAcme+"x", "")
	h.call(api, "DELETE", "/v1/events/"+v.ID, keyGlobex, "")

	out := buf.String()
	if !strings.Contains(out, "ingest started") {
		t.Fatalf("want the service's debug log in the buffer, got %q", out)
	}
	for _, s := range []string{secret, keyAcme, keyGlobex, hashAcme[len("sha256:"):], "Bearer"} {
		if strings.Contains(out, s) {
			t.Errorf("the log contains %q:\n%s", s, out)
		}
	}
}
