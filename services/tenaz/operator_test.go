package tenaz_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tenaz/tenaz/pkg/auth"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/services/ingest"
	"github.com/tenaz/tenaz/services/tenaz"
	"github.com/tenaz/tenaz/services/tenaz/internal/cli"
)

// Credentials of the operator tests: a submit-only key of acme, and the
// embedded server's user (HTTP auth on needs NATS auth).
var secAcmeSubmitKey, secAcmeSubmitHash = mustNewKey()

const opsNATSUser, opsNATSPassword = "tenaz", "n4ts-pw-ops-0123"

// operatorConfig is securedConfig with a submit-only key for acme, the
// NATS user, and breakers that open at the first failure.
func operatorConfig(dir, targetURL string) string {
	yaml := securedConfig(dir, targetURL, "")
	yaml = strings.Replace(yaml, "  keys:\n", "  keys:\n    acme-submit: {account: acme, scopes: [submit], hash: \""+secAcmeSubmitHash+"\"}\n", 1)
	yaml = strings.Replace(yaml, "nats:\n", "nats:\n  user: "+opsNATSUser+"\n  password: "+opsNATSPassword+"\n", 1)
	return strings.Replace(yaml, `"*": {concurrency: 8, breaker: {failures: 100}}`, `"*": {concurrency: 8, breaker: {failures: 1, cooldown: 10m}}`, 1)
}

// Every route the listener of `tenaz run` serves (the routes of every
// service, as each tenaz-<service> binary serves them too, plus health and
// metrics) has an explicit class in pkg/auth, and every class names a
// route that exists. A new route without one fails here; at run time the
// Guard refuses it to everyone.
func TestEveryRouteHasAClass(t *testing.T) {
	t.Parallel()
	tz := start(t, testConfig(t.TempDir(), "http://127.0.0.1:1", ""))
	served := tz.Patterns()
	if len(served) < 20 || !slices.Contains(served, "GET /v1/breakers") || !slices.Contains(served, "POST /v1/events") {
		t.Fatalf("want every service's routes, got %v", served)
	}
	for _, p := range served {
		if c, ok := auth.ClassOf(p); !ok {
			t.Errorf("route %q has no auth class: add it to pkg/auth's routes (and docs/security.md)", p)
		} else {
			t.Logf("%-45s %s", p, c)
		}
	}
	for _, p := range auth.Patterns() {
		if !slices.Contains(served, p) {
			t.Errorf("pkg/auth classifies %q, which no service serves: remove it", p)
		}
	}
}

