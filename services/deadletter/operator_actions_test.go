package deadletter_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/httpapi/apitest"
	"github.com/tenaz/tenaz/pkg/queue"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
)

// live stores the record of an event of account that is st (scheduled,
// retrying, awaiting_callback or polling), due in an hour, as the
// dispatcher leaves one, and returns its id.
func (e *env) live(account, kind string, st state.State) string {
	e.t.Helper()
	now := time.Now().UTC()
	later := now.Add(time.Hour)
	f := event.Fields{Account: account, Kind: kind, IdempotencyKey: fmt.Sprintf("%s-%s-%d", account, st, now.UnixNano())}
	if st == state.Scheduled {
		f.NotBefore = later.Format(time.RFC3339)
	}
	env, err := event.New(f, []byte(`{"n":1}`), "", "", now)
	if err != nil {
		e.t.Fatal(err)
	}
	rec := queue.Initial(env)
	steps := map[state.State][]state.Action{
		state.Retrying: {{Name: state.Claim, Seq: 1}, {Name: state.Retry, NextRunAt: &later,
			Error: &state.ErrorInfo{Class: "transient", Message: "503 from erp", HTTPStatus: 503}}},
		state.AwaitingCallback: {{Name: state.Claim, Seq: 1}, {Name: state.AwaitCallback, Reference: "ref_9", NextRunAt: &later, Deadline: &later}},
		state.Polling:          {{Name: state.Claim, Seq: 1}, {Name: state.Poll, Reference: "ref_9", NextRunAt: &later, Deadline: &later}},
	}
	for _, a := range steps[st] {
		a.Actor = "dispatcher/test"
		if rec, _, err = state.Apply(rec, a, now); err != nil {
			e.t.Fatal(err)
		}
	}
	if rec.Status != st {
		e.t.Fatalf("live: want %s, made %s", st, rec.Status)
	}
	if _, err := e.St.Create(context.Background(), rec); err != nil {
		e.t.Fatal(err)
	}
	return env.ID
}

