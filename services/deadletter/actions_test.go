package deadletter_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenaz/tenaz/pkg/dead"
	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/metrics"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/services/dispatcher"
	"github.com/tenaz/tenaz/services/ingest"
)

// submit submits one event over NATS (headers alternate name, value) and
// returns its id.
func submit(t *testing.T, e *env, account, kind, key, payload string, headers ...string) string {
	t.Helper()
	return e.Submit(account, kind, []string{key}, func(string) string { return payload }, headers...)[0]
}

func startIngest(t *testing.T, e *env) *ingest.Service {
	t.Helper()
	nc, _ := e.Srv.Conn(t)
	ing, err := ingest.New(ingest.Options{Conn: nc, Config: e.cfg})
	if err != nil {
		t.Fatal(err)
	}
	servicetest.Run(t, context.Background(), ing)
	return ing
}

func lastEntry(r state.Record) state.Entry { return r.History[len(r.History)-1] }

// A payload the target refuses (422) is dead at once; the operator fixes
// the data and replays it with the edited payload: it reaches done, the
// target got the edited payload, the history says who replayed and why,
// and the event leaves the list. A second replay is refused (409): a
// replay never runs an event that is already on its way.
func TestReplayWithEditedPayloadReachesDone(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	startIngest(t, e)
	e.startDispatcher(nil)
	id := submit(t, e, "acme", "order.create", "o-1", `{"order_id":"o-1","reject":true}`)
	natstest.Eventually(t, 30*time.Second, func() bool {
		r, _, err := e.St.Get(context.Background(), "", id)
		return err == nil && r.Status == state.Dead
	}, "the rejected event to be dead")
	f := url.Values{"account": {"acme"}, "kind": {"order.create"}}
	e.waitListed(state.Dead, f, 1)

	var show ops.ShowReply
	if err := e.call(ops.DeadShow, ops.ShowRequest{ID: id}, &show); err != nil {
		t.Fatal(err)
	}
	if show.Event == nil || !strings.Contains(string(show.Event.Payload), `"reject":true`) || show.Item.Reason != dead.ReasonPermanent ||
		show.Item.HTTPStatus != 422 || show.Record == nil || lastEntry(*show.Record).HTTPStatus != 422 {
		t.Fatalf("show: want the payload, reason permanent, HTTP 422 in the item and the timeline, got %+v", show)
	}

	fixed := json.RawMessage(`{"order_id":"o-1","reject":false,"note":"fixed by ops"}`)
	var rep ops.ReplayReply
	if err := e.call(ops.DeadReplay, ops.ReplayRequest{IDs: []string{id}, Payload: fixed, Reason: "customer fixed the address"}, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Replayed != 1 {
		t.Fatalf("want 1 replayed, got %+v", rep)
	}
	natstest.Eventually(t, 30*time.Second, func() bool { return e.Record(id).Status == state.Done }, "the replayed event to be done")
	calls := e.p.CallsFor(id)
	last := calls[len(calls)-1]
	if !strings.Contains(string(last.Body), "fixed by ops") || last.Status != http.StatusOK {
		t.Fatalf("the target must get the edited payload and answer 200, got %d %s", last.Status, last.Body)
	}
	// Each call says how many replays came before it, for a webhook to
	// echo (callback.replay_field).
	if first, got := calls[0].Header.Get("Tenaz-Replay"), last.Header.Get("Tenaz-Replay"); first != "0" || got != "1" {
		t.Fatalf("Tenaz-Replay: want 0 on the first call and 1 on the replayed one, got %q and %q", first, got)
	}
	r := e.Record(id)
	if r.Replays != 1 {
		t.Fatalf("want the record's replays at 1, got %d", r.Replays)
	}
	var replay *state.Entry
	for i := range r.History {
		if r.History[i].Action == state.Replay {
			replay = &r.History[i]
		}
	}
	if replay == nil || replay.Actor != "operator:alice" || !strings.Contains(replay.Detail, "customer fixed the address") || !strings.Contains(replay.Detail, "payload edited") {
		t.Fatalf("history: want a replay by operator:alice with the reason and the edit noted, got %+v", r.History)
	}
	e.waitListed(state.Dead, f, 0)

	err := e.call(ops.DeadReplay, ops.ReplayRequest{IDs: []string{id}}, &rep)
	var oe *ops.Error
	if !errors.As(err, &oe) || oe.Status != http.StatusConflict || oe.Code != "not_parked" {
		t.Fatalf("replaying a done event: want 409 not_parked, got %v", err)
	}
}

// A message that crashes its worker every time ends dead through the
// server's max-deliveries advisory, shows in the list with reason
// max_deliveries, and once the handler is fixed a replay brings it to done.
func TestCrashedEventDeadThroughAdvisoryThenReplayed(t *testing.T) {
	t.Parallel()
	e := setup(t, "streams: {ack_wait: 100ms}")
	startIngest(t, e)
	poison := event.ID("acme", "poison")
	var fixed atomic.Bool
	e.startDispatcher(&dispatcher.Hooks{AfterClaim: func(id string, _ int) error {
		if id == poison && !fixed.Load() {
			return errors.New("worker died")
		}
		return nil
	}})
	submit(t, e, "acme", "order.create", "poison", `{"order_id":"poison"}`)
	e.waitListed(state.Dead, url.Values{"reason": {dead.ReasonCrash}}, 1)
	var list ops.ListReply
	if err := e.call(ops.DeadList, ops.ListRequest{Account: "acme", Reason: dead.ReasonCrash}, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].ID != poison || list.Items[0].Class != "crash" {
		t.Fatalf("want the poison event listed with class crash, got %+v", list.Items)
	}
	fixed.Store(true)
	var rep ops.ReplayReply
	if err := e.callWith(operatorKeys["bob"], ops.DeadReplay, ops.ReplayRequest{IDs: []string{poison}, Reason: "handler fixed in v2"}, &rep); err != nil || rep.Replayed != 1 {
		t.Fatalf("replay: %+v, %v", rep, err)
	}
	natstest.Eventually(t, 60*time.Second, func() bool { return e.Record(poison).Status == state.Done }, "the replayed poison event to be done")
	if n := e.p.Effects(poison); n != 1 {
		t.Fatalf("want the effect applied once, got %d", n)
	}
}

// Manual reviews: listed under review (not dead), resolved as done with a
// result by one operator, requeued to the primary by another (which
// delivers it), discarded by a third; each leaves the list and its
// history names who and why.
func TestResolveReviews(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	e.startDispatcher(nil)
	ids := e.seed(3, "globex", "credit.evaluate", dead.ReasonReview, "timeout", func(i int) string { return `{"applicant":"a` + string(rune('0'+i)) + `"}` })
	e.waitListed(state.ManualReview, url.Values{}, 3)
	if n := e.listed(state.Dead, url.Values{}); n != 0 {
		t.Fatalf("reviews must not be listed as dead, got %d", n)
	}

	code, body := e.postWith(operatorKeys["carol"], "/v1/review/"+ids[0]+"/resolve", map[string]any{"outcome": "done", "result": map[string]string{"decision": "approved"}, "reason": "bureau confirmed by phone"}, nil)
	if code != http.StatusOK {
		t.Fatalf("resolve done: %d %s", code, body)
	}
	r := e.Record(ids[0])
	if r.Status != state.Done || string(r.Result) != `{"decision":"approved"}` || lastEntry(r).Actor != "operator:carol" || lastEntry(r).Detail != "bureau confirmed by phone" {
		t.Fatalf("resolved: want done with the result and carol's reason, got %s %s %+v", r.Status, r.Result, lastEntry(r))
	}
	if err := e.callWith(operatorKeys["dave"], ops.ReviewResolve, ops.ResolveRequest{ID: ids[1], Outcome: ops.OutcomeRequeuePrimary, Reason: "bureau back up"}, nil); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 30*time.Second, func() bool { return e.Record(ids[1]).Status == state.Done }, "the requeued review to be delivered")
	if err := e.callWith(operatorKeys["erin"], ops.ReviewResolve, ops.ResolveRequest{ID: ids[2], Outcome: ops.OutcomeDiscard, Reason: "applicant withdrew"}, nil); err != nil {
		t.Fatal(err)
	}
	if r := e.Record(ids[2]); r.Status != state.Cancelled || lastEntry(r).Actor != "operator:erin" {
		t.Fatalf("discarded: want cancelled by operator:erin, got %s %+v", r.Status, lastEntry(r))
	}
	e.waitListed(state.ManualReview, url.Values{}, 0)
}

