package deadletter_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/dead"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/services/deadletter"
)

// errorOf reads a JSON error answer ({error: {code, message}}).
func errorOf(t *testing.T, what string, r servicetest.Response) ops.ErrorDetail {
	t.Helper()
	var b ops.ErrorBody
	if err := json.Unmarshal(r.Body, &b); err != nil || b.Error.Code == "" {
		t.Fatalf("%s: want an error body {error: {code, message}}, got %d %s", what, r.Status, r.Body)
	}
	return b.Error
}

// Times past the years UnixNano holds (1677-2262) are times all the same:
// since=1600-01-01 and until=9999-12-31 hold every entry, in the list
// (HTTP and NATS) and in a replay job's filter, as they do in /v1/events.
func TestDeadListFarTimes(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	id := e.seed(1, "acme", "order.create", dead.ReasonPermanent, "permanent", func(int) string { return `{"n":1}` })[0]
	e.waitListed(state.Dead, url.Values{}, 1)

	for _, q := range []string{
		"since=1600-01-01", "since=1677-09-20", "since=0001-01-01T00:00:00Z",
		"until=9999-12-31", "until=2262-04-12", "since=1600-01-01&until=9999-12-31",
	} {
		var rep ops.ListReply
		if st := e.get("/v1/dead?"+q, &rep); st != http.StatusOK || rep.Total != 1 || len(rep.Items) != 1 || rep.Items[0].ID != id {
			t.Errorf("GET /v1/dead?%s: want 200 with %s, got %d %+v", q, id, st, rep)
		}
	}
	for _, q := range []string{"since=9999-12-31", "until=1600-01-01"} {
		var rep ops.ListReply
		if st := e.get("/v1/dead?"+q, &rep); st != http.StatusOK || rep.Total != 0 {
			t.Errorf("GET /v1/dead?%s: want 200 and nothing, got %d %+v", q, st, rep)
		}
	}
	since, until := time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)
	var rep ops.ListReply
	if err := e.call(ops.DeadList, ops.ListRequest{Since: &since, Until: &until}, &rep); err != nil || rep.Total != 1 {
		t.Errorf("dead.list since 1600 until 9999: want the entry, got %+v %v", rep, err)
	}
	var job ops.ReplayReply
	if err := e.call(ops.DeadReplay, ops.ReplayRequest{Filter: &ops.ListRequest{Since: &since}, Reason: "r"}, &job); err != nil || job.JobID == "" {
		t.Fatalf("replay job since 1600: %+v %v", job, err)
	}
	var j ops.JobReply
	if err := e.call(ops.DeadJob, ops.JobRequest{JobID: job.JobID}, &j); err != nil || j.Total != 1 {
		t.Fatalf("replay job since 1600: want a total of 1 entry, got %+v %v", j, err)
	}
}

// /v1/dead and /v1/review judge since and until as /v1/events does: a
// range that holds no instant is 400 invalid_until with the same message,
// over HTTP and NATS alike; limit=0 stays 400 invalid_limit, as the three
// routes document (1..500).
func TestDeadListParamsAsSearch(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	e.seed(1, "acme", "order.create", dead.ReasonPermanent, "permanent", func(int) string { return `{"n":1}` })
	e.waitListed(state.Dead, url.Values{}, 1)
	send := func(path string) servicetest.Response {
		return servicetest.Send(t, e.Ctx(), http.DefaultClient, http.MethodGet, e.http.URL+path, "", "")
	}
	for _, q := range []string{
		"since=2026-03-02T00:00:00Z&until=2026-03-01T00:00:00Z", // after
		"since=2026-03-01T00:00:00Z&until=2026-03-01T00:00:00Z", // equal: empty
	} {
		ev := send("/v1/events?" + q)
		if ev.Status != http.StatusBadRequest {
			t.Fatalf("GET /v1/events?%s: want 400, got %d %s", q, ev.Status, ev.Body)
		}
		want := errorOf(t, "/v1/events", ev)
		for _, list := range []string{"/v1/dead", "/v1/review"} {
			r := send(list + "?" + q)
			if got := errorOf(t, list, r); r.Status != http.StatusBadRequest || got != want {
				t.Errorf("GET %s?%s: want 400 %+v as /v1/events answers, got %d %+v", list, q, want, r.Status, got)
			}
		}
	}
	since, until := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC), time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	var rep ops.ListReply
	var oe *ops.Error
	if err := e.call(ops.DeadList, ops.ListRequest{Since: &since, Until: &until}, &rep); !errors.As(err, &oe) || oe.Status != 400 || oe.Code != "invalid_until" {
		t.Errorf("dead.list since after until: want 400 invalid_until, got %+v %v", rep, err)
	}
	var job ops.ReplayReply
	if err := e.call(ops.DeadReplay, ops.ReplayRequest{Filter: &ops.ListRequest{Since: &since, Until: &until}, Reason: "r"}, &job); !errors.As(err, &oe) || oe.Code != "invalid_until" {
		t.Errorf("dead.replay with a filter since after until: want 400 invalid_until, got %+v %v", job, err)
	}
	for _, list := range []string{"/v1/dead", "/v1/review"} {
		r := send(list + "?limit=0")
		if got := errorOf(t, list, r); r.Status != http.StatusBadRequest || got.Code != "invalid_limit" {
			t.Errorf("GET %s?limit=0: want 400 invalid_limit, got %d %+v", list, r.Status, got)
		}
	}
}

