package tenaz_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/tenaz/tenaz/pkg/auth"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/webhook"
	"github.com/tenaz/tenaz/services/ingest"
	"github.com/tenaz/tenaz/services/tenaz"
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
	err := refused(t, servicetest.Config(t, yaml, nil))
	for _, want := range []string{"auth.keys", "auth.disabled: true"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("want the error to name %q, got %v", want, err)
		}
	}
	demo, err := tenaz.DemoConfig(func(string) (string, bool) { return "", false })
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
	_, targetURL := idempotentTarget(t)
	yaml := strings.Replace(securedConfig(t.TempDir(), targetURL, ""), "erp: {url: ", `erp: {callback_secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", url: `, 1)
	yaml = strings.Replace(yaml, "nats:\n", "nats:\n  user: tenaz\n  password: n4ts-pw-0123\n", 1) // HTTP auth on needs NATS auth
	tz := startWith(t, yaml, tenaz.Options{})
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
	// Every route's body is bounded, the webhook's too (a webhook's
	// headers are checked first: these are well formed and fresh, with a
	// signature the body is never read far enough to check).
	big := `{"x":"` + strings.Repeat("a", 2<<20) + `"}`
	if r := send(t, "POST", base+"/v1/events", acme, big); r.status != http.StatusRequestEntityTooLarge {
		t.Errorf("POST /v1/events with 2 MiB: want 413, got %d %s", r.status, r.body)
	}
	req, err := http.NewRequest("POST", base+"/v1/callbacks/erp", strings.NewReader(big))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(webhook.HeaderID, "msg_big")
	req.Header.Set(webhook.HeaderTimestamp, strconv.FormatInt(time.Now().Unix(), 10))
	req.Header.Set(webhook.HeaderSignature, "v1,"+base64.StdEncoding.EncodeToString(make([]byte, 32)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("POST /v1/callbacks/erp with 2 MiB: want 413, got %d", resp.StatusCode)
	}
}

// The embedded server requires the credentials configured for tenaz's
// own connections: tenaz's services work, a client without them or with
// forged ones is refused.
func TestEmbeddedNATSAuth(t *testing.T) {
	t.Parallel()
	_, targetURL := idempotentTarget(t)
	yaml := strings.Replace(testConfig(t.TempDir(), targetURL, ""), "nats:\n", "nats:\n  user: tenaz\n  password: n4ts-pw-0123\n", 1)
	tz := startWith(t, yaml, tenaz.Options{})
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

// Nothing secret reaches the logs of any service at debug level: not the
// API key, not the payload, not a target's answer (one that echoes the
// payload, to a call that is retried, to one that dies and to a poll
// that sends the event to review), not the NATS password, not the
// target's credential header, not the signing secret.
func TestNoSecretsInLogs(t *testing.T) {
	t.Parallel()
	const (
		cardSecret   = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"
		answerSecret = "acct_no_7731-0042-secret" // only ever in the target's answers
		natsPW       = "n4ts-pw-4567-secret"
		headerKey    = "erp-api-key-89abcdef"
		signing      = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	)
	var calls atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		switch r.URL.Path {
		case "/api/order.reject": // a refusal that echoes what it got
			w.WriteHeader(http.StatusUnprocessableEntity)
			fmt.Fprintf(w, `{"error":"cannot process %s for %s"}`, body, answerSecret)
			return
		case "/api/credit.poll":
			w.WriteHeader(http.StatusAccepted)
			fmt.Fprint(w, `{"id":"ref-poll-1"}`)
			return
		case "/poll/ref-poll-1": // the poll's answer refuses
			w.WriteHeader(http.StatusUnprocessableEntity)
			fmt.Fprintf(w, `{"error":"no evaluation for %s"}`, answerSecret)
			return
		}
		if calls.Add(1) == 1 { // a failure that echoes what it got
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, `{"error":"cannot process %s with key %s"}`, body, r.Header.Get("X-Api-Key"))
			return
		}
		w.WriteHeader(http.StatusOK)
		fmt.Fprintf(w, `{"id":"ref-1","echo":%s}`, body)
	}))
	t.Cleanup(target.Close)
	yaml := securedConfig(t.TempDir(), target.URL, `  order.reject: {target: erp, attempts: 1}
  credit.poll: {target: bureau, completion: poll, attempts: 1, poll_sla: 1m}
`)
	yaml = strings.Replace(yaml, "targets:\n", "targets:\n  bureau: {url: \""+target.URL+"/api/credit.poll\", poll: {url: \""+target.URL+"/poll/{{.Reference}}\", interval: 1s, done_when: {field: status, in: [approved]}}}\n", 1)
	yaml = strings.Replace(yaml, "nats:\n", "nats:\n  user: tenaz\n  password: "+natsPW+"\n", 1)
	yaml = strings.Replace(yaml, "log: {level: warn}", "log: {level: debug}", 1)
	yaml = strings.Replace(yaml, "erp: {url: ", `erp: {headers: {X-Api-Key: "`+headerKey+`"}, signing_secret: "`+signing+`", url: `, 1)
	var buf servicetest.LogBuffer
	log := zerolog.New(&buf).Level(zerolog.DebugLevel)
	tz := startWith(t, yaml, tenaz.Options{Logger: &log})
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
	// A call refused for good, and a poll refused for good: the target's
	// answers are in the records, not in the logs.
	for kind, want := range map[string]string{"order.reject": "dead", "credit.poll": "manual_review"} {
		a := send(t, "POST", base+"/v1/events", acme, `{"account":"acme","kind":"`+kind+`","payload":{"card":"`+cardSecret+`"}}`)
		var ev view
		if err := json.Unmarshal(a.body, &ev); err != nil || a.status != http.StatusAccepted {
			t.Fatalf("%s: submit: want 202, got %d %s", kind, a.status, a.body)
		}
		natstest.Eventually(t, 30*time.Second, func() bool {
			_ = json.Unmarshal(send(t, "GET", base+"/v1/events/"+ev.ID, acme, "").body, &ev)
			return ev.Status == want
		}, "the %s event to be %s (last seen %+v)", kind, want, &ev)
		if h := send(t, "GET", base+"/v1/events/"+ev.ID+"/history", acme, ""); !strings.Contains(string(h.body), answerSecret) {
			t.Errorf("%s: want the target's answer in the event's history, got %s", kind, h.body)
		}
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
	for name, s := range map[string]string{"payload secret": cardSecret, "target's answer": answerSecret, "API key": secAcmeKey, "operator key": secAliceKey,
		"NATS password": natsPW, "target header": headerKey, "signing secret": signing, "key hash": secAcmeHash[len("sha256:"):]} {
		if strings.Contains(out, s) {
			i := strings.Index(out, s)
			t.Errorf("the %s is in the logs: …%s…", name, out[max(0, i-300):min(len(out), i+100)])
		}
	}
}