// Bad requests answer with a code and a message that say what is wrong,
// over micro (error headers + JSON body) and HTTP alike.
func TestRequestErrors(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	ids := e.seed(1, "acme", "invoice.send", dead.ReasonPermanent, "permanent", func(int) string { return `{"n":1}` })
	refused := e.seed(1, "acme", "invoice.send", dead.ReasonRejected, "schema_violation", func(int) string { return `{"x":1}` })
	e.waitListed(state.Dead, url.Values{}, 2)
	long := strings.Repeat("é", ops.MaxReason/2+1) // kept in the history and the audit: bounded
	twoYears := time.Now().AddDate(2, 0, 0)
	for _, tc := range []struct {
		name   string
		ep     string
		req    any
		status int
		code   string
	}{
		{"unknown id", ops.DeadShow, ops.ShowRequest{ID: event.ID("acme", "nope")}, 404, "not_found"},
		{"a body that names the actor", ops.DeadReplay, map[string]any{"ids": ids, "actor": "mallory"}, 400, "malformed"},
		{"bad stage", ops.DeadReplay, ops.ReplayRequest{IDs: ids, Stage: "third"}, 400, "invalid_stage"},
		{"no fallback", ops.DeadReplay, ops.ReplayRequest{IDs: ids, Stage: "fallback"}, 400, "no_fallback"},
		{"payload against the schema", ops.DeadReplay, ops.ReplayRequest{IDs: ids, Payload: json.RawMessage(`{"x":1}`)}, 422, "schema_violation"},
		{"replay of a payload the schema refuses", ops.DeadReplay, ops.ReplayRequest{IDs: refused}, 422, "schema_violation"},
		{"payload null", ops.DeadReplay, ops.ReplayRequest{IDs: ids, Payload: json.RawMessage(`null`)}, 400, "malformed"},
		{"payload not UTF-8", ops.DeadReplay, ops.ReplayRequest{IDs: ids, Payload: json.RawMessage("{\"n\":\"caf\xe9\"}")}, 400, "malformed"},
		// Read two ways by decoders: the target could get other than the
		// schema check saw (event.CheckPayload).
		{"payload with a member given twice", ops.DeadReplay, ops.ReplayRequest{IDs: ids, Payload: json.RawMessage(`{"n":"x","n":1}`)}, 400, "malformed"},
		{"payload with a lone surrogate escape", ops.DeadReplay, ops.ReplayRequest{IDs: ids, Payload: json.RawMessage(`{"n":1,"note":"\udc00"}`)}, 400, "malformed"},
		{"payload with two ids", ops.DeadReplay, ops.ReplayRequest{IDs: []string{ids[0], ids[0]}, Payload: json.RawMessage(`{"n":2}`)}, 400, "bad_request"},
		{"discard without reason", ops.DeadDiscard, ops.DiscardRequest{IDs: ids}, 400, "reason_required"},
		{"discard with a reason too long", ops.DeadDiscard, ops.DiscardRequest{IDs: ids, Reason: long}, 400, "reason_too_long"},
		{"replay with a reason too long", ops.DeadReplay, ops.ReplayRequest{IDs: ids, Reason: long}, 400, "reason_too_long"},
		{"pause with a reason too long", ops.AccountsPause, ops.PauseRequest{Account: "acme", For: "1h", Reason: long}, 400, "reason_too_long"},
		{"pause for a century", ops.AccountsPause, ops.PauseRequest{Account: "acme", For: "1000000h", Reason: "maintenance"}, 400, "invalid_until"},
		{"breaker opened for two years", ops.BreakersOpen, ops.OpenBreakerRequest{Account: "acme", Target: "erp", Until: &twoYears, Reason: "maintenance"}, 400, "invalid_until"},
		{"bad cursor", ops.DeadList, ops.ListRequest{Cursor: "zzz"}, 400, "invalid_cursor"},
		{"unknown field", ops.DeadList, map[string]any{"acount": "acme"}, 400, "malformed"},
		// Decoded regardless of case, "IDS" would win over "ids".
		{"ids in two spellings", ops.DeadReplay, map[string]any{"ids": ids, "IDS": ids, "reason": "retry"}, 400, "malformed"},
		{"bad outcome", ops.ReviewResolve, ops.ResolveRequest{ID: ids[0], Outcome: "maybe"}, 400, "invalid_outcome"},
		{"unknown job", ops.DeadJob, ops.JobRequest{JobID: "job_0000000000000001"}, 404, "not_found"},
		{"malformed job id", ops.DeadJob, ops.JobRequest{JobID: "job_nope"}, 400, "invalid_job"},
		{"unknown breaker", ops.BreakersClose, ops.CloseBreakerRequest{Account: "acme", Target: "erp"}, 404, "not_found"},
	} {
		err := e.call(tc.ep, tc.req, nil)
		var oe *ops.Error
		if !errors.As(err, &oe) || oe.Status != tc.status || oe.Code != tc.code || oe.Message == "" {
			t.Errorf("%s: want %d %s with a message, got %v", tc.name, tc.status, tc.code, err)
		}
	}
	if code, body := e.post("/v1/dead/replay", map[string]any{"ids": ids, "actor": "mallory"}, nil); code != 400 || !strings.Contains(body, `"malformed"`) {
		t.Errorf("HTTP replay naming the actor: want 400 malformed, got %d %s", code, body)
	}
	if code := e.get("/v1/dead?since=yesterday", nil); code != 400 {
		t.Errorf("HTTP list with a bad since: want 400, got %d", code)
	}
	// A misspelt parameter is not ignored (that would list every account)
	// and a repeated one is not half read.
	for _, path := range []string{"/v1/dead", "/v1/review", "/v1/breakers", "/v1/pauses", "/v1/actions", "/v1/config/accounts", "/v1/audit/export", "/v1/events"} {
		for query, code := range map[string]string{"?acount=acme": "invalid_acount", "?account=acme&account=globex": "invalid_account"} {
			r := servicetest.Send(t, e.Ctx(), http.DefaultClient, http.MethodGet, e.http.URL+path+query, "", "")
			if r.Status != 400 || !strings.Contains(string(r.Body), `"`+code+`"`) {
				t.Errorf("GET %s%s: want 400 %s, got %d %s", path, query, code, r.Status, r.Body)
			}
		}
	}
	if code, body := e.post("/v1/dead/discard", map[string]any{"ids": ids, "reason": long}, nil); code != 400 || !strings.Contains(body, `"reason_too_long"`) {
		t.Errorf("HTTP discard with a reason too long: want 400 reason_too_long, got %d %s", code, body)
	}
	var held ops.PausesReply
	if err := e.call(ops.PausesList, ops.PausesRequest{}, &held); err != nil {
		t.Fatal(err)
	}
	if len(held.Items) != 0 {
		t.Fatalf("refused requests must change nothing, got %+v held", held.Items)
	}
	if e.Record(ids[0]).Status != state.Dead {
		t.Fatal("refused requests must change nothing")
	}
}

