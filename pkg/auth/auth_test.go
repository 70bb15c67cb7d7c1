package auth_test

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/tenaz/tenaz/pkg/auth"
	"github.com/tenaz/tenaz/pkg/config"
)

// keys made once for the whole file: an acme submitter/reader, a globex
// reader, and the operator alice.
var (
	acmeKey, acmeHash     = mustKey()
	globexKey, globexHash = mustKey()
	aliceKey, aliceHash   = mustKey()
)

func mustKey() (string, string) {
	k, h, err := auth.NewKey()
	if err != nil {
		panic(err)
	}
	return k, h
}

func parse(t testing.TB, doc string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(doc), func(k string) (string, bool) {
		v, ok := map[string]string{"ACME": acmeHash, "GLOBEX": globexHash, "ALICE": aliceHash}[k]
		return v, ok
	})
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}

const authYAML = `
auth:
  keys:
    acme-shop: {account: acme, scopes: [submit, read], hash: "${ACME}", rate: 1/m, burst: 2}
    globex-ro: {account: globex, scopes: [read], hash: "${GLOBEX}"}
  operators:
    alice: {hash: "${ALICE}"}
`

func newAuth(t testing.TB) *auth.Authenticator {
	t.Helper()
	a, err := auth.New(parse(t, authYAML))
	if err != nil {
		t.Fatalf("auth.New: %v", err)
	}
	return a
}

func TestNewKeyAndHash(t *testing.T) {
	t.Parallel()
	k, h, err := auth.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(k, auth.KeyPrefix) || len(k) != len(auth.KeyPrefix)+43 {
		t.Fatalf("want %s and 43 base64url characters, got %q", auth.KeyPrefix, k)
	}
	sum := sha256.Sum256([]byte(k))
	if want := "sha256:" + hex.EncodeToString(sum[:]); h != want || auth.Hash(k) != want {
		t.Fatalf("want the hash %s (as sha256sum prints), got %s and %s", want, h, auth.Hash(k))
	}
	if !config.ValidHash(h) {
		t.Fatalf("want a hash config accepts, got %s", h)
	}
	if k2, _, _ := auth.NewKey(); k2 == k {
		t.Fatal("want a new key every time")
	}
}

// With no keys, a process refuses to start unless auth is disabled
// explicitly, and the error names the key to set.
func TestNewRefusesNoKeys(t *testing.T) {
	t.Parallel()
	_, err := auth.New(parse(t, ""))
	if !errors.Is(err, auth.ErrNotConfigured) || !strings.Contains(err.Error(), "auth.disabled: true") || !strings.Contains(err.Error(), "auth.keys") {
		t.Fatalf("want ErrNotConfigured naming auth.keys and auth.disabled, got %v", err)
	}
	a, err := auth.New(parse(t, "auth: {disabled: true}\n"))
	if err != nil || !a.Disabled() {
		t.Fatalf("want a disabled authenticator, got %v, %v", a, err)
	}
}

func req(target string, headers ...string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, target, nil)
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Set(headers[i], headers[i+1])
	}
	return r
}

func basic(r *http.Request, user, pw string) *http.Request { r.SetBasicAuth(user, pw); return r }