// Two accounts that chose the same Idempotency-Key reach one shared target
// that, like Stripe, replays its stored answer to a repeated key: each
// call carries its own event's key, each account's effect is applied and
// each event's reference and result are its own.
func TestIdempotencyKeyPerAccountAtTheTarget(t *testing.T) {
	t.Parallel()
	p, _, base := running(t)

	var views [2]ingest.View
	for i, account := range []string{"acme", "globex"} {
		code, v := post(t, base, "shared-1", `{"account":"`+account+`","kind":"order.create","payload":{"order_id":"`+account+`-1"}}`)
		if code != http.StatusAccepted {
			t.Fatalf("%s: submit: want 202, got %d", account, code)
		}
		waitStatus(t, base, v.ID, "done")
		r := send(t, "GET", base+"/v1/events/"+v.ID, "", "")
		if err := json.Unmarshal(r.body, &views[i]); err != nil {
			t.Fatalf("%s: %v in %s", account, err, r.body)
		}
	}
	calls := p.Calls()
	if len(calls) != 2 || calls[0].IdempotencyKey == calls[1].IdempotencyKey {
		t.Fatalf("want two calls with two Idempotency-Keys, got %+v", calls)
	}
	for i, v := range views {
		if calls[i].EventID != v.ID || calls[i].IdempotencyKey != v.ID || calls[i].Replayed || !calls[i].Applied {
			t.Errorf("%s: want its call keyed by its event id %s and applied, got key %q (replayed %v)", v.Account, v.ID, calls[i].IdempotencyKey, calls[i].Replayed)
		}
	}
	acme, globex := views[0], views[1]
	if acme.Reference == "" || acme.Reference == globex.Reference || string(acme.Result) == string(globex.Result) {
		t.Errorf("want each account's own reference and result, got acme %q %s, globex %q %s", acme.Reference, acme.Result, globex.Reference, globex.Result)
	}
	if !strings.Contains(string(globex.Result), globex.Reference) {
		t.Errorf("globex's result: want its own reference %s in it, got %s", globex.Reference, globex.Result)
	}
}