// A refused submission is listed as seq_<n>, and that id is what show,
// replay and discard take, over HTTP and NATS: shown with its raw body,
// refused a replay (409 no_envelope: there is no event), and discarded.
func TestRefusedSubmissionByListedID(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	startIngest(t, e)
	submit(t, e, "acme", "no.such.kind", "k1", `{"x":1}`)
	e.waitListed(state.Dead, url.Values{"reason": {dead.ReasonRejected}}, 1)

	var list ops.ListReply
	if st := e.get("/v1/dead?reason="+dead.ReasonRejected, &list); st != http.StatusOK || len(list.Items) != 1 {
		t.Fatalf("GET /v1/dead: want the refused submission, got %d %+v", st, list)
	}
	it := list.Items[0]
	id := it.ID
	if id != fmt.Sprintf("seq_%d", it.Seq) {
		t.Fatalf("GET /v1/dead: want the refused submission's id seq_%d, got %q", it.Seq, id)
	}
	var nlist ops.ListReply
	if err := e.call(ops.DeadList, ops.ListRequest{Reason: dead.ReasonRejected}, &nlist); err != nil || len(nlist.Items) != 1 || nlist.Items[0].ID != id {
		t.Fatalf("dead.list: want the id HTTP lists, %s, got %+v %v", id, nlist, err)
	}

	var show ops.ShowReply
	if st := e.get("/v1/dead/"+id, &show); st != http.StatusOK || show.Item.ID != id || string(show.Raw) != `{"x":1}` {
		t.Fatalf("GET /v1/dead/%s: want it with its raw body, got %d %+v", id, st, show)
	}
	show = ops.ShowReply{}
	if err := e.call(ops.DeadShow, ops.ShowRequest{ID: id}, &show); err != nil || show.Item.ID != id || string(show.Raw) != `{"x":1}` {
		t.Fatalf("dead.show %s: want it with its raw body, got %+v %v", id, show, err)
	}
	if st, body := e.post("/v1/dead/"+id+"/replay", map[string]string{"reason": "r"}, nil); st != http.StatusConflict {
		t.Fatalf("POST /v1/dead/%s/replay: want 409 (no event to replay), got %d %s", id, st, body)
	}
	if st, body := e.post("/v1/dead/replay", ops.ReplayRequest{IDs: []string{id}, Reason: "r"}, nil); st != http.StatusConflict {
		t.Fatalf("POST /v1/dead/replay {ids: [%s]}: want 409, got %d %s", id, st, body)
	}

	var act ops.ActionReply
	if st, body := e.post("/v1/dead/discard", ops.DiscardRequest{IDs: []string{id}, Reason: "test traffic"}, &act); st != http.StatusOK || act.Done != 1 {
		t.Fatalf("POST /v1/dead/discard {ids: [%s]}: want 1 done, got %d %s", id, st, body)
	}
	e.waitListed(state.Dead, url.Values{}, 0)
	if st := e.get("/v1/dead/"+id, nil); st != http.StatusNotFound {
		t.Fatalf("GET /v1/dead/%s after the discard: want 404, got %d", id, st)
	}
	if st := e.get("/v1/dead/seq:1", nil); st != http.StatusBadRequest {
		t.Fatalf("GET /v1/dead/seq:1: want 400 (not an id), got %d", st)
	}
}