func TestAuthenticate(t *testing.T) {
	t.Parallel()
	a := newAuth(t)
	cases := []struct {
		name    string
		r       *http.Request
		want    string // Principal.String(), or "" for an error
		wantErr error
	}{
		{"api key", req("/", "Authorization", "Bearer "+acmeKey), "key:acme-shop", nil},
		{"scheme is case-insensitive", req("/", "Authorization", "bearer "+globexKey), "key:globex-ro", nil},
		{"operator key as bearer", req("/", "Authorization", "Bearer "+aliceKey), "operator:alice", nil},
		{"operator basic", basic(req("/"), "alice", aliceKey), "operator:alice", nil},
		{"no header", req("/"), "", auth.ErrNoCredentials},
		{"wrong key", req("/", "Authorization", "Bearer "+acmeKey+"x"), "", auth.ErrBadCredentials},
		{"forged key of the right shape", req("/", "Authorization", "Bearer "+auth.KeyPrefix+strings.Repeat("A", 43)), "", auth.ErrBadCredentials},
		{"short key refused unhashed", req("/", "Authorization", "Bearer short"), "", auth.ErrBadCredentials},
		{"the hash is not the key", req("/", "Authorization", "Bearer "+acmeHash), "", auth.ErrBadCredentials},
		{"basic with another operator's name", basic(req("/"), "bob", aliceKey), "", auth.ErrBadCredentials},
		{"basic with an api key", basic(req("/"), "acme-shop", acmeKey), "", auth.ErrBadCredentials},
		{"unknown scheme", req("/", "Authorization", "Token "+acmeKey), "", auth.ErrBadCredentials},
	}
	for _, c := range cases {
		p, err := a.Authenticate(c.r)
		if c.wantErr != nil {
			if !errors.Is(err, c.wantErr) {
				t.Errorf("%s: want %v, got %v (%s)", c.name, c.wantErr, err, p)
			}
			continue
		}
		if err != nil || p.String() != c.want {
			t.Errorf("%s: want %s, got %s, %v", c.name, c.want, p, err)
		}
	}
}

func TestPrincipal(t *testing.T) {
	t.Parallel()
	a := newAuth(t)
	acme, _ := a.Authenticate(req("/", "Authorization", "Bearer "+acmeKey))
	alice, _ := a.Authenticate(req("/", "Authorization", "Bearer "+aliceKey))
	anon := auth.Principal{Anonymous: true}
	for _, c := range []struct {
		p    auth.Principal
		s    auth.Scope
		want bool
	}{
		{acme, auth.Submit, true}, {acme, auth.Read, true}, {acme, auth.Operate, false},
		{alice, auth.Submit, false}, {alice, auth.Read, true}, {alice, auth.Operate, true},
		{anon, auth.Submit, true}, {anon, auth.Operate, true},
	} {
		if got := c.p.Has(c.s); got != c.want {
			t.Errorf("%s has %s: want %v, got %v", c.p, c.s, c.want, got)
		}
	}
	if !acme.MayAccess("acme") || acme.MayAccess("globex") || !alice.MayAccess("globex") || !anon.MayAccess("x") {
		t.Error("want a key limited to its account, an operator and anonymous to any")
	}
}

// serve runs h behind a real HTTP server and returns a client call.
func serve(t *testing.T, h http.Handler) func(method, path string, headers ...string) *http.Response {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return func(method, path string, headers ...string) *http.Response {
		t.Helper()
		r, _ := http.NewRequest(method, srv.URL+path, nil)
		for i := 0; i+1 < len(headers); i += 2 {
			if headers[i] == "basic" {
				r.SetBasicAuth(headers[i+1], headers[i+2])
				i++
				continue
			}
			r.Header.Set(headers[i], headers[i+1])
		}
		resp, err := srv.Client().Do(r)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
}

// echo answers 200 with the principal it was given and the pattern it
// serves.
var echo = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	p, ok := auth.From(r.Context())
	if ok {
		w.Header().Set("X-Principal", p.String())
	}
	w.Header().Set("X-Pattern", r.Pattern)
	w.WriteHeader(http.StatusOK)
})