// No target URL (its query token, its internal host name), target header
// value, digest webhook URL or payload value quoted by a schema violation
// reaches the logs, the API's answers or the screen: transport errors,
// last_error, the history, dead-letter listings and the refusal of a
// submission say what failed without them.
func TestNoTargetSecretsInErrorsAPIOrScreen(t *testing.T) {
	t.Parallel()
	const (
		urlToken     = "tok_url_3vQ9secret"
		internalHost = "billing.internal.invalid" // never resolves (RFC 2606)
		headerValue  = "hdr-val-7Kx2secret"
		digestToken  = "digestTOKEN5Rq8secret"
		schemaValue  = "sk_live_schema_4Wn6secret"
		natsPW       = "n4ts-pw-8901-secret"
	)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close() // the digest webhook's address: nothing listens there
	yaml := securedConfig(t.TempDir(), "http://"+internalHost+":8443", `  card.charge: {target: erp, attempts: 1, schema: {type: object, required: [card], properties: {card: {type: string, pattern: "^tok_"}}}}
deadletter: {digest: {schedule: "* * * * * *", webhook: "http://`+closed+`/services/T0/B0/`+digestToken+`"}}
`)
	yaml = strings.Replace(yaml, `/api/{{.Kind}}"`, `/api/{{.Kind}}?token=`+urlToken+`"`, 1)
	yaml = strings.Replace(yaml, "erp: {url: ", `erp: {headers: {X-Api-Key: "`+headerValue+`"}, url: `, 1)
	yaml = strings.Replace(yaml, "nats:\n", "nats:\n  user: tenaz\n  password: "+natsPW+"\n", 1)
	yaml = strings.Replace(yaml, "log: {level: warn}", "log: {level: debug}", 1)
	if !strings.Contains(yaml, "?token="+urlToken) || !strings.Contains(yaml, headerValue) {
		t.Fatalf("the config must plant the secrets:\n%s", yaml)
	}
	var buf servicetest.LogBuffer
	log := zerolog.New(&buf).Level(zerolog.DebugLevel)
	tz := startWith(t, yaml, tenaz.Options{Logger: &log})
	base := "http://" + tz.HTTPAddr()
	acme, alice := "bearer:"+secAcmeKey, "basic:alice:"+secAliceKey

	// A call that fails in transport (the host does not resolve) and dies.
	a := send(t, "POST", base+"/v1/events", acme, `{"account":"acme","kind":"card.charge","payload":{"card":"tok_1"}}`)
	if a.status != http.StatusAccepted {
		t.Fatalf("submit: want 202, got %d %s", a.status, a.body)
	}
	var v view
	_ = json.Unmarshal(a.body, &v)
	natstest.Eventually(t, 30*time.Second, func() bool {
		_ = json.Unmarshal(send(t, "GET", base+"/v1/events/"+v.ID, acme, "").body, &v)
		return v.Status == "dead"
	}, "the event whose call cannot connect to be dead (last seen %+v)", &v)

	// A payload the schema refuses, over HTTP (answered 422) and over NATS
	// (kept in DEAD as rejected).
	refused := send(t, "POST", base+"/v1/events", acme, `{"account":"acme","kind":"card.charge","payload":{"card":"`+schemaValue+`"}}`)
	if refused.status != http.StatusUnprocessableEntity || refused.code != "schema_violation" {
		t.Fatalf("schema violation over HTTP: want 422 schema_violation, got %d %s", refused.status, refused.body)
	}
	nc, err := nats.Connect(tz.NATSURL(), nats.UserInfo("tenaz", natsPW))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	m := nats.NewMsg("tenaz.intake.acme.card.charge")
	m.Header.Set("Idempotency-Key", "schema-nats-1")
	m.Data = []byte(`{"card":"` + schemaValue + `"}`)
	if err := nc.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	var list ops.ListReply
	natstest.Eventually(t, 20*time.Second, func() bool {
		list = ops.ListReply{}
		_ = json.Unmarshal(send(t, "GET", base+"/v1/dead", alice, "").body, &list)
		return list.Total >= 2
	}, "the dead event and the rejected submission to be listed (last seen %+v)", &list)
	natstest.Eventually(t, 20*time.Second, func() bool { return strings.Contains(buf.String(), "digest webhook failed") },
		"the digest webhook to fail and be logged")

	surfaces := map[string]string{"logs": buf.String(), "the schema refusal": string(refused.body)}
	for _, path := range []string{"/v1/events/" + v.ID, "/v1/events/" + v.ID + "/history"} {
		surfaces["GET "+path] = string(send(t, "GET", base+path, acme, "").body)
	}
	for _, path := range []string{"/v1/dead", "/v1/dead/" + v.ID, "/v1/breakers", "/ui/", "/ui/dead", "/ui/events/" + v.ID, "/ui/breakers"} {
		r := send(t, "GET", base+path, alice, "")
		if r.status != http.StatusOK {
			t.Errorf("GET %s as the operator: want 200, got %d %s", path, r.status, r.body)
		}
		surfaces["GET "+path] = string(r.body)
	}
	// What failed is still said (a resolver that never answers makes it
	// the call's timeout).
	if e := surfaces["GET /v1/events/"+v.ID]; !strings.Contains(e, "target erp: lookup of the target's host") && !strings.Contains(e, "did not answer in time") {
		t.Errorf("last_error: want it to say the lookup failed, got %s", e)
	}
	for _, where := range []string{"the schema refusal", "GET /v1/dead"} {
		if !strings.Contains(surfaces[where], "does not match the pattern") {
			t.Errorf("%s: want it to name the rule, got %s", where, surfaces[where])
		}
	}
	for where, text := range surfaces {
		for name, secret := range map[string]string{"target URL token": urlToken, "internal host": internalHost, "header value": headerValue,
			"digest webhook token": digestToken, "payload value of a schema violation": schemaValue, "digest webhook address": closed} {
			if i := strings.Index(text, secret); i >= 0 {
				t.Errorf("the %s is in %s: …%s…", name, where, text[max(0, i-200):min(len(text), i+100)])
			}
		}
	}
}