// Breakers span every account: a submit-only key of acme gets 403 on the
// list and on globex's close, over HTTP (with every path trick too) and
// NATS, and globex's breaker stays open; the operator closes it, and the
// breaker records who.
func TestBreakersAreOperatorOnly(t *testing.T) {
	t.Parallel()
	_, target := servicetest.Provider(t, provider.Faults{Down: true}, provider.WithIdempotent())
	tz := startWith(t, operatorConfig(t.TempDir(), target.URL), tenaz.Options{})
	base := "http://" + tz.HTTPAddr()
	acme, alice := "bearer:"+secAcmeSubmitKey, "bearer:"+secAliceKey

	nc, err := nats.Connect(tz.NATSURL(), nats.UserInfo(opsNATSUser, opsNATSPassword))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	m := nats.NewMsg("tenaz.intake.globex.order.create")
	m.Data = []byte(`{"order_id":"brk-g"}`)
	m.Header.Set("Idempotency-Key", "brk-g")
	if err := nc.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	globexOpen := func() bool {
		var rep ops.BreakersReply
		a := send(t, "GET", base+"/v1/breakers?account=globex", alice, "")
		_ = json.Unmarshal(a.body, &rep)
		return a.status == 200 && len(rep.Items) == 1 && rep.Items[0].State == "open"
	}
	natstest.Eventually(t, 20*time.Second, globexOpen, "globex's breaker to open after the target failed")

	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/breakers"},
		{"GET", "/v1/breakers?account=globex"},
		{"POST", "/v1/breakers/globex/erp/close"},
	} {
		if a := send(t, c.method, base+c.path, acme, ""); a.status != http.StatusForbidden || a.code != "forbidden" {
			t.Errorf("%s %s with acme's submit key: want 403 forbidden, got %d %s", c.method, c.path, a.status, a.body)
		}
		if a := send(t, c.method, base+c.path, "", ""); a.status != http.StatusUnauthorized {
			t.Errorf("%s %s without credentials: want 401, got %d %s", c.method, c.path, a.status, a.body)
		}
	}
	// Paths that look like the open webhook route, or that the router
	// cleans into a breaker route, never reach one without an operator.
	for _, path := range []string{
		"/v1/callbacks/..%2F..%2Fv1%2Fbreakers",
		"/v1/callbacks/..%2F..%2Fv1%2Fbreakers%2Fglobex%2Ferp%2Fclose",
		"/v1/callbacks/../breakers",
		"/v1/callbacks/../breakers/globex/erp/close",
		"/v1/callbacks/erp/../../breakers/globex/erp/close",
		"//v1/breakers",
		"/v1//breakers/globex/erp/close",
		"/v1%2Fbreakers",
		"/v1/breakers%2Fglobex%2Ferp%2Fclose",
		"/v1/callbacks/%2E%2E/%2E%2E/v1/breakers",
		"/healthz/../v1/breakers/globex/erp/close",
	} {
		for _, method := range []string{"GET", "POST"} {
			for _, who := range []string{"", acme} {
				if a := send(t, method, base+path, who, `{}`); a.status < 400 {
					t.Errorf("%s %s (credential %v): want a refusal, got %d %s", method, path, who != "", a.status, a.body)
				}
			}
		}
	}
	// NATS: the operator endpoints want the operator credential.
	for _, c := range []struct {
		name, key string
		status    int
	}{{"no credential", "", 401}, {"acme's submit key", secAcmeSubmitKey, 403}} {
		for ep, req := range map[string]any{ops.BreakersList: ops.BreakersRequest{}, ops.BreakersClose: ops.CloseBreakerRequest{Account: "globex", Target: "erp"}} {
			err := ops.Call(t.Context(), nc, ops.Subject("tenaz", ep), req, nil, ops.WithOperatorKey(c.key))
			var oe *ops.Error
			if !errors.As(err, &oe) || oe.Status != c.status {
				t.Errorf("%s with %s: want %d, got %v", ep, c.name, c.status, err)
			}
		}
	}
	if !globexOpen() {
		t.Fatal("globex's breaker: want it still open after the refused calls")
	}

	// The operator closes it; the breaker says by whom.
	a := send(t, "POST", base+"/v1/breakers/globex/erp/close", alice, "")
	var closed ops.BreakerItem
	if err := json.Unmarshal(a.body, &closed); a.status != 200 || err != nil || closed.State != "closed" || !strings.Contains(closed.By+" "+closed.Reason, "operator:alice") {
		t.Fatalf("close as alice: want 200 closed by operator:alice, got %d %s", a.status, a.body)
	}
}