func TestRequire(t *testing.T) {
	t.Parallel()
	a := newAuth(t)
	mux := http.NewServeMux()
	mux.Handle("POST /v1/events", a.Require(auth.Submit, echo))
	mux.Handle("GET /v1/events/{id}", a.Require(auth.Read, echo))
	mux.Handle("DELETE /v1/events/{id}", a.Require(auth.Operate, echo))
	do := serve(t, mux)
	bearer := func(k string) []string { return []string{"Authorization", "Bearer " + k} }
	for _, c := range []struct {
		method, path string
		headers      []string
		want         int
	}{
		{"POST", "/v1/events", nil, 401},
		{"POST", "/v1/events", bearer("not-a-valid-key-but-long-enough-to-hash"), 401},
		{"POST", "/v1/events", bearer(globexKey), 403}, // read-only key
		{"POST", "/v1/events", bearer(aliceKey), 403},  // operators do not submit
		{"GET", "/v1/events/x", bearer(globexKey), 200},
		{"GET", "/v1/events/x", bearer(aliceKey), 200},
		{"DELETE", "/v1/events/x", bearer(acmeKey), 403}, // no operate scope
		{"DELETE", "/v1/events/x", bearer(aliceKey), 200},
	} {
		resp := do(c.method, c.path, c.headers...)
		if resp.StatusCode != c.want {
			t.Errorf("%s %s %v: want %d, got %d", c.method, c.path, c.headers, c.want, resp.StatusCode)
		}
		if c.want == 401 && resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s %s: want a WWW-Authenticate challenge with 401", c.method, c.path)
		}
	}
	// A nil authenticator guards nothing.
	var none *auth.Authenticator
	if h := none.Require(auth.Submit, echo); serve(t, h)("POST", "/").StatusCode != 200 {
		t.Error("want a nil Authenticator to pass requests")
	}
}