// A dead event whose stored record does not decode (put by hand, or by
// another version) is listed from its DEAD entry's copy, its error saying
// why, and can be replayed: its record is made again from that copy.
// Before, the entry was handed back every second for ever, listed
// nowhere, holding one of the feed's slots.
func TestDeadEntryListedWhenItsRecordDoesNotDecode(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	if err := e.dl.Stop(servicetest.Context(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	ids := e.seed(2, "acme", "order.create", dead.ReasonPermanent, "permanent", func(i int) string { return fmt.Sprintf(`{"n":%d}`, i) })
	kv, err := e.JS.KeyValue(e.Ctx(), e.St.Bucket("acme", ids[0]))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(e.Ctx(), ids[0], []byte(`{"id": "`+ids[0]+`", "status": 17`)); err != nil {
		t.Fatal(err)
	}
	e.startDeadletterWith(deadletter.Options{Instance: "next"})
	e.waitListed(state.Dead, url.Values{"account": {"acme"}}, 2)
	var list ops.ListReply
	if err := e.call(ops.DeadList, ops.ListRequest{Account: "acme", Limit: 10}, &list); err != nil || len(list.Items) != 2 {
		t.Fatalf("list: want 2 items, got %v %+v", err, list)
	}
	for _, it := range list.Items {
		if it.ID == ids[0] && (it.Reason != dead.ReasonPermanent || !strings.Contains(it.Error, "does not decode") || it.Attempts != 1) {
			t.Fatalf("want %s listed from its entry, saying its record does not decode, got %+v", ids[0], it)
		}
	}
	e.startDispatcher(nil)
	var rep ops.ReplayReply
	if err := e.call(ops.DeadReplay, ops.ReplayRequest{IDs: []string{ids[0]}, Reason: "record put right"}, &rep); err != nil || rep.Replayed != 1 {
		t.Fatalf("replay: want 1 replayed, got %v %+v", err, rep)
	}
	rec := e.WaitStatus(ids[0], state.Done, 30*time.Second)
	if rec.Attempts != 1 || !slices.ContainsFunc(rec.History, func(h state.Entry) bool {
		return h.Action == state.Replay && strings.Contains(h.Detail, "made again from its DEAD entry")
	}) {
		t.Fatalf("want the replay from the entry's copy in the history, then done, got %+v", rec.History)
	}
}

// A replica that died between an action's transition and the purge of
// the event's item left the event listed where it no longer is. The
// replica that starts next removes such items: one whose record was
// replayed (pending now) and one whose record is gone; a dead event
// stays listed.
func TestListedEventNoLongerDeadRemovedAtStart(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	ids := e.seed(3, "acme", "order.create", dead.ReasonPermanent, "permanent", func(i int) string { return fmt.Sprintf(`{"n":%d}`, i) })
	e.waitListed(state.Dead, url.Values{"account": {"acme"}}, 3)
	if err := e.dl.Stop(servicetest.Context(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	rec, rev, err := e.St.Get(e.Ctx(), "acme", ids[0])
	if err != nil {
		t.Fatal(err)
	}
	next, _, err := state.Apply(rec, state.Action{Name: state.Replay, Actor: "operator:alice", Detail: "erp fixed"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.St.Write(e.Ctx(), next, rev); err != nil {
		t.Fatal(err)
	}
	kv, err := e.JS.KeyValue(e.Ctx(), e.St.Bucket("acme", ids[1]))
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Purge(e.Ctx(), ids[1]); err != nil {
		t.Fatal(err)
	}

	e.startDeadletterWith(deadletter.Options{Instance: "next"})
	e.waitListed(state.Dead, url.Values{"account": {"acme"}}, 1)
	var list ops.ListReply
	if err := e.call(ops.DeadList, ops.ListRequest{Account: "acme", Limit: 10}, &list); err != nil || len(list.Items) != 1 || list.Items[0].ID != ids[2] {
		t.Fatalf("want only %s listed, got %v %+v", ids[2], err, list)
	}
}

// A replay whose EVENTS message the server refuses leaves the event
// pending with nothing on its way to deliver it, as a replica killed
// between the replay's transition and its message does. The event stays
// listed, and the replica that starts next finishes the replay: the
// event is delivered once and leaves the list. Before, the item went
// with the transition, and the event waited for the reconciler (none
// runs here).
func TestReplayCutShortIsFinishedByTheNextReplica(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	ids := e.seed(1, "acme", "order.create", dead.ReasonExhausted, "transient", func(int) string { return `{"order_id":"o-1"}` })
	acme := url.Values{"account": {"acme"}}
	e.waitListed(state.Dead, acme, 1)

	// EVENTS refuses every message, for its size.
	stream, err := e.JS.Stream(e.Ctx(), e.Subj.EventsStream("acme"))
	if err != nil {
		t.Fatal(err)
	}
	was := stream.CachedInfo().Config
	refusing := was
	refusing.MaxMsgSize = 1
	if _, err := e.JS.UpdateStream(e.Ctx(), refusing); err != nil {
		t.Fatal(err)
	}
	var rep ops.ReplayReply
	err = e.call(ops.DeadReplay, ops.ReplayRequest{IDs: ids, Reason: "erp fixed"}, &rep)
	if err == nil && len(rep.Errors) == 0 || !strings.Contains(fmt.Sprint(err, rep.Errors), "could not be published") {
		t.Fatalf("replay: want the refused message reported, got %+v, %v", rep, err)
	}
	if r := e.Record(ids[0]); !unfinished(r) {
		t.Fatalf("want the event pending, replayed, got %s (%s)", r.Status, servicetest.Actions(r))
	}
	if got := e.listed(state.Dead, acme); got != 1 {
		t.Fatalf("want the event whose replay was cut short still listed, got %d listed", got)
	}

	if _, err := e.JS.UpdateStream(e.Ctx(), was); err != nil {
		t.Fatal(err)
	}
	if err := e.dl.Stop(servicetest.Context(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	e.startDispatcher(nil)
	e.startDeadletterWith(deadletter.Options{Instance: "next"})
	natstest.Eventually(t, 30*time.Second, func() bool { return e.Record(ids[0]).Status == state.Done },
		"the event to be delivered (%s)", natstest.Lazy(func() any { return servicetest.Actions(e.Record(ids[0])) }))
	if e.p.Applied() != 1 || len(e.p.DuplicateEffects()) > 0 {
		t.Fatalf("want the event applied once, got %d, duplicated %v", e.p.Applied(), e.p.DuplicateEffects())
	}
	e.waitListed(state.Dead, acme, 0)
	if n := e.DeadKept("acme"); n != 0 {
		t.Fatalf("want its DEAD entry gone, %d left", n)
	}
}

// unfinished reports whether r waits as a replay left it.
func unfinished(r state.Record) bool {
	return r.Status == state.Pending && len(r.History) > 0 && r.History[len(r.History)-1].Action == state.Replay
}

// A reason or class filter no entry can have is refused with 400, naming
// the parameter and the values it takes, on the lists, over NATS and for
// a replay job: a misspelt one matched nothing and read as "nothing is
// dead" (a job by it finished with 0 replayed). A known class with no
// entry now lists none, and a class only an entry listed now has (one
// written by a newer part) filters as any other.
func TestListRefusesAnUnknownReasonOrClass(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	e.seed(1, "acme", "order.create", dead.ReasonPermanent, "bespoke_class", func(int) string { return `{"n":1}` })
	e.waitListed(state.Dead, url.Values{"account": {"acme"}}, 1)
	send := func(path string) servicetest.Response {
		return servicetest.Send(t, e.Ctx(), http.DefaultClient, http.MethodGet, e.http.URL+path, "", "")
	}
	for _, c := range []struct{ path, code, names string }{
		{"/v1/dead?reason=permanant", "invalid_reason", dead.ReasonPermanent},
		{"/v1/review?reason=permanant", "invalid_reason", dead.ReasonReview},
		{"/v1/dead?class=transiet", "invalid_class", "transient"},
		{"/v1/dead?account=acme&class=bespoke", "invalid_class", "bespoke_class"},
	} {
		r := send(c.path)
		if got := errorOf(t, c.path, r); r.Status != http.StatusBadRequest || got.Code != c.code || !strings.Contains(got.Message, c.names) {
			t.Errorf("GET %s: want 400 %s listing %s, got %d %+v", c.path, c.code, c.names, r.Status, got)
		}
	}
	for path, n := range map[string]int{"/v1/dead?class=timeout": 0, "/v1/dead?class=bespoke_class": 1, "/v1/dead?reason=terminated": 0} {
		var list ops.ListReply
		if st := e.get(path, &list); st != http.StatusOK || list.Total != n {
			t.Errorf("GET %s: want 200 with %d, got %d %+v", path, n, st, list)
		}
	}
	var oe *ops.Error
	err := e.call(ops.DeadList, ops.ListRequest{Class: "transiet"}, nil)
	if !errors.As(err, &oe) || oe.Status != http.StatusBadRequest || oe.Code != "invalid_class" {
		t.Errorf("dead.list with a misspelt class: want 400 invalid_class, got %v", err)
	}
	err = e.call(ops.DeadReplay, ops.ReplayRequest{Filter: &ops.ListRequest{Reason: "permanant"}, Reason: "erp fixed"}, nil)
	if !errors.As(err, &oe) || oe.Status != http.StatusBadRequest || oe.Code != "invalid_reason" {
		t.Errorf("a replay job with a misspelt reason: want 400 invalid_reason, got %v", err)
	}
}
