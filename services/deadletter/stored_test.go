package deadletter_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/auth"
	"github.com/tenaz/tenaz/pkg/httpapi/apitest"
	"github.com/tenaz/tenaz/pkg/live"
	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/pkg/servicetest"
)

// sealingYAML gives the tests of the accounts bucket a sealing key.
const sealingYAML = `sealing_key: "dGVuYXotdGVzdC1zZWFsaW5nLWtleS0zMi1ieXRlcyE="`

// storedDef is newco's definition: a rate, a credential header for erp
// and one API key.
func storedDef(t *testing.T) (def, key string) {
	t.Helper()
	k, h, err := auth.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	return `{"rate":"5/s","targets":{"erp":{"headers":{"Authorization":"Bearer newco-s3cret-token"}}},` +
		`"keys":{"newco-main":{"scopes":["submit","read"],"hash":"` + h + `"}}}`, k
}

// do sends one request as alice (the env's screen signs her in) and
// returns the status and body.
func (e *env) do(method, path, body string) (int, string) {
	e.t.Helper()
	req, err := http.NewRequestWithContext(servicetest.Context(e.t, 2*time.Minute), method, e.http.URL+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The routes of the config and the accounts bucket, against the OpenAPI
// document: every answer it gives them is produced.
func TestOpenAPIContractConfig(t *testing.T) {
	t.Parallel()
	e := setup(t, sealingYAML)
	c, want := e.contract(t)
	alice, acme := operatorKeys["alice"], acmeSubmitKey
	def, _ := storedDef(t)
	routes := []struct{ method, path string }{
		{"GET", "/v1/config"}, {"GET", "/v1/config/accounts"}, {"PUT", "/v1/config/accounts/newco"}, {"DELETE", "/v1/config/accounts/newco"},
	}
	for _, r := range routes {
		want(401, r.method, r.path, "", "", "no credential")
		want(403, r.method, r.path, acme, "", "an API key")
	}
	huge := `{"reason":"` + strings.Repeat("x", int(e.cfg.HTTP.MaxBodyBytes)+128<<10) + `"}`
	want(200, "GET", "/v1/config", alice, "", "the status")
	want(200, "PUT", "/v1/config/accounts/newco", alice, `{"definition":`+def+`,"reason":"new customer"}`, "set")
	want(200, "PUT", "/v1/config/accounts/newco", alice, `{"definition":{"rate":"10/s","targets":{"erp":{"headers":{"Authorization":"[redacted]"}}}},"reason":"more"}`, "set again, keeping the header")
	want(400, "PUT", "/v1/config/accounts/newco", alice, `{"definition":{}}`, "no reason")
	want(400, "PUT", "/v1/config/accounts/newco", alice, `{"reason":"r"}`, "no definition")
	want(413, "PUT", "/v1/config/accounts/newco", alice, huge, "a body over the limit")
	want(422, "PUT", "/v1/config/accounts/newco", alice, `{"definition":{"rate":"fast"},"reason":"r"}`, "a bad rate")
	want(200, "GET", "/v1/config/accounts", alice, "", "the list")
	want(400, "GET", "/v1/config/accounts?account=bad.name", alice, "", "a bad account")
	want(200, "DELETE", "/v1/config/accounts/newco", alice, `{"reason":"gone"}`, "remove")
	want(404, "DELETE", "/v1/config/accounts/newco", alice, `{"reason":"gone"}`, "remove again")
	want(400, "DELETE", "/v1/config/accounts/newco", alice, `{}`, "no reason")

	servicetest.Stop(t, e.dl)
	for _, r := range routes {
		want(503, r.method, r.path, alice, "", "the service stopped")
	}
	internal := "an unexpected bucket error: no request brings one about"
	c.Covered(t, apitest.Under("/v1/config"), map[string]string{
		"GET /v1/config/accounts 500": internal, "PUT /v1/config/accounts/{account} 500": internal, "DELETE /v1/config/accounts/{account} 500": internal,
	})
}

// A stored account's definition is checked as tenaz.yaml is: every
// problem is a 422 naming its key, and nothing is stored.
func TestStoredAccountRefusedWithItsKeys(t *testing.T) {
	t.Parallel()
	e := setup(t, sealingYAML)
	status, body := e.do("PUT", "/v1/config/accounts/newco", `{"definition":{"rate":"fast","colour":"red","targets":{"nope":{"url":"http://x"}},`+
		`"keys":{"k1":{"scopes":["fly"],"hash":"sha256:00"}}},"reason":"r"}`)
	if status != http.StatusUnprocessableEntity {
		t.Fatalf("want 422, got %d %s", status, body)
	}
	for _, key := range []string{"accounts.newco.rate", "accounts.newco.colour"} {
		if !strings.Contains(body, key) {
			t.Errorf("want the error to name %s, got %s", key, body)
		}
	}
	// Decoding passed, the values do not: the same check as the file.
	status, body = e.do("PUT", "/v1/config/accounts/newco", `{"definition":{"targets":{"nope":{"url":"http://x"}},`+
		`"keys":{"k1":{"scopes":["fly"],"hash":"sha256:00"}}},"reason":"r"}`)
	if status != http.StatusUnprocessableEntity {
		t.Fatalf("want 422, got %d %s", status, body)
	}
	for _, key := range []string{"accounts.newco.targets.nope", "auth.keys.k1.scopes[0]", "auth.keys.k1.hash"} {
		if !strings.Contains(body, key) {
			t.Errorf("want the error to name %s, got %s", key, body)
		}
	}
	if status, body = e.do("PUT", "/v1/config/accounts/newco", `{"definition":{"repeats":{}},"reason":"r"}`); status != http.StatusUnprocessableEntity ||
		!strings.Contains(body, "accounts.newco.repeats") {
		t.Errorf("repeats: want 422 naming accounts.newco.repeats, got %d %s", status, body)
	}
	if status, body = e.do("PUT", "/v1/config/accounts/newco", `{"definition":{"targets":{"erp":{"headers":{"X":"${HOME}"}}}},"reason":"r"}`); status != http.StatusUnprocessableEntity {
		t.Errorf("an ${ENV} reference: want 422 (never read from the server's environment), got %d %s", status, body)
	}
	_, list := e.do("GET", "/v1/config/accounts", "")
	if strings.Contains(list, "newco") {
		t.Fatalf("a refused definition was stored: %s", list)
	}
}

// A request body decoders may read two ways is refused, over HTTP and
// over NATS, and nothing is stored: a member given twice at any depth
// (the definition's rate would be stored as the last, while a reviewer of
// the request reads the first), or anything after the object. Before,
// {"rate":"1/s","rate":"1000/s"} was stored at 1000/s and a reason given
// twice was audited as the second.
func TestStoredAccountBodyReadTwoWaysRefused(t *testing.T) {
	t.Parallel()
	e := setup(t, sealingYAML)
	for _, body := range []string{
		`{"definition":{"rate":"1/s","rate":"1000/s"},"reason":"r"}`,
		`{"definition":{"rate":"1/s"},"reason":"a","reason":"b"}`,
		`{"definition":{"rate":"1/s"},"definition":{"rate":"1000/s"},"reason":"r"}`,
		`{"definition":{"rate":"1/s"},"reason":"r"} {"definition":{"rate":"1000/s"}}`,
	} {
		if status, answer := e.do("PUT", "/v1/config/accounts/dupco", body); status != http.StatusBadRequest || !strings.Contains(answer, "malformed") {
			t.Errorf("HTTP %s: want 400 malformed, got %d %s", body, status, answer)
		}
		if !json.Valid([]byte(body)) {
			continue // the client sends no such request over NATS
		}
		err := e.call(ops.StoredSet, json.RawMessage(strings.Replace(body, `{"definition"`, `{"account":"dupco","definition"`, 1)), nil)
		if err == nil || !strings.Contains(err.Error(), "malformed") {
			t.Errorf("NATS %s: want malformed, got %v", body, err)
		}
	}
	if _, list := e.do("GET", "/v1/config/accounts", ""); strings.Contains(list, "dupco") {
		t.Fatalf("a refused definition was stored: %s", list)
	}
}

// A header value of a stored account is never readable back in clear:
// not from the API (redacted), not from the bucket (sealed), not in the
// audit; it is still the one in force, kept by a "[redacted]" resend.
func TestStoredSecretNotReadableBack(t *testing.T) {
	t.Parallel()
	e := setup(t, sealingYAML)
	def, _ := storedDef(t)
	const secret = "newco-s3cret-token"
	if status, body := e.do("PUT", "/v1/config/accounts/newco", `{"definition":`+def+`,"reason":"new customer"}`); status != http.StatusOK {
		t.Fatalf("set: want 200, got %d %s", status, body)
	} else if strings.Contains(body, secret) || !strings.Contains(body, ops.Redacted) {
		t.Fatalf("the answer to set shows the secret, or does not say it is redacted: %s", body)
	}
	_, list := e.do("GET", "/v1/config/accounts", "")
	var rep ops.StoredListReply
	if err := json.Unmarshal([]byte(list), &rep); err != nil || len(rep.Items) != 1 {
		t.Fatalf("list: want newco, got %s (%v)", list, err)
	}
	if strings.Contains(list, secret) || !strings.Contains(string(rep.Items[0].Definition), `"Authorization":"`+ops.Redacted+`"`) {
		t.Fatalf("the list shows the secret or no redaction: %s", list)
	}
	kv, err := e.JS.KeyValue(servicetest.Context(t, 2*time.Minute), live.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	entry, err := kv.Get(servicetest.Context(t, 2*time.Minute), "newco")
	if err != nil {
		t.Fatal(err)
	}
	if v := string(entry.Value()); strings.Contains(v, secret) || !strings.Contains(v, "sealed:v1:") {
		t.Fatalf("the bucket holds the secret in clear, or not sealed: %s", v)
	}
	_, actions := e.do("GET", "/v1/actions?account=newco", "")
	if !strings.Contains(actions, ops.ActionSetAccount) || strings.Contains(actions, secret) {
		t.Fatalf("the audit: want the set recorded without the secret, got %s", actions)
	}
	// A sealed value copied from the bucket is not a value to set.
	sealed := entry.Value()
	var m map[string]any
	_ = json.Unmarshal(sealed, &m)
	b, _ := json.Marshal(map[string]any{"definition": m, "reason": "copy"})
	if status, body := e.do("PUT", "/v1/config/accounts/other", string(b)); status != http.StatusUnprocessableEntity {
		t.Fatalf("setting a sealed value: want 422, got %d %s", status, body)
	}
}

// The Accounts page shows the config in force and the accounts of the
// bucket in it.
func TestAccountsPageShowsTheConfig(t *testing.T) {
	t.Parallel()
	e := setup(t, sealingYAML)
	def, _ := storedDef(t)
	if status, body := e.do("PUT", "/v1/config/accounts/newco", `{"definition":`+def+`,"reason":"new customer"}`); status != http.StatusOK {
		t.Fatalf("set: want 200, got %d %s", status, body)
	}
	status, page := e.do("GET", "/ui/accounts", "")
	if status != http.StatusOK || !strings.Contains(page, `id="config-status"`) || !strings.Contains(page, "with 1 account(s) of the accounts bucket") {
		t.Fatalf("/ui/accounts: want the config's status with newco's bucket, got %d\n%s", status, page)
	}
	if !strings.Contains(page, `data-account="newco"`) {
		t.Fatalf("/ui/accounts: want newco listed with its limits, got\n%s", page)
	}
}
