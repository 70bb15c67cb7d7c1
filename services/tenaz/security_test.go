package standalone_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/tenaz/tenaz/pkg/auth"
	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/provider"
	standalone "github.com/tenaz/tenaz/services/tenaz"
)

// Credentials of the security tests: an acme key and the operator alice.
var (
	secAcmeKey, secAcmeHash   = mustNewKey()
	secAliceKey, secAliceHash = mustNewKey()
)

func mustNewKey() (string, string) {
	k, h, err := auth.NewKey()
	if err != nil {
		panic(err)
	}
	return k, h
}

// securedConfig is testConfig with keys instead of auth.disabled, and
// extra appended.
func securedConfig(dir, targetURL, extra string) string {
	return strings.Replace(testConfig(dir, targetURL, extra), "auth: {disabled: true}\n", `auth:
  keys:
    acme-shop: {account: acme, scopes: [submit, read], hash: "`+secAcmeHash+`"}
  operators:
    alice: {hash: "`+secAliceHash+`"}
`, 1)
}

// startWith starts a standalone tenaz on yaml with options o; it stops
// when the test ends.
func startWith(t *testing.T, yaml string, o standalone.Options) *standalone.Tenaz {
	t.Helper()
	cfg, err := config.Parse([]byte(yaml), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	o.Config = cfg
	tz, err := standalone.New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := tz.Start(ctx); err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := tz.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return tz
}

type answer struct {
	status int
	header http.Header
	code   string // error code of an error body
	body   []byte
}

// send makes one request; auth is "", "bearer:<key>" or "basic:<user>:<key>".
func send(t *testing.T, method, url, authz, body string) answer {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	switch kind, rest, _ := strings.Cut(authz, ":"); kind {
	case "bearer":
		req.Header.Set("Authorization", "Bearer "+rest)
	case "basic":
		user, pw, _ := strings.Cut(rest, ":")
		req.SetBasicAuth(user, pw)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var e struct {
		Error struct{ Code string } `json:"error"`
	}
	_ = json.Unmarshal(b, &e)
	return answer{status: resp.StatusCode, header: resp.Header, code: e.Error.Code, body: b}
}

// A config with no keys does not start unless auth is disabled on
// purpose, and the error says what to set; the demo config of the README
// tour disables it explicitly.
func TestRefusesToStartWithoutKeys(t *testing.T) {
	t.Parallel()
	yaml := strings.Replace(testConfig(t.TempDir(), "http://127.0.0.1:1", ""), "auth: {disabled: true}\n", "", 1)
	cfg, err := config.Parse([]byte(yaml), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	tz, err := standalone.New(standalone.Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	err = tz.Start(context.Background())
	if err == nil {
		_ = tz.Stop(context.Background())
		t.Fatal("want tenaz to refuse to start with no API keys, it started")
	}
	for _, want := range []string{"auth.keys", "auth.disabled: true"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("want the error to name %q, got %v", want, err)
		}
	}
	demo, err := standalone.DemoConfig(func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	if a, err := auth.New(demo); err != nil || !a.Disabled() {
		t.Fatalf("want the demo config to run without keys (auth.disabled), got %v", err)
	}
}

// What `tenaz run` serves, with keys: health and metrics open, webhooks
// judged by their signature, the screen and dead-letter routes only for an
// operator (HTTP Basic for a browser), the API for keys, every body
// bounded.
func TestHTTPAuthWired(t *testing.T) {
	t.Parallel()
	p := provider.New(provider.Faults{}, provider.WithIdempotent())
	target := httptest.NewServer(p)
	t.Cleanup(target.Close)
	t.Cleanup(func() { _ = p.Close() })
	yaml := strings.Replace(securedConfig(t.TempDir(), target.URL, ""), "erp: {url: ", `erp: {callback_secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", url: `, 1)
	yaml = strings.Replace(yaml, "nats:\n", "nats:\n  user: tenaz\n  password: n4ts-pw-0123\n", 1) // HTTP auth on needs NATS auth
	tz := startWith(t, yaml, standalone.Options{})
	base := "http://" + tz.HTTPAddr()
	acme, alice := "bearer:"+secAcmeKey, "basic:alice:"+secAliceKey

	for _, c := range []struct {
		name, method, path, authz, body string
		want                            int
		code                            string
	}{
		{"health open", "GET", "/healthz", "", "", 200, ""},
		{"ready open", "GET", "/readyz", "", "", 200, ""},
		{"metrics open", "GET", "/metrics", "", "", 200, ""},
		{"webhook judged by its signature, not a key", "POST", "/v1/callbacks/erp", "", `{}`, 0, "unauthorized"},
		{"screen without credentials", "GET", "/ui/", "", "", 401, "unauthorized"},
		{"screen with an API key", "GET", "/ui/", acme, "", 403, "forbidden"},
		{"screen with a wrong operator key", "GET", "/ui/", "basic:alice:" + secAcmeKey, "", 401, "unauthorized"},
		{"dead letters without credentials", "GET", "/v1/dead", "", "", 401, "unauthorized"},
		{"dead letters with an API key", "GET", "/v1/dead", acme, "", 403, "forbidden"},
		{"review with an API key", "GET", "/v1/review", acme, "", 403, "forbidden"},
		{"submit without a key", "POST", "/v1/events", "", `{"account":"acme","kind":"order.create","payload":{"order_id":"a"}}`, 401, "unauthorized"},
		{"submit for another account", "POST", "/v1/events", acme, `{"account":"globex","kind":"order.create","payload":{"order_id":"a"}}`, 403, "forbidden"},
		{"an unknown route needs a key", "GET", "/v1/anything", "", "", 401, "unauthorized"},
	} {
		a := send(t, c.method, base+c.path, c.authz, c.body)
		switch {
		case c.want == 0: // anything but the guard's refusal
			if a.code == c.code {
				t.Errorf("%s: want the route's own answer, got the guard's %d %s", c.name, a.status, a.body)
			}
		case a.status != c.want || a.code != c.code:
			t.Errorf("%s: want %d %s, got %d %s", c.name, c.want, c.code, a.status, a.body)
		}
	}
	if ch := send(t, "GET", base+"/ui/", "", "").header.Get("WWW-Authenticate"); !strings.HasPrefix(ch, "Basic ") {
		t.Errorf("the screen: want a Basic challenge so a browser asks for the operator, got %q", ch)
	}
	// The operator passes the guard on the screen and dead-letter routes
	// (what they answer is the deadletter service's business).
	for _, path := range []string{"/ui/", "/v1/dead", "/v1/review"} {
		if a := send(t, "GET", base+path, alice, ""); a.status == 401 || a.status == 403 {
			t.Errorf("%s as the operator: want past the guard, got %d %s", path, a.status, a.body)
		}
	}
	// The key works for its account; the operator reads it.
	a := send(t, "POST", base+"/v1/events", acme, `{"account":"acme","kind":"order.create","payload":{"order_id":"ok-1"}}`)
	if a.status != http.StatusAccepted {
		t.Fatalf("submit with the key: want 202, got %d %s", a.status, a.body)
	}
	var v view
	_ = json.Unmarshal(a.body, &v)
	if r := send(t, "GET", base+"/v1/events/"+v.ID, alice, ""); r.status != 200 {
		t.Fatalf("the operator reads acme's event: want 200, got %d %s", r.status, r.body)
	}
	// Every route's body is bounded, the webhook's too.
	big := `{"x":"` + strings.Repeat("a", 2<<20) + `"}`
	for _, path := range []string{"/v1/events", "/v1/callbacks/erp"} {
		if r := send(t, "POST", base+path, acme, big); r.status != http.StatusRequestEntityTooLarge {
			t.Errorf("POST %s with 2 MiB: want 413, got %d %s", path, r.status, r.body)
		}
	}
}

// The embedded server requires the credentials configured for tenaz's
// own connections: tenaz's services work, a client without them or with
// forged ones is refused.
func TestEmbeddedNATSAuth(t *testing.T) {
	t.Parallel()
	p := provider.New(provider.Faults{}, provider.WithIdempotent())
	target := httptest.NewServer(p)
	t.Cleanup(target.Close)
	t.Cleanup(func() { _ = p.Close() })
	yaml := strings.Replace(testConfig(t.TempDir(), target.URL, ""), "nats:\n", "nats:\n  user: tenaz\n  password: n4ts-pw-0123\n", 1)
	tz := startWith(t, yaml, standalone.Options{})
	base := "http://" + tz.HTTPAddr()

	for _, c := range []struct {
		name string
		opts []nats.Option
	}{
		{"no credentials", nil},
		{"wrong password", []nats.Option{nats.UserInfo("tenaz", "guess")}},
		{"a token instead", []nats.Option{nats.Token("n4ts-pw-0123")}},
	} {
		if nc, err := nats.Connect(tz.NATSURL(), c.opts...); err == nil {
			nc.Close()
			t.Errorf("%s: want the embedded server to refuse the client, it connected", c.name)
		}
	}
	nc, err := nats.Connect(tz.NATSURL(), nats.UserInfo("tenaz", "n4ts-pw-0123"))
	if err != nil {
		t.Fatalf("the configured user: want a connection, got %v", err)
	}
	nc.Close()
	code, v := post(t, base, "na-1", `{"account":"acme","kind":"order.create","payload":{"order_id":"na-1"}}`)
	if code != http.StatusAccepted {
		t.Fatalf("submit: want 202, got %d", code)
	}
	waitStatus(t, base, v.ID, "done")
}

// syncBuffer is a log sink safe for the services' goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Nothing secret reaches the logs of any service at debug level: not the
// API key, not the payload, not a target's answer that echoes the payload,
// not the NATS password, not the target's credential header, not the
// signing secret.
func TestNoSecretsInLogs(t *testing.T) {
	t.Parallel()
	const (
		cardSecret = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"
		natsPW     = "n4ts-pw-4567-secret"
		headerKey  = "erp-api-key-89abcdef"
		signing    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	)
	var calls atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if calls.Add(1) == 1 { // a failure that echoes what it got
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, `{"error":"cannot process %s with key %s"}`, body, r.Header.Get("X-Api-Key"))
			return
		}
		w.WriteHeader(http.StatusOK)
		fmt.Fprintf(w, `{"id":"ref-1","echo":%s}`, body)
	}))
	t.Cleanup(target.Close)
	yaml := securedConfig(t.TempDir(), target.URL, "")
	yaml = strings.Replace(yaml, "nats:\n", "nats:\n  user: tenaz\n  password: "+natsPW+"\n", 1)
	yaml = strings.Replace(yaml, "log: {level: warn}", "log: {level: debug}", 1)
	yaml = strings.Replace(yaml, "erp: {url: ", `erp: {headers: {X-Api-Key: "`+headerKey+`"}, signing_secret: "`+signing+`", url: `, 1)
	var buf syncBuffer
	log := zerolog.New(&buf).Level(zerolog.DebugLevel)
	tz := startWith(t, yaml, standalone.Options{Logger: &log})
	base := "http://" + tz.HTTPAddr()
	acme := "bearer:" + secAcmeKey

	a := send(t, "POST", base+"/v1/events", acme, `{"account":"acme","kind":"order.create","payload":{"order_id":"sec-1","card":"`+cardSecret+`"}}`)
	if a.status != http.StatusAccepted {
		t.Fatalf("submit: want 202, got %d %s", a.status, a.body)
	}
	var v view
	_ = json.Unmarshal(a.body, &v)
	var got view
	deadline := time.Now().Add(20 * time.Second)
	for got.Status != "done" && time.Now().Before(deadline) {
		r := send(t, "GET", base+"/v1/events/"+v.ID, acme, "")
		_ = json.Unmarshal(r.body, &got)
		if got.Status != "done" {
			<-time.After(50 * time.Millisecond)
		}
	}
	if got.Status != "done" || calls.Load() < 2 {
		t.Fatalf("want the event done after a failed and a good call, got %q after %d calls", got.Status, calls.Load())
	}
	// The refusal paths too.
	send(t, "POST", base+"/v1/events", acme, `{"account":"globex","kind":"order.create","payload":{"card":"`+cardSecret+`"}}`)
	send(t, "POST", base+"/v1/events", acme, `{"account":"acme","kind":"nope","payload":{"card":"`+cardSecret+`"}}`)
	send(t, "POST", base+"/v1/events", acme, `{"account":"acme","kind":"order.create","payload":{"card":"`+cardSecret+`"`)
	send(t, "GET", base+"/v1/events/"+v.ID, "bearer:"+secAcmeKey+"x", "")
	send(t, "GET", base+"/ui/", "basic:alice:"+secAcmeKey, "")

	out := buf.String()
	if !strings.Contains(out, `"level":"debug"`) && !strings.Contains(out, `"level":"info"`) {
		t.Fatalf("want the services' logs in the buffer, got %q", out)
	}
	for name, s := range map[string]string{"payload secret": cardSecret, "API key": secAcmeKey, "operator key": secAliceKey,
		"NATS password": natsPW, "target header": headerKey, "signing secret": signing, "key hash": secAcmeHash[len("sha256:"):]} {
		if strings.Contains(out, s) {
			i := strings.Index(out, s)
			t.Errorf("the %s is in the logs: …%s…", name, out[max(0, i-300):min(len(out), i+100)])
		}
	}
}