// Every route of the operators' actions on live accounts, events and
// breakers, through the binary's handler, held to the OpenAPI document
// (as TestOpenAPIContractDeadletter holds the dead letters' routes): every
// answer it gives them is produced, but the 500s no request brings about.
func TestOpenAPIContractOperatorActions(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	c, want := e.contract(t)
	alice, acme := operatorKeys["alice"], acmeSubmitKey
	scheduled := e.live("acme", "order.create", state.Scheduled)
	retrying := e.live("acme", "order.create", state.Retrying)
	awaiting := e.live("acme", "order.create", state.AwaitingCallback)
	polling := e.live("globex", "order.create", state.Polling)
	unknown := event.ID("acme", "never")
	huge := `{"reason":"` + strings.Repeat("x", int(e.cfg.HTTP.MaxBodyBytes)+128<<10) + `"}`
	soon := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)

	routes := []struct{ method, path string }{
		{"POST", "/v1/accounts/acme/pause"}, {"POST", "/v1/accounts/acme/resume"}, {"GET", "/v1/pauses"},
		{"POST", "/v1/events/" + retrying + "/retry"}, {"POST", "/v1/events/" + awaiting + "/cancel-wait"},
		{"POST", "/v1/breakers/acme/erp/open"}, {"GET", "/v1/actions"},
	}
	for _, r := range routes {
		want(401, r.method, r.path, "", "", "no credential")
		want(403, r.method, r.path, acme, "", "an API key")
	}

	want(200, "POST", "/v1/accounts/acme/pause", alice, `{"reason":"erp migration","for":"2h"}`, "pause for 2h")
	want(400, "POST", "/v1/accounts/acme/pause", alice, `{}`, "no reason")
	want(400, "POST", "/v1/accounts/ac.me/pause", alice, `{"reason":"r"}`, "a bad account")
	want(400, "POST", "/v1/accounts/acme/pause", alice, `{"reason":"r","until":"2001-01-01T00:00:00Z"}`, "an end in the past")
	want(400, "POST", "/v1/accounts/acme/pause", alice, `{"reason":"r","until":"`+soon+`","for":"1h"}`, "until and for")
	want(400, "POST", "/v1/accounts/acme/pause", alice, `{"reason":"r","actor":"operator:bob"}`, "an actor in the body")
	want(413, "POST", "/v1/accounts/acme/pause", alice, huge, "a body over the limit")
	want(200, "GET", "/v1/pauses", alice, "", "the pauses")
	want(200, "GET", "/v1/pauses?account=globex", alice, "", "one account's")
	want(400, "GET", "/v1/pauses?account=ac.me", alice, "", "a bad account")
	want(200, "POST", "/v1/accounts/acme/pause", alice, `{"reason":"until further notice"}`, "pause until resumed (until_resumed)")
	want(200, "GET", "/v1/pauses", alice, "", "the pauses, one until resumed")
	want(200, "POST", "/v1/accounts/acme/resume", alice, `{"reason":"migrated"}`, "resume")
	want(409, "POST", "/v1/accounts/acme/resume", alice, `{"reason":"again"}`, "resume what is not paused")
	want(400, "POST", "/v1/accounts/acme/resume", alice, `{}`, "no reason")
	want(413, "POST", "/v1/accounts/acme/resume", alice, huge, "a body over the limit")

	want(200, "POST", "/v1/events/"+retrying+"/retry", alice, `{"reason":"erp is back"}`, "retry a retrying event now")
	want(200, "POST", "/v1/events/"+scheduled+"/retry", alice, `{"reason":"the customer asked"}`, "run a scheduled event now")
	want(400, "POST", "/v1/events/"+retrying+"/retry", alice, `{}`, "no reason")
	want(400, "POST", "/v1/events/not-an-id/retry", alice, `{"reason":"r"}`, "a bad id")
	want(404, "POST", "/v1/events/"+unknown+"/retry", alice, `{"reason":"r"}`, "an unknown event")
	want(409, "POST", "/v1/events/"+awaiting+"/retry", alice, `{"reason":"r"}`, "an event awaiting its callback")
	want(413, "POST", "/v1/events/"+retrying+"/retry", alice, huge, "a body over the limit")

	want(200, "POST", "/v1/events/"+awaiting+"/cancel-wait", alice, `{"reason":"the bureau lost it"}`, "cancel a callback wait")
	want(200, "POST", "/v1/events/"+polling+"/cancel-wait", alice, `{"reason":"the bureau lost it"}`, "cancel a poll wait")
	want(400, "POST", "/v1/events/"+awaiting+"/cancel-wait", alice, `{}`, "no reason")
	want(400, "POST", "/v1/events/not-an-id/cancel-wait", alice, `{"reason":"r"}`, "a bad id")
	want(404, "POST", "/v1/events/"+unknown+"/cancel-wait", alice, `{"reason":"r"}`, "an unknown event")
	want(409, "POST", "/v1/events/"+retrying+"/cancel-wait", alice, `{"reason":"r"}`, "a retrying event")
	want(413, "POST", "/v1/events/"+awaiting+"/cancel-wait", alice, huge, "a body over the limit")

	want(200, "POST", "/v1/breakers/acme/erp/open", alice, `{"reason":"erp maintenance","until":"`+soon+`"}`, "open until a time")
	want(400, "POST", "/v1/breakers/acme/erp/open", alice, `{"reason":"r"}`, "no end")
	want(400, "POST", "/v1/breakers/acme/erp/open", alice, `{"for":"1h"}`, "no reason")
	want(400, "POST", "/v1/breakers/ac.me/erp/open", alice, `{"reason":"r","for":"1h"}`, "a bad account")
	want(404, "POST", "/v1/breakers/acme/nope/open", alice, `{"reason":"r","for":"1h"}`, "an unknown target")
	want(413, "POST", "/v1/breakers/acme/erp/open", alice, huge, "a body over the limit")

	want(200, "GET", "/v1/actions?account=acme&limit=10", alice, "", "acme's audit")
	want(200, "GET", "/v1/actions", alice, "", "the audit")
	want(400, "GET", "/v1/actions?limit=0", alice, "", "a bad limit")
	want(400, "GET", "/v1/actions?account=ac.me", alice, "", "a bad account")

	servicetest.Stop(t, e.dl)
	for _, r := range routes {
		want(503, r.method, r.path, alice, "", "the service stopped")
	}

	doc, err := apitest.Load()
	if err != nil {
		t.Fatal(err)
	}
	unseen := map[string]string{}
	for _, op := range apitest.Operations(doc) {
		if mine(op) {
			unseen[op+" 500"] = "an unexpected store or stream error: no request brings one about"
		}
	}
	c.Covered(t, mine, unseen)
}

// mine selects the operations of the operators' actions.
func mine(op string) bool {
	return apitest.Under("/v1/accounts", "/v1/pauses", "/v1/actions")(op) || strings.HasSuffix(op, "/retry") ||
		strings.HasSuffix(op, "/cancel-wait") || strings.HasSuffix(op, "/open")
}