// Discard by selection: each event is cancelled with the reason, one that
// is no longer dead is counted as skipped, and the list empties.
func TestDiscardSelection(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	ids := e.seed(5, "acme", "invoice.send", dead.ReasonExhausted, "transient", func(int) string { return `{"n":1}` })
	e.waitListed(state.Dead, url.Values{"kind": {"invoice.send"}}, 5)
	var first ops.ActionReply
	if err := e.callWith(operatorKeys["frank"], ops.DeadDiscard, ops.DiscardRequest{IDs: ids[:1], Reason: "duplicate invoice"}, &first); err != nil || first.Done != 1 {
		t.Fatalf("discard one: %+v %v", first, err)
	}
	var rep ops.ActionReply
	if err := e.callWith(operatorKeys["frank"], ops.DeadDiscard, ops.DiscardRequest{IDs: ids, Reason: "duplicate invoice"}, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Done != 4 || rep.Skipped != 1 || len(rep.Errors) != 0 {
		t.Fatalf("want 4 discarded and 1 skipped, got %+v", rep)
	}
	for _, id := range ids {
		if r := e.Record(id); r.Status != state.Cancelled || lastEntry(r).Detail != "duplicate invoice" {
			t.Fatalf("%s: want cancelled with the reason, got %s %+v", id, r.Status, lastEntry(r))
		}
	}
	e.waitListed(state.Dead, url.Values{}, 0)
}

// A submission refused at intake has no event: it is listed (by its DEAD
// sequence), advised once, shown with the raw body, and can be discarded.
func TestRejectedSubmissionListedAndDiscarded(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	adv := make(chan dead.Advisory, 4)
	sub, _ := e.NC.Subscribe("tenaz.advisory.dead.>", func(m *nats.Msg) {
		var a dead.Advisory
		_ = json.Unmarshal(m.Data, &a)
		adv <- a
	})
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	startIngest(t, e)
	submit(t, e, "acme", "no.such.kind", "k1", `{"x":1}`)
	e.waitListed(state.Dead, url.Values{"reason": {dead.ReasonRejected}}, 1)
	var list ops.ListReply
	_ = e.call(ops.DeadList, ops.ListRequest{Reason: dead.ReasonRejected}, &list)
	it := list.Items[0]
	if it.Seq == 0 || it.ID != fmt.Sprintf("seq_%d", it.Seq) || it.Account != "acme" {
		t.Fatalf("want an event-less item named seq_<its sequence>, got %+v", it)
	}
	select {
	case a := <-adv:
		if a.Reason != dead.ReasonRejected || a.Account != "acme" {
			t.Fatalf("advisory: want rejected_at_intake for acme, got %+v", a)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no dead advisory for the rejected submission")
	}
	// Counted under "unconfigured", not under the kind a producer chose:
	// any number of made-up kinds add no series.
	kinds := func() (made, unconfigured bool) {
		mfs, err := prometheus.DefaultGatherer.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != metrics.NameDead {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					made = made || l.GetName() == "kind" && l.GetValue() == "no.such.kind"
					unconfigured = unconfigured || l.GetName() == "kind" && l.GetValue() == metrics.Unconfigured
				}
			}
		}
		return made, unconfigured
	}
	natstest.Eventually(t, 10*time.Second, func() bool { _, u := kinds(); return u }, "%s: want a series of kind %q", metrics.NameDead, metrics.Unconfigured)
	if made, _ := kinds(); made {
		t.Fatalf("%s: want no series of the made-up kind no.such.kind", metrics.NameDead)
	}
	var show ops.ShowReply
	if err := e.call(ops.DeadShow, ops.ShowRequest{Seq: it.Seq}, &show); err != nil || string(show.Raw) != `{"x":1}` ||
		len(show.RawHeader["Idempotency-Key"]) != 1 || show.RawHeader["Idempotency-Key"][0] != "k1" {
		t.Fatalf("show: want the raw body and headers (Idempotency-Key k1), got %+v %v", show, err)
	}
	var rep ops.ActionReply
	if err := e.callWith(operatorKeys["gina"], ops.DeadDiscard, ops.DiscardRequest{Seqs: []uint64{it.Seq}, Reason: "test traffic"}, &rep); err != nil || rep.Done != 1 {
		t.Fatalf("discard by seq: %+v %v", rep, err)
	}
	e.waitListed(state.Dead, url.Values{}, 0)
	// The entry is gone; the audit says who dropped which, and why.
	var audit ops.ActionsReply
	if err := e.call(ops.ActionsList, ops.ActionsRequest{Account: "acme"}, &audit); err != nil || len(audit.Items) != 1 {
		t.Fatalf("audit: want the discard, got %+v %v", audit, err)
	}
	if a := audit.Items[0]; a.Action != ops.ActionDiscardEntry || a.Seq != it.Seq || a.Actor != "operator:gina" || a.Reason != "test traffic" ||
		!strings.Contains(a.Entry, "no.such.kind") || !strings.Contains(a.Entry, it.Class) {
		t.Fatalf("audit: want discard_entry of seq %d (no.such.kind, %s) by operator:gina for test traffic, got %+v", it.Seq, it.Class, a)
	}
}

