package tenaz_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/services/tenaz"
	"github.com/tenaz/tenaz/services/tenaz/internal/cli"
)

// Adding a customer without a deploy: `tenaz accounts set` puts newco in
// the accounts bucket with a new API key, a rate and its own credential
// for the erp target; with no restart the key submits, the event is
// delivered with newco's credential, `tenaz accounts ls` shows the
// credential redacted, and `tenaz accounts rm` makes the key stop
// working. A definition that does not fit the config is refused (exit 2)
// with the key at fault named.
func TestAccountAddedWithoutRestart(t *testing.T) {
	t.Parallel()
	p, targetURL := idempotentTarget(t)
	yaml := securedConfig(t.TempDir(), targetURL, `sealing_key: "dGVuYXotdGVzdC1zZWFsaW5nLWtleS0zMi1ieXRlcyE="`+"\n")
	yaml = strings.Replace(yaml, "nats:\n", "nats:\n  user: tenaz\n  password: n4ts-pw-0123\n", 1)
	tz := startWith(t, yaml, tenaz.Options{})
	base := "http://" + tz.HTTPAddr()
	op := newOperator(t, tz.NATSURL())
	op.env["NATS_USER"], op.env["NATS_PASSWORD"], op.env[cli.OperatorKeyEnv] = "tenaz", "n4ts-pw-0123", secAliceKey

	def := filepath.Join(t.TempDir(), "newco.json")
	const secret = "Bearer newco-erp-credential"
	if err := os.WriteFile(def, []byte(`{"targets":{"erp":{"headers":{"Authorization":"`+secret+`"}}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	r := op.must(cli.ExitOK, "accounts", "set", "newco", "-f", def, "--rate", "50/s", "--new-key", "newco-main", "-m", "new customer", "--yes", "--json")
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	key := lines[len(lines)-1]
	if len(key) < 32 || strings.Contains(r.stdout, secret) || strings.Contains(r.stdout, key) {
		t.Fatalf("accounts set: want the new key once on stderr and neither it nor the credential on stdout, got\n%s", r)
	}

	a := send(t, http.MethodPost, base+"/v1/events", "bearer:"+key, `{"account":"newco","kind":"order.create","payload":{"order_id":"n-1"}}`)
	if a.status != http.StatusAccepted {
		t.Fatalf("newco's new key: want 202, got %d %s", a.status, a.body)
	}
	var v view
	_ = json.Unmarshal(a.body, &v)
	natstest.Eventually(t, 20*time.Second, func() bool {
		_ = json.Unmarshal(send(t, http.MethodGet, base+"/v1/events/"+v.ID, "bearer:"+key, "").body, &v)
		return v.Status == "done"
	}, "newco's event to be done (last seen %+v)", &v)
	calls := p.Calls()
	if len(calls) != 1 || calls[0].Header.Get("Authorization") != secret {
		t.Fatalf("want newco's one call made with its own credential, got %d calls", len(calls))
	}
	if a := send(t, http.MethodPost, base+"/v1/events", "bearer:"+key, `{"account":"acme","kind":"order.create","payload":{"order_id":"n-2"}}`); a.status != http.StatusForbidden {
		t.Fatalf("newco's key for acme: want 403, got %d", a.status)
	}

	var ls ops.StoredListReply
	op.must(cli.ExitOK, "accounts", "ls", "--json").decode(t, &ls)
	if len(ls.Items) != 1 || ls.Items[0].Account != "newco" || ls.Items[0].Error != "" || !strings.Contains(string(ls.Items[0].Definition), ops.Redacted) {
		t.Fatalf("accounts ls: want newco in force, its credential redacted, got %+v", ls)
	}
	if r := op.run("accounts", "ls"); strings.Contains(r.stdout+r.stderr, secret) {
		t.Fatalf("accounts ls shows the credential:\n%s", r)
	}

	if err := os.WriteFile(def, []byte(`{"targets":{"crm":{"url":"https://crm.example"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := op.must(cli.ExitUsage, "accounts", "set", "newco", "-f", def, "-m", "typo", "--yes"); !strings.Contains(r.stderr, "accounts.newco.targets.crm") {
		t.Fatalf("a target the config does not have: want the key named, got\n%s", r)
	}
	if r := op.must(cli.ExitUsage, "accounts", "set", "acme-shop", "-m", "x", "--yes", "--new-key", "acme-shop"); !strings.Contains(r.stderr, "auth.keys.acme-shop") {
		t.Fatalf("a key id tenaz.yaml has: want it named, got\n%s", r)
	}

	op.must(cli.ExitOK, "accounts", "rm", "newco", "-m", "customer left", "--yes")
	if a := send(t, http.MethodPost, base+"/v1/events", "bearer:"+key, `{"account":"newco","kind":"order.create","payload":{"order_id":"n-3"}}`); a.status != http.StatusUnauthorized {
		t.Fatalf("a removed account's key: want 401, got %d", a.status)
	}
	op.must(cli.ExitNotFound, "accounts", "rm", "newco", "-m", "again", "--yes")
}

// A stored definition with repeats is refused 422, and the route the
// message sends the operator to instead is one that `tenaz run` serves.
func TestStoredRepeatsRefusalNamesAServedRoute(t *testing.T) {
	t.Parallel()
	_, tz, base := running(t)
	a := send(t, http.MethodPut, base+"/v1/config/accounts/newco", "", `{"definition":{"repeats":{}},"reason":"r"}`)
	var eb ops.ErrorBody
	if err := json.Unmarshal(a.body, &eb); a.status != http.StatusUnprocessableEntity || err != nil || !strings.Contains(eb.Error.Message, "accounts.newco.repeats") {
		t.Fatalf("repeats in a stored account: want 422 naming accounts.newco.repeats, got %d %s", a.status, a.body)
	}
	route := regexp.MustCompile(`(GET|PUT|POST|DELETE) /v1/\S+`).FindString(eb.Error.Message)
	if route == "" || !slices.Contains(tz.Patterns(), route) {
		t.Fatalf("the 422 names route %q, which is not among the routes served:\n%s\nmessage: %s", route, strings.Join(tz.Patterns(), "\n"), eb.Error.Message)
	}
}
