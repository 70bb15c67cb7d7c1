package deadletter_test

import (
	"context"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/daemon"
	"github.com/tenaz/tenaz/pkg/dead"
	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/httpapi/apitest"
	"github.com/tenaz/tenaz/pkg/queue"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
)

// Every operator route of deadletter, and the probes every binary serves,
// driven through the binary's handler (daemon.Mux behind the Guard) by a
// client that checks each request and answer against the OpenAPI
// document: every answer the document gives them is produced, except the
// few listed with the reason, and none it does not give. The 503s come
// last, with the service stopped.
func TestOpenAPIContractDeadletter(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	c, want := e.contract(t)
	alice, acme := operatorKeys["alice"], acmeSubmitKey

	deadIDs := e.seed(4, "acme", "order.create", dead.ReasonPermanent, "permanent", func(int) string { return `{"n":1}` })
	invoice := e.seed(1, "acme", "invoice.send", dead.ReasonPermanent, "permanent", func(int) string { return `{"n":1}` })[0]
	retired := e.seed(2, "acme", "retired.kind", dead.ReasonPermanent, "permanent", func(int) string { return `{"n":1}` })
	reviews := e.seed(2, "globex", "credit.evaluate", dead.ReasonReview, "timeout", func(int) string { return `{"a":1}` })
	e.waitListed(state.Dead, url.Values{}, 7)
	e.waitListed(state.ManualReview, url.Values{}, 2)
	pendingEnv, err := event.New(event.Fields{Account: "acme", Kind: "order.create", IdempotencyKey: "pending-1"}, []byte(`{}`), "", "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.St.Create(context.Background(), queue.Initial(pendingEnv)); err != nil {
		t.Fatal(err)
	}
	pending, unknown := pendingEnv.ID, event.ID("acme", "never")
	huge := `{"reason":"` + strings.Repeat("x", int(e.cfg.HTTP.MaxBodyBytes)+128<<10) + `"}`

	// Every operator route refuses no credential (401) and an API key (403).
	operatorRoutes := []struct{ method, path string }{
		{"GET", "/v1/dead"}, {"GET", "/v1/review"}, {"GET", "/v1/dead/" + deadIDs[0]}, {"GET", "/v1/review/" + reviews[0]},
		{"POST", "/v1/dead/replay"}, {"POST", "/v1/dead/" + deadIDs[0] + "/replay"}, {"POST", "/v1/dead/discard"},
		{"GET", "/v1/dead/jobs/j"}, {"POST", "/v1/dead/jobs/j/cancel"}, {"POST", "/v1/review/" + reviews[0] + "/resolve"}, {"GET", "/v1/breakers"},
		{"POST", "/v1/breakers/acme/erp/close"},
	}
	for _, r := range operatorRoutes {
		want(401, r.method, r.path, "", "", "no credential")
		want(403, r.method, r.path, acme, "", "an API key")
	}

	for _, list := range []string{"/v1/dead", "/v1/review"} {
		want(200, "GET", list+"?account=acme&limit=10", alice, "", "a page")
		want(400, "GET", list+"?limit=0", alice, "", "a bad limit")
	}
	for _, show := range []string{"/v1/dead/", "/v1/review/"} {
		want(200, "GET", show+deadIDs[0], alice, "", "a dead event")
		want(400, "GET", show+"seq_x", alice, "", "a bad entry")
		want(404, "GET", show+unknown, alice, "", "an unknown event")
		want(409, "GET", show+pending, alice, "", "a pending event")
	}

	want(200, "POST", "/v1/dead/replay", alice, `{"ids":["`+deadIDs[0]+`"],"reason":"fixed"}`, "replay by id")
	want(202, "POST", "/v1/dead/replay", alice, `{"filter":{"account":"nobody"},"reason":"fixed"}`, "replay by filter")
	want(400, "POST", "/v1/dead/replay", alice, `{"reason":"no ids"}`, "no ids")
	want(404, "POST", "/v1/dead/replay", alice, `{"ids":["`+unknown+`"]}`, "an unknown event")
	want(409, "POST", "/v1/dead/replay", alice, `{"ids":["`+pending+`"]}`, "a pending event")
	want(413, "POST", "/v1/dead/replay", alice, huge, "a body over the limit")
	want(422, "POST", "/v1/dead/replay", alice, `{"ids":["`+retired[0]+`"]}`, "a kind no longer configured")

	want(200, "POST", "/v1/dead/"+deadIDs[1]+"/replay", alice, `{"reason":"fixed"}`, "replay one")
	want(400, "POST", "/v1/dead/"+deadIDs[2]+"/replay", alice, `{"stage":"third"}`, "a bad stage")
	want(404, "POST", "/v1/dead/"+unknown+"/replay", alice, ``, "an unknown event")
	want(409, "POST", "/v1/dead/"+pending+"/replay", alice, ``, "a pending event")
	want(413, "POST", "/v1/dead/"+deadIDs[2]+"/replay", alice, huge, "a body over the limit")
	want(422, "POST", "/v1/dead/"+invoice+"/replay", alice, `{"payload":{"no_n":true}}`, "an edited payload against the schema")

	want(200, "POST", "/v1/dead/discard", alice, `{"ids":["`+deadIDs[3]+`"],"reason":"duplicate"}`, "discard")
	want(400, "POST", "/v1/dead/discard", alice, `{"ids":["`+deadIDs[2]+`"]}`, "no reason")
	want(404, "POST", "/v1/dead/discard", alice, `{"ids":["`+unknown+`"],"reason":"x"}`, "an unknown event")
	want(409, "POST", "/v1/dead/discard", alice, `{"ids":["`+pending+`"],"reason":"x"}`, "a pending event")
	want(413, "POST", "/v1/dead/discard", alice, huge, "a body over the limit")

	var job struct {
		JobID string `json:"job_id"`
	}
	if st, _ := e.postWith(alice, "/v1/dead/replay", map[string]any{"filter": map[string]string{"account": "nobody"}, "reason": "r"}, &job); st != 202 || job.JobID == "" {
		t.Fatalf("a replay job: want 202 with its id, got %d", st)
	}
	want(200, "GET", "/v1/dead/jobs/"+job.JobID, alice, "", "a job")
	want(400, "GET", "/v1/dead/jobs/a.b", alice, "", "a bad job id")
	want(400, "GET", "/v1/dead/jobs/nope", alice, "", "an id no job has the shape of")
	want(404, "GET", "/v1/dead/jobs/job_0000000000000001", alice, "", "an unknown job")
	slow := e.seed(2, "slowjob", "order.create", dead.ReasonPermanent, "permanent", func(int) string { return `{"n":1}` })
	e.waitListed(state.Dead, url.Values{"account": {"slowjob"}}, len(slow))
	if st, _ := e.postWith(alice, "/v1/dead/replay", map[string]any{"filter": map[string]string{"account": "slowjob"}, "reason": "r", "rate_per_second": 0.001}, &job); st != 202 || job.JobID == "" {
		t.Fatalf("a slow replay job: want 202 with its id, got %d", st)
	}
	cancel := "/v1/dead/jobs/" + job.JobID + "/cancel"
	want(400, "POST", cancel, alice, `{}`, "no reason")
	want(200, "POST", cancel, alice, `{"reason":"wrong filter"}`, "cancel a running job")
	want(409, "POST", cancel, alice, `{"reason":"again"}`, "a job not running")
	want(404, "POST", "/v1/dead/jobs/job_0000000000000001/cancel", alice, `{"reason":"x"}`, "an unknown job")
	want(413, "POST", cancel, alice, huge, "a body over the limit")

	want(200, "POST", "/v1/review/"+reviews[0]+"/resolve", alice, `{"outcome":"done","result":{"ok":true},"reason":"checked"}`, "resolve")
	want(400, "POST", "/v1/review/"+reviews[1]+"/resolve", alice, `{"outcome":"maybe"}`, "a bad outcome")
	want(404, "POST", "/v1/review/"+unknown+"/resolve", alice, `{"outcome":"done"}`, "an unknown event")
	want(409, "POST", "/v1/review/"+pending+"/resolve", alice, `{"outcome":"done"}`, "a pending event")
	want(413, "POST", "/v1/review/"+reviews[1]+"/resolve", alice, huge, "a body over the limit")
	want(422, "POST", "/v1/review/"+retired[1]+"/resolve", alice, `{"outcome":"requeue_primary","reason":"r"}`, "a kind no longer configured")

	want(200, "GET", "/v1/breakers?account=acme", alice, "", "the breakers")
	want(400, "GET", "/v1/breakers?account=ac.me", alice, "", "a bad account")
	want(400, "POST", "/v1/breakers/ac.me/erp/close", alice, "", "a bad account")
	want(404, "POST", "/v1/breakers/acme/erp/close", alice, "", "no such breaker")

	want(200, "GET", "/healthz", "", "", "health")
	want(200, "GET", "/readyz", "", "", "ready")
	want(200, "GET", "/metrics", "", "", "metrics")

	// Stopped, the service answers 503 on every route, and is not ready.
	servicetest.Stop(t, e.dl)
	for _, r := range operatorRoutes {
		want(503, r.method, r.path, alice, "", "the service stopped")
	}
	want(503, "GET", "/readyz", "", "", "the service stopped")

	internal := "an unexpected store or stream error: no request brings one about"
	unseen := map[string]string{
		"POST /v1/breakers/{account}/{target}/close 200": "needs an open breaker, which needs a failing dispatcher: services/tenaz TestBreakersAreOperatorOnly closes one",
	}
	for _, op := range []string{"GET /v1/dead/{id}", "GET /v1/review/{id}", "POST /v1/dead/replay", "POST /v1/dead/{id}/replay",
		"POST /v1/dead/discard", "GET /v1/dead/jobs/{job}", "POST /v1/dead/jobs/{job}/cancel", "POST /v1/review/{id}/resolve", "POST /v1/breakers/{account}/{target}/close"} {
		unseen[op+" 500"] = internal
	}
	// Opening a breaker is an operator action: TestOpenAPIContractOperatorActions.
	routes := apitest.Under("/v1/dead", "/v1/review", "/v1/breakers", "/healthz", "/readyz", "/metrics")
	c.Covered(t, func(op string) bool { return routes(op) && !strings.HasSuffix(op, "/open") }, unseen)
}

// contract serves the binary's handler (daemon.Mux behind the Guard) and
// returns the contract that checks every exchange against the OpenAPI
// document and want, which sends a request and checks its status.
func (e *env) contract(t *testing.T) (*apitest.Contract, func(status int, method, path, key, body, what string)) {
	t.Helper()
	srv := httptest.NewServer(daemon.Handler(e.cfg, e.auth, daemon.Mux(e.dl)))
	t.Cleanup(srv.Close)
	c := apitest.New(t)
	client := c.Client()
	t.Cleanup(client.CloseIdleConnections)
	send := func(method, path, key, body string) int {
		t.Helper()
		return servicetest.Send(t, servicetest.Context(t, 2*time.Minute), client, method, srv.URL+path, key, body).Status
	}
	want := func(status int, method, path, key, body, what string) {
		t.Helper()
		if got := send(method, path, key, body); got != status {
			t.Errorf("%s %s (%s): want %d, got %d", method, path, what, status, got)
		}
	}
	return c, want
}