// The rate limit is per key: a token bucket of rate 1/m, burst 2. The
// third submission at once is 429 with Retry-After (about a minute).
func TestRequireRateLimit(t *testing.T) {
	t.Parallel()
	a := newAuth(t)
	do := serve(t, a.Require(auth.Submit, echo))
	for i := range 2 {
		if got := do("POST", "/", "Authorization", "Bearer "+acmeKey).StatusCode; got != 200 {
			t.Fatalf("submission %d within the burst: want 200, got %d", i, got)
		}
	}
	resp := do("POST", "/", "Authorization", "Bearer "+acmeKey)
	ra, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
	if resp.StatusCode != http.StatusTooManyRequests || ra < 50 || ra > 60 {
		t.Fatalf("over the burst: want 429 with Retry-After about 60, got %d %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	// Reads do not spend submission tokens.
	do2 := serve(t, a.Require(auth.Read, echo))
	if got := do2("GET", "/", "Authorization", "Bearer "+acmeKey).StatusCode; got != 200 {
		t.Fatalf("a read while submissions are limited: want 200, got %d", got)
	}
}

// guarded serves echo on a few of tenaz's real patterns, plus one that has
// no class, behind a.Guard.
func guarded(t *testing.T, a *auth.Authenticator) func(method, path string, headers ...string) *http.Response {
	mux := http.NewServeMux()
	for _, p := range []string{"GET /healthz", "GET /metrics", "POST /v1/callbacks/{target}", "GET /ui/{$}", "GET /ui/dead",
		"GET /v1/dead", "POST /v1/dead/{id}/replay", "POST /v1/dead/discard", "GET /v1/review", "GET /v1/events/{id}",
		"GET /v1/breakers", "POST /v1/breakers/{account}/{target}/close", "GET /v1/unclassified"} {
		mux.Handle(p, echo)
	}
	return serve(t, a.Guard(mux))
}

func TestGuard(t *testing.T) {
	t.Parallel()
	a := newAuth(t)
	do := guarded(t, a)
	bearer := func(k string) []string { return []string{"Authorization", "Bearer " + k} }
	for _, c := range []struct {
		method, path string
		headers      []string
		want         int
		principal    string
	}{
		{"GET", "/healthz", nil, 200, ""},
		{"GET", "/metrics", nil, 200, ""},
		{"POST", "/v1/callbacks/erp", nil, 200, ""},
		{"POST", "/v1/callbacks/erp", bearer(acmeKey), 200, ""}, // open routes ignore credentials
		{"GET", "/ui/", nil, 401, ""},
		{"GET", "/ui/", bearer(acmeKey), 403, ""},
		{"GET", "/ui/", []string{"basic", "alice", aliceKey}, 200, "operator:alice"},
		{"GET", "/ui/", []string{"basic", "alice", acmeKey}, 401, ""},
		{"GET", "/ui", bearer(aliceKey), 200, "operator:alice"}, // the mux's redirect to /ui/, followed
		{"GET", "/ui", bearer(acmeKey), 403, ""},
		{"GET", "/", nil, 401, ""},
		{"GET", "/v1/dead", bearer(globexKey), 403, ""},
		{"POST", "/v1/dead/abc/replay", bearer(aliceKey), 200, "operator:alice"},
		{"GET", "/v1/review", nil, 401, ""},
		{"GET", "/v1/events/x", nil, 401, ""},
		{"GET", "/v1/events/x", bearer(globexKey), 200, "key:globex-ro"},
		{"GET", "/anything/new", nil, 401, ""}, // no route: a credential first, then 404
		{"GET", "/anything/new", bearer(acmeKey), 404, ""},
		// Breakers span every account: an API key never reaches them.
		{"GET", "/v1/breakers", nil, 401, ""},
		{"GET", "/v1/breakers", bearer(acmeKey), 403, ""},
		{"POST", "/v1/breakers/globex/erp/close", bearer(acmeKey), 403, ""},
		{"GET", "/v1/breakers", bearer(aliceKey), 200, "operator:alice"},
		{"POST", "/v1/breakers/globex/erp/close", bearer(aliceKey), 200, "operator:alice"},
		// A registered route without a class is refused to everyone.
		{"GET", "/v1/unclassified", nil, 403, ""},
		{"GET", "/v1/unclassified", bearer(aliceKey), 403, ""},
	} {
		resp := do(c.method, c.path, c.headers...)
		if resp.StatusCode != c.want || resp.Header.Get("X-Principal") != c.principal {
			t.Errorf("%s %s %v: want %d as %q, got %d as %q", c.method, c.path, c.headers, c.want, c.principal,
				resp.StatusCode, resp.Header.Get("X-Principal"))
		}
	}
	// A forged cross-site form post from the operator's browser (which
	// sends the cached Basic credentials) is refused; the same request
	// from the screen's own origin, or from a non-browser client, is not.
	if r := do("POST", "/v1/dead/discard", "basic", "alice", aliceKey, "Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site"); r.StatusCode != 403 {
		t.Errorf("a cross-site POST with the operator's credentials: want 403, got %d", r.StatusCode)
	}
	if r := do("POST", "/v1/dead/discard", "basic", "alice", aliceKey, "Sec-Fetch-Site", "same-origin"); r.StatusCode != 200 {
		t.Errorf("a same-origin POST with the operator's credentials: want 200, got %d", r.StatusCode)
	}
	if r := do("GET", "/ui/", "basic", "alice", aliceKey, "Sec-Fetch-Site", "cross-site"); r.StatusCode != 200 {
		t.Errorf("a cross-site GET (a link to the screen): want 200, got %d", r.StatusCode)
	}
	// A browser is asked for the operator's name and key on the screen.
	if ch := do("GET", "/ui/").Header.Get("WWW-Authenticate"); !strings.HasPrefix(ch, "Basic ") {
		t.Errorf("want a Basic challenge on /ui/, got %q", ch)
	}
	if ch := do("GET", "/v1/events/x").Header.Get("WWW-Authenticate"); !strings.HasPrefix(ch, "Bearer ") {
		t.Errorf("want a Bearer challenge on the API, got %q", ch)
	}
}

// Paths that only look like an open route are judged by the route the
// mux picks for them, so none reaches an operator route (or its redirect)
// without an operator: "..", double and encoded slashes.
func TestGuardPathTricks(t *testing.T) {
	t.Parallel()
	a := newAuth(t)
	do := guarded(t, a)
	for _, path := range []string{
		"/v1/callbacks/../breakers",
		"/v1/callbacks/../dead",
		"/v1/callbacks/..%2F..%2Fv1%2Fbreakers",
		"/v1/callbacks/%2E%2E/%2E%2E/v1/breakers",
		"/v1/callbacks/erp/../../breakers",
		"//v1/breakers",
		"/v1//breakers",
		"/v1/breakers/",
		"/v1%2Fbreakers",
		"/v1/callbacks/..%2Fbreakers",
		"/healthz/../v1/breakers",
		"/./v1/breakers",
	} {
		for _, method := range []string{"GET", "POST"} {
			for _, key := range []string{"", acmeKey} {
				var h []string
				if key != "" {
					h = []string{"Authorization", "Bearer " + key}
				}
				resp := do(method, path, h...) // redirects followed
				served := resp.Header.Get("X-Pattern")
				if c, _ := auth.ClassOf(served); c == auth.OperatorOnly || served == "GET /v1/unclassified" {
					t.Errorf("%s %s with key %v: want refused before any operator route, got %d from %q",
						method, path, key != "", resp.StatusCode, served)
				}
			}
		}
	}
}

// Over NATS the operator credential comes in a header value: an operator
// key (Bearer or Basic) proves its operator, an API key is not one, and
// nothing or a forged key is refused. Disabled auth is anonymous.
func TestRequireOperator(t *testing.T) {
	t.Parallel()
	a := newAuth(t)
	for _, c := range []struct {
		name, authz string
		want        string
		err         error
		status      int
	}{
		{"operator bearer", "Bearer " + aliceKey, "operator:alice", nil, 0},
		{"operator basic", "Basic " + base64.StdEncoding.EncodeToString([]byte("alice:"+aliceKey)), "operator:alice", nil, 0},
		{"api key", "Bearer " + acmeKey, "", auth.ErrNotOperator, 403},
		{"nothing", "", "", auth.ErrNoCredentials, 401},
		{"forged", "Bearer " + auth.KeyPrefix + strings.Repeat("A", 43), "", auth.ErrBadCredentials, 401},
		{"a name alone", "alice", "", auth.ErrBadCredentials, 401},
	} {
		p, err := a.RequireOperator(c.authz)
		if c.err == nil {
			if err != nil || p.String() != c.want {
				t.Errorf("%s: want %s, got %s, %v", c.name, c.want, p, err)
			}
			continue
		}
		if status, _, msg := auth.Refusal(err); !errors.Is(err, c.err) || status != c.status || msg == "" {
			t.Errorf("%s: want %v answered %d, got %v answered %d %q", c.name, c.err, c.status, err, status, msg)
		}
	}
	off, err := auth.New(parse(t, "auth: {disabled: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p, err := off.RequireOperator(""); err != nil || p.String() != "anonymous" {
		t.Errorf("auth disabled: want anonymous, got %s, %v", p, err)
	}
}

// Disabled auth opens everything and marks nobody, but a page on another
// origin still cannot change anything through the browser of someone who
// can reach the open API (a demo on localhost, a private network).
func TestGuardDisabled(t *testing.T) {
	t.Parallel()
	a, err := auth.New(parse(t, "auth: {disabled: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /v1/events", a.Require(auth.Submit, echo))
	mux.Handle("POST /v1/dead/discard", a.Require(auth.Operate, echo))
	mux.Handle("POST /v1/callbacks/{target}", echo)
	do := serve(t, a.Guard(mux))
	for _, path := range []string{"/v1/events", "/v1/dead/discard"} {
		if resp := do("POST", path); resp.StatusCode != 200 || resp.Header.Get("X-Principal") != "anonymous" {
			t.Errorf("POST %s: want 200 as anonymous, got %d %q", path, resp.StatusCode, resp.Header.Get("X-Principal"))
		}
		if resp := do("POST", path, "Sec-Fetch-Site", "same-origin"); resp.StatusCode != 200 {
			t.Errorf("POST %s from the same origin: want 200, got %d", path, resp.StatusCode)
		}
		if resp := do("POST", path, "Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site"); resp.StatusCode != 403 {
			t.Errorf("POST %s from a page on another origin: want 403, got %d", path, resp.StatusCode)
		}
	}
	// An open route (a provider's webhook) takes any origin, as with auth.
	if resp := do("POST", "/v1/callbacks/erp", "Origin", "https://erp.example", "Sec-Fetch-Site", "cross-site"); resp.StatusCode != 200 {
		t.Errorf("a cross-site POST to an open route: want 200, got %d", resp.StatusCode)
	}
}