// A review resolved by discarding needs a reason, as dead discard does:
// without one (or with only spaces) it is refused 400 reason_required over
// HTTP and NATS and stays in review; with one it is cancelled and its
// history says why.
func TestResolveDiscardNeedsReason(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	ids := e.seed(1, "globex", "credit.evaluate", dead.ReasonReview, "timeout", func(int) string { return `{"applicant":"a"}` })
	e.waitListed(state.ManualReview, url.Values{}, 1)
	for _, why := range []string{"", "  "} {
		body := map[string]any{"outcome": "discard"}
		if why != "" {
			body["reason"] = why
		}
		code, text := e.post("/v1/review/"+ids[0]+"/resolve", body, nil)
		var eb ops.ErrorBody
		if err := json.Unmarshal([]byte(text), &eb); code != http.StatusBadRequest || err != nil || eb.Error.Code != "reason_required" || eb.Error.Message == "" {
			t.Errorf("POST resolve %v: want 400 reason_required with a message, got %d %s", body, code, text)
		}
		err := e.call(ops.ReviewResolve, ops.ResolveRequest{ID: ids[0], Outcome: ops.OutcomeDiscard, Reason: why}, nil)
		var oe *ops.Error
		if !errors.As(err, &oe) || oe.Status != http.StatusBadRequest || oe.Code != "reason_required" {
			t.Errorf("NATS %s with reason %q: want 400 reason_required, got %v", ops.ReviewResolve, why, err)
		}
	}
	if r := e.Record(ids[0]); r.Status != state.ManualReview {
		t.Fatalf("refused resolves must change nothing, got %s %+v", r.Status, lastEntry(r))
	}
	if err := e.call(ops.ReviewResolve, ops.ResolveRequest{ID: ids[0], Outcome: ops.OutcomeDiscard, Reason: "applicant withdrew"}, nil); err != nil {
		t.Fatal(err)
	}
	if r := e.Record(ids[0]); r.Status != state.Cancelled || lastEntry(r).Detail != "applicant withdrew" {
		t.Fatalf("discarded with a reason: want cancelled saying why, got %s %+v", r.Status, lastEntry(r))
	}
}