// The CLI sends the operator key of TENAZ_OPERATOR_KEY to the operator
// endpoints: without it the command fails and says what to set, an API
// key is refused, and with the operator's key the histories record the
// operator the key proves (operator:alice), whatever $USER says.
func TestCLIOperatorKey(t *testing.T) {
	t.Parallel()
	_, targetURL := idempotentTarget(t)
	tz := startWith(t, operatorConfig(t.TempDir(), targetURL), tenaz.Options{})
	base := "http://" + tz.HTTPAddr()
	op := newOperator(t, tz.NATSURL())
	op.env["USER"] = "mallory"
	op.env["NATS_USER"], op.env["NATS_PASSWORD"] = opsNATSUser, opsNATSPassword

	later := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	var v, d view
	for _, s := range []struct {
		v    *view
		body string
	}{
		{&v, `{"account":"acme","kind":"order.create","not_before":"` + later + `","payload":{"order_id":"key-1"}}`},
		{&d, `{"account":"acme","kind":"order.create","payload":{"order_id":"key-2","reject":true}}`},
	} {
		a := send(t, "POST", base+"/v1/events", "bearer:"+secAcmeKey, s.body)
		if err := json.Unmarshal(a.body, s.v); a.status != http.StatusAccepted || err != nil {
			t.Fatalf("submit: want 202, got %d %s", a.status, a.body)
		}
	}
	r := op.must(cli.ExitError, "breakers", "ls")
	if !strings.Contains(r.stderr, "unauthorized") || !strings.Contains(r.stderr, cli.OperatorKeyEnv) {
		t.Fatalf("without a key: want unauthorized and a hint to set %s, got\n%s", cli.OperatorKeyEnv, r)
	}
	op.must(cli.ExitError, "events", "cancel", v.ID)
	op.env[cli.OperatorKeyEnv] = secAcmeKey
	if r := op.must(cli.ExitError, "dead", "ls"); !strings.Contains(r.stderr, "forbidden") {
		t.Fatalf("with an API key: want forbidden, got\n%s", r)
	}

	op.env[cli.OperatorKeyEnv] = secAliceKey
	op.must(cli.ExitOK, "events", "cancel", v.ID, "-m", "customer withdrew")
	var list ops.ListReply
	natstest.Eventually(t, 10*time.Second, func() bool {
		op.must(cli.ExitOK, "dead", "ls", "--json").decode(t, &list)
		return list.Total == 1
	}, "dead ls: want the rejected event, got %+v", &list)
	op.must(cli.ExitOK, "dead", "discard", d.ID, "-m", "test order")
	for _, c := range []struct {
		id     string
		action state.ActionName
		detail string
	}{{v.ID, state.Cancel, "customer withdrew"}, {d.ID, state.Discard, "test order"}} {
		var h ingest.HistoryView
		op.must(cli.ExitOK, "events", "history", c.id, "--json").decode(t, &h)
		if last := h.History[len(h.History)-1]; last.Action != c.action || last.Actor != "operator:alice" || last.Detail != c.detail {
			t.Errorf("history of %s: want {%s operator:alice %s}, got %+v", c.id, c.action, c.detail, last)
		}
	}
	op.must(cli.ExitOK, "dead", "ls", "--json").decode(t, &list)
	if list.Total != 0 {
		t.Fatalf("dead ls after the discard: want none, got %+v", list)
	}
}

// The dispatcher's and the poller's NATS endpoints are an operator's, as
// the other services' are: the reconciler's sweep reads every record
// and answers every account's census, the dispatcher's list names every
// account. Under `tenaz run` every NATS client has the same rights, so
// NATS permissions alone could not keep a producer from them.
func TestServiceEndpointsAreOperatorOnly(t *testing.T) {
	t.Parallel()
	_, target := servicetest.Provider(t, provider.Faults{}, provider.WithIdempotent())
	tz := startWith(t, operatorConfig(t.TempDir(), target.URL), tenaz.Options{})
	nc, err := nats.Connect(tz.NATSURL(), nats.UserInfo(opsNATSUser, opsNATSPassword))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	for _, ep := range []string{"poller.reconcile", "dispatcher.accounts"} {
		for _, c := range []struct {
			name, key string
			status    int
		}{{"no credential", "", 401}, {"acme's submit key", secAcmeSubmitKey, 403}, {"alice's operator key", secAliceKey, 0}} {
			var rep json.RawMessage
			err := ops.Call(t.Context(), nc, ops.Subject("tenaz", ep), nil, &rep, ops.WithOperatorKey(c.key))
			var oe *ops.Error
			switch {
			case c.status == 0 && (err != nil || len(rep) == 0):
				t.Errorf("%s with %s: want its answer, got %v %s", ep, c.name, err, rep)
			case c.status != 0 && (!errors.As(err, &oe) || oe.Status != c.status):
				t.Errorf("%s with %s: want %d, got %v", ep, c.name, c.status, err)
			}
		}
	}
}