// An account or kind filter that cannot be a name is refused 400
// invalid_account / invalid_kind naming the parameter, as GET /v1/events
// refuses it, over HTTP and NATS: an empty list would say that nothing
// matched. A good name still lists.
func TestListFiltersRefuseBadNames(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	e.seed(1, "acme", "invoice.send", dead.ReasonPermanent, "permanent", func(int) string { return `{"n":1}` })
	e.waitListed(state.Dead, url.Values{}, 1)
	for _, tc := range []struct{ query, code string }{
		{"/v1/dead?account=bad%20acct", "invalid_account"},
		{"/v1/dead?kind=bad%20kind", "invalid_kind"},
		{"/v1/review?account=..%2F", "invalid_account"},
		{"/v1/review?kind=a..b", "invalid_kind"},
		{"/v1/breakers?account=bad%20acct", "invalid_account"},
		{"/v1/config/accounts?account=bad.name", "invalid_account"},
		{"/v1/events?account=bad%20acct", "invalid_account"}, // the reference
	} {
		r := servicetest.Send(t, e.Ctx(), http.DefaultClient, http.MethodGet, e.http.URL+tc.query, "", "")
		var eb ops.ErrorBody
		param := strings.TrimPrefix(tc.code, "invalid_")
		if err := json.Unmarshal(r.Body, &eb); r.Status != http.StatusBadRequest || err != nil || eb.Error.Code != tc.code || !strings.HasPrefix(eb.Error.Message, param+": ") {
			t.Errorf("GET %s: want 400 %s with a message naming %s, got %d %s", tc.query, tc.code, param, r.Status, r.Body)
		}
	}
	for _, tc := range []struct {
		ep   string
		req  any
		code string
	}{
		{ops.DeadList, ops.ListRequest{Account: "bad acct"}, "invalid_account"},
		{ops.DeadList, ops.ListRequest{Kind: "bad kind"}, "invalid_kind"},
		{ops.ReviewList, ops.ListRequest{Account: "../"}, "invalid_account"},
		{ops.BreakersList, ops.BreakersRequest{Account: "bad acct"}, "invalid_account"},
		{ops.StoredList, ops.StoredListRequest{Account: "bad.name"}, "invalid_account"},
	} {
		err := e.call(tc.ep, tc.req, nil)
		var oe *ops.Error
		if !errors.As(err, &oe) || oe.Status != http.StatusBadRequest || oe.Code != tc.code || oe.Message == "" {
			t.Errorf("NATS %s %+v: want 400 %s, got %v", tc.ep, tc.req, tc.code, err)
		}
	}
	var list ops.ListReply
	if code := e.get("/v1/dead?account=acme&kind=invoice.send", &list); code != http.StatusOK || list.Total != 1 {
		t.Errorf("GET /v1/dead of acme's invoice.send: want its one entry, got %d %+v", code, list)
	}
	var brk ops.BreakersReply
	if code := e.get("/v1/breakers?account=acme", &brk); code != http.StatusOK {
		t.Errorf("GET /v1/breakers?account=acme: want 200, got %d", code)
	}
}

// An action decided on one death of an event is not applied to a later
// one: alice looks at X's entry, bob replays X, which dies again with
// another entry, and alice's discard, replay or resolve of what she saw
// is refused 409 entry_changed, over the API and from the screen's
// page. Each used to act on whatever entry X had by then. Acting on the
// entry listed now goes through.
func TestAnActionOnAnEntryThatChangedIsRefused(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	e.startDispatcher(nil)
	x := e.seed(1, "acme", "order.create", dead.ReasonPermanent, "permanent", func(int) string { return `{"n":1,"reject":true}` })[0]
	e.waitListed(state.Dead, url.Values{"account": {"acme"}}, 1)
	alice := newScreenSession(t, e, "alice")
	code, page := alice.get("/ui/events/" + x)
	m := csrfField.FindStringSubmatch(page)
	seen := regexp.MustCompile(`name="entry" value="` + x + `:(\d+)"`).FindStringSubmatch(page)
	if code != http.StatusOK || m == nil || seen == nil {
		t.Fatalf("X's page: want its forms with a token and the entry shown, got %d", code)
	}
	listed, _ := strconv.ParseUint(seen[1], 10, 64)

	if st, body := e.post("/v1/dead/replay", ops.ReplayRequest{IDs: []string{x}, Reason: "bob's fix"}, nil); st != http.StatusOK {
		t.Fatalf("bob's replay: want 200, got %d %s", st, body)
	}
	var now uint64
	natstest.Eventually(t, time.Minute, func() bool {
		var l ops.ListReply
		if e.get("/v1/dead?account=acme", &l) != http.StatusOK || len(l.Items) != 1 {
			return false
		}
		now = l.Items[0].Seq
		return now > listed
	}, "X dead again in a newer entry than %d", listed)

	changed := func(what string, err error) {
		t.Helper()
		var oe *ops.Error
		if !errors.As(err, &oe) || oe.Status != http.StatusConflict || oe.Code != "entry_changed" {
			t.Fatalf("%s of the entry alice saw: want 409 entry_changed, got %v", what, err)
		}
	}
	seenBy := ops.Entries{x: listed}
	changed("API discard", e.call(ops.DeadDiscard, ops.DiscardRequest{IDs: []string{x}, Reason: "spam", Entries: seenBy}, nil))
	changed("API replay", e.call(ops.DeadReplay, ops.ReplayRequest{IDs: []string{x}, Entries: seenBy}, nil))
	changed("API resolve", e.call(ops.ReviewResolve, ops.ResolveRequest{ID: x, Outcome: ops.OutcomeDone, Entry: listed}, nil))
	var rep ops.ActionReply
	if err := e.call(ops.DeadDiscard, ops.DiscardRequest{IDs: []string{x, event.ID("acme", "nope")}, Reason: "spam", Entries: seenBy}, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Done != 0 || len(rep.Errors) == 0 || rep.Errors[0].ID != x || rep.Errors[0].Code != http.StatusConflict {
		t.Fatalf("a batch discard naming the entry alice saw: want X refused 409, got %+v", rep)
	}
	form := url.Values{"csrf": {m[1]}, "confirm": {"yes"}, "action": {"discard"}, "id": {x}, "entry": {x + ":" + seen[1]}, "reason": {"spam"}, "back": {"/ui/dead"}}
	if code, body := alice.post(form, "same-origin"); code != http.StatusConflict || !strings.Contains(body, "another DEAD entry") {
		t.Fatalf("the screen's discard of the entry alice saw: want 409 saying so, got %d", code)
	}
	if r := e.Record(x); r.Status != state.Dead {
		t.Fatalf("after the refused actions: want X still dead, got %s", r.Status)
	}

	form.Set("entry", fmt.Sprintf("%s:%d", x, now))
	if code, _ := alice.post(form, "same-origin"); code != http.StatusSeeOther {
		t.Fatalf("the screen's discard of the entry listed now: want it done (303), got %d", code)
	}
	if r := e.Record(x); r.Status != state.Cancelled {
		t.Fatalf("discarded: want X cancelled, got %s", r.Status)
	}
}
