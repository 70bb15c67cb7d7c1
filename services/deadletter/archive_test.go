package deadletter_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/audit"
	"github.com/tenaz/tenaz/pkg/httpapi/apitest"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/search"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/store"
)

// getWith does a GET with "Authorization: Bearer <key>" (alice's Basic
// when key is "") and returns the status and body.
func (e *env) getWith(key, path string) (int, string) {
	e.t.Helper()
	r := servicetest.Send(e.t, e.Ctx(), http.DefaultClient, http.MethodGet, e.http.URL+path, key, "")
	return r.Status, string(r.Body)
}

// timeline reads an entity's timeline as alice.
func (e *env) timeline(account, entity string) (ops.TimelineReply, int) {
	e.t.Helper()
	var rep ops.TimelineReply
	st := e.get("/v1/entities/"+account+"/"+url.PathEscape(entity)+"/timeline", &rep)
	return rep, st
}

// exported reads an export as alice and decodes its lines.
func (e *env) exported(q url.Values) []ops.AuditEntry {
	e.t.Helper()
	st, body := e.getWith("", "/v1/audit/export?"+q.Encode())
	if st != http.StatusOK {
		e.t.Fatalf("export %v: want 200, got %d %s", q, st, body)
	}
	var out []ops.AuditEntry
	for _, line := range strings.Split(strings.TrimSpace(body), "\n") {
		if line == "" {
			continue
		}
		var a ops.AuditEntry
		if err := json.Unmarshal([]byte(line), &a); err != nil || a.Action == "" {
			e.t.Fatalf("export line %q: %v", line, err)
		}
		out = append(out, a)
	}
	return out
}

func indexOf(items []ops.AuditEntry, f func(ops.AuditEntry) bool) int {
	return slices.IndexFunc(items, f)
}

// "What happened to proposal-42", once streams.retention has expired its
// records: its two events (one that went from the primary bureau to the
// fallback, one that died and an operator replayed) and the pause and
// resume of the account in between, in order, from the timeline and the
// export; another entity's event is in neither timeline.
func TestEntityTimelineOutlivesTheRecords(t *testing.T) {
	t.Parallel()
	e := setup(t, "streams: {retention: 2s}")
	e.p.SetFaults(provider.Faults{FailFirst: 1})
	startIngest(t, e)
	e.startDispatcher(nil)
	start := time.Now().UTC().Add(-time.Second)
	credit := submit(t, e, "acme", "credit.evaluate", "p42-credit", `{"applicant":"A-1"}`, names.HeaderEntityID, "proposal-42")
	order := submit(t, e, "acme", "order.create", "p42-order", `{"n":1}`, names.HeaderEntityID, "proposal-42")
	other := submit(t, e, "acme", "credit.evaluate", "p43-credit", `{"applicant":"A-2"}`, names.HeaderEntityID, "proposal-43")
	e.waitDone(credit, other)
	natstest.Eventually(t, 60*time.Second, func() bool {
		r, _, err := e.St.Get(context.Background(), "", order)
		return err == nil && r.Status == state.Dead
	}, "the order to die of its 503 (one attempt)")
	e.waitListed(state.Dead, url.Values{"account": {"acme"}}, 1)

	for _, a := range []struct{ path, reason string }{{"/v1/accounts/acme/pause", "bureau maintenance"}, {"/v1/accounts/acme/resume", "bureau is back"}} {
		if st, body := e.post(a.path, map[string]string{"reason": a.reason}, nil); st != http.StatusOK {
			t.Fatalf("POST %s: %d %s", a.path, st, body)
		}
	}
	if st, body := e.post("/v1/dead/"+order+"/replay", map[string]string{"reason": "erp fixed"}, nil); st != http.StatusOK {
		t.Fatalf("replay: %d %s", st, body)
	}
	e.waitDone(order)
	for _, id := range []string{credit, order, other} {
		natstest.Eventually(t, 60*time.Second, func() bool {
			_, _, err := e.St.Get(context.Background(), "", id)
			return errors.Is(err, store.ErrNotFound)
		}, "the record of %s to expire (streams.retention 2s): %+v", id, func() any { r, _, _ := e.St.Get(context.Background(), "", id); return r }())
	}

	var rep ops.TimelineReply
	natstest.Eventually(t, 30*time.Second, func() bool {
		var st int
		rep, st = e.timeline("acme", "proposal-42")
		return st == http.StatusOK && indexOf(rep.Items, func(a ops.AuditEntry) bool { return a.EventID == order && a.Action == string(state.Succeed) }) >= 0
	}, "the timeline to hold the replayed order's success")
	if len(rep.Events) != 2 || rep.Events[0].Live || rep.Events[1].Live {
		t.Fatalf("events: want the credit and the order, both expired, got %+v", rep.Events)
	}
	for _, ev := range rep.Events {
		if ev.Status != state.Done || ev.ID != credit && ev.ID != order {
			t.Fatalf("event %+v: want one of %s %s, done", ev, credit, order)
		}
	}
	at := func(what string, f func(ops.AuditEntry) bool) int {
		t.Helper()
		i := indexOf(rep.Items, f)
		if i < 0 {
			t.Fatalf("timeline: no %s in %+v", what, rep.Items)
		}
		return i
	}
	primary := at("primary claim of the credit", func(a ops.AuditEntry) bool {
		return a.EventID == credit && a.Action == string(state.Claim) && a.Stage == state.StagePrimary
	})
	fallback := at("fallback of the credit", func(a ops.AuditEntry) bool { return a.EventID == credit && a.Action == string(state.Fallback) })
	secondary := at("fallback claim of the credit", func(a ops.AuditEntry) bool {
		return a.EventID == credit && a.Action == string(state.Claim) && a.Stage == state.StageFallback
	})
	creditDone := at("the credit's success", func(a ops.AuditEntry) bool { return a.EventID == credit && a.Action == string(state.Succeed) })
	died := at("the order's failure", func(a ops.AuditEntry) bool { return a.EventID == order && a.Action == string(state.Fail) })
	pause := at("the pause", func(a ops.AuditEntry) bool {
		return a.Action == ops.ActionPause && a.Actor == "operator:alice" && a.Reason == "bureau maintenance"
	})
	resume := at("the resume", func(a ops.AuditEntry) bool { return a.Action == ops.ActionResume })
	replay := at("the replay", func(a ops.AuditEntry) bool {
		return a.EventID == order && a.Action == string(state.Replay) && a.Actor == "operator:alice" && a.Detail == "erp fixed"
	})
	orderDone := at("the order's success", func(a ops.AuditEntry) bool { return a.EventID == order && a.Action == string(state.Succeed) })
	if !(primary < fallback && fallback < secondary && secondary < creditDone && died < pause && creditDone < pause && pause < resume && resume < replay && replay < orderDone) {
		t.Fatalf("timeline out of order: primary %d fallback %d secondary %d done %d died %d pause %d resume %d replay %d done %d in %+v",
			primary, fallback, secondary, creditDone, died, pause, resume, replay, orderDone, rep.Items)
	}
	if i := indexOf(rep.Items, func(a ops.AuditEntry) bool { return a.EventID == other }); i >= 0 {
		t.Fatalf("timeline of proposal-42 holds proposal-43's event: %+v", rep.Items[i])
	}
	for i := 1; i < len(rep.Items); i++ {
		if p, c := rep.Items[i-1], rep.Items[i]; c.EventID != "" && p.EventID == c.EventID && p.Step >= c.Step {
			t.Fatalf("timeline: %s's step %d after step %d (an entry twice, or out of order)", c.EventID, c.Step, p.Step)
		}
	}

	lines := e.exported(url.Values{"since": {start.Format(time.RFC3339)}, "account": {"acme"}})
	for _, want := range []struct {
		what string
		f    func(ops.AuditEntry) bool
	}{
		{"the credit's fallback", func(a ops.AuditEntry) bool { return a.EventID == credit && a.Action == string(state.Fallback) }},
		{"the replay", func(a ops.AuditEntry) bool {
			return a.EventID == order && a.Action == string(state.Replay) && a.Actor == "operator:alice"
		}},
		{"the pause", func(a ops.AuditEntry) bool { return a.Action == ops.ActionPause && a.Reason == "bureau maintenance" }},
		{"proposal-43's event", func(a ops.AuditEntry) bool { return a.EventID == other && a.EntityID == "proposal-43" }},
	} {
		if indexOf(lines, want.f) < 0 {
			t.Fatalf("export: no %s in %d lines", want.what, len(lines))
		}
	}
	byEvent := e.exported(url.Values{"event": {order}})
	if len(byEvent) == 0 || slices.ContainsFunc(byEvent, func(a ops.AuditEntry) bool { return a.EventID != order }) {
		t.Fatalf("export by event: want only %s's entries, got %+v", order, byEvent)
	}
	if st, body := e.getWith("", "/v1/audit/export?since=yesterday"); st != http.StatusBadRequest || !strings.Contains(body, "invalid_since") {
		t.Fatalf("a bad since: want 400 invalid_since, got %d %s", st, body)
	}
	if st, body := e.getWith("", "/v1/audit/export"); st != http.StatusBadRequest || !strings.Contains(body, "since_required") {
		t.Fatalf("no since: want 400 since_required, got %d %s", st, body)
	}
}

// An API key with the read scope reads its own account's timeline and
// export, over HTTP and NATS, and none of another account's, though both
// accounts have an entity of the same id; a key without the read scope
// reads none.
func TestTimelineKeepsAccountsApart(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	startIngest(t, e)
	e.startDispatcher(nil)
	start := time.Now().UTC().Add(-time.Second)
	acme := submit(t, e, "acme", "credit.evaluate", "acme-e1", `{"applicant":"A"}`, names.HeaderEntityID, "E-1")
	globex := submit(t, e, "globex", "credit.evaluate", "globex-e1", `{"applicant":"G"}`, names.HeaderEntityID, "E-1")
	e.waitDone(acme, globex)
	const path = "/v1/entities/%s/E-1/timeline"
	read := func(key, account string) (int, ops.TimelineReply) {
		var rep ops.TimelineReply
		var st int
		natstest.Eventually(t, 30*time.Second, func() bool {
			var body string
			st, body = e.getWith(key, strings.Replace(path, "%s", account, 1))
			rep = ops.TimelineReply{}
			if st == http.StatusOK {
				if err := json.Unmarshal([]byte(body), &rep); err != nil {
					t.Fatalf("timeline: %v in %s", err, body)
				}
			}
			return st != http.StatusNotFound && (st != http.StatusOK || slices.ContainsFunc(rep.Items, func(a ops.AuditEntry) bool { return a.Action == string(state.Succeed) }))
		}, "%s's timeline archived", account)
		return st, rep
	}
	for _, c := range []struct {
		key, account, want string
	}{{acmeReadKey, "acme", acme}, {globexReadKey, "globex", globex}} {
		st, rep := read(c.key, c.account)
		if st != http.StatusOK || len(rep.Events) != 1 || rep.Events[0].ID != c.want {
			t.Fatalf("%s's key on its own entity: want 200 with %s only, got %d %+v", c.account, c.want, st, rep.Events)
		}
	}
	for _, c := range []struct{ key, account string }{{acmeReadKey, "globex"}, {globexReadKey, "acme"}, {acmeSubmitKey, "acme"}} {
		if st, body := e.getWith(c.key, strings.Replace(path, "%s", c.account, 1)); st != http.StatusForbidden {
			t.Fatalf("a key on %s's timeline that it may not read: want 403, got %d %s", c.account, st, body)
		}
	}
	var rep ops.TimelineReply
	err := e.callWith(acmeReadKey, ops.EntitiesTimeline, ops.TimelineRequest{Account: "globex", EntityID: "E-1"}, &rep)
	var oe *ops.Error
	if !errors.As(err, &oe) || oe.Status != http.StatusForbidden {
		t.Fatalf("NATS: acme's key on globex's timeline: want 403, got %v %+v", err, rep)
	}
	if err := e.callWith(acmeReadKey, ops.EntitiesTimeline, ops.TimelineRequest{Account: "acme", EntityID: "E-1"}, &rep); err != nil || len(rep.Events) != 1 || rep.Events[0].ID != acme {
		t.Fatalf("NATS: acme's key on its own timeline: want %s, got %v %+v", acme, err, rep)
	}

	since := url.QueryEscape(start.Format(time.RFC3339))
	st, body := e.getWith(acmeReadKey, "/v1/audit/export?since="+since)
	if st != http.StatusOK || !strings.Contains(body, acme) || strings.Contains(body, globex) || strings.Contains(body, `"account":"globex"`) {
		t.Fatalf("acme's key exports: want acme's entries only, got %d %s", st, body)
	}
	if st, body := e.getWith(acmeReadKey, "/v1/audit/export?account=globex&since="+since); st != http.StatusForbidden {
		t.Fatalf("acme's key exporting globex: want 403, got %d %s", st, body)
	}
	if st, body := e.getWith(acmeReadKey, "/v1/audit/export?event="+globex); st != http.StatusOK || strings.Contains(body, globex) {
		t.Fatalf("acme's key exporting globex's event: want nothing of it, got %d %s", st, body)
	}
	if st, body := e.getWith(globexReadKey, "/v1/audit/export?event="+globex); st != http.StatusOK || !strings.Contains(body, globex) {
		t.Fatalf("globex's key exporting its event: want its entries, got %d %s", st, body)
	}
}

// The timeline and the export answer what the OpenAPI document says, to
// an operator and to API keys.
func TestOpenAPIContractAudit(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	c, want := e.contract(t)
	alice := operatorKeys["alice"]
	startIngest(t, e)
	e.startDispatcher(nil)
	id := submit(t, e, "acme", "credit.evaluate", "contract-e9", `{"applicant":"A"}`, names.HeaderEntityID, "E-9")
	e.waitDone(id)
	natstest.Eventually(t, 30*time.Second, func() bool { _, st := e.timeline("acme", "E-9"); return st == http.StatusOK }, "E-9 archived")
	const tl = "/v1/entities/acme/E-9/timeline"
	want(200, "GET", tl, alice, "", "an operator")
	want(200, "GET", tl, acmeReadKey, "", "the account's read key")
	want(400, "GET", "/v1/entities/ac.me/E-9/timeline", alice, "", "a bad account")
	want(401, "GET", tl, "", "", "no credential")
	want(403, "GET", tl, globexReadKey, "", "another account's key")
	want(403, "GET", tl, acmeSubmitKey, "", "a key without the read scope")
	want(404, "GET", "/v1/entities/acme/E-10/timeline", alice, "", "an entity with no event")
	const ex = "/v1/audit/export?since=2026-01-01"
	want(200, "GET", ex, alice, "", "an operator")
	want(200, "GET", ex+"&until=2099-01-01&account=acme", acmeReadKey, "", "the account's read key")
	want(200, "GET", "/v1/audit/export?event="+id, alice, "", "one event")
	want(400, "GET", "/v1/audit/export", alice, "", "no since")
	want(400, "GET", "/v1/audit/export?since=2026-13-01", alice, "", "a bad since")
	want(401, "GET", ex, "", "", "no credential")
	want(403, "GET", ex+"&account=acme", globexReadKey, "", "another account's key")

	servicetest.Stop(t, e.dl)
	want(503, "GET", tl, alice, "", "the service stopped")
	want(503, "GET", ex, alice, "", "the service stopped")
	internal := "an unexpected stream error: no request brings one about"
	c.Covered(t, apitest.Under("/v1/entities", "/v1/audit"), map[string]string{
		"GET /v1/entities/{account}/{entity}/timeline 500": internal, "GET /v1/audit/export 500": internal})
}

// The archive is rebuilt from the records without an entry twice: the
// archiver's consumers deleted, a new replica (which remembers nothing)
// reads every record again, finds each already archived (the server
// refuses a write that does not follow the event's last one) and adds
// nothing; the timeline is the same.
func TestArchiveRebuildAddsNothingTwice(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	e.p.SetFaults(provider.Faults{FailFirst: 1})
	startIngest(t, e)
	e.startDispatcher(nil)
	ids := []string{
		submit(t, e, "acme", "credit.evaluate", "r1-a", `{"applicant":"A"}`, names.HeaderEntityID, "R-1"),
		submit(t, e, "acme", "credit.evaluate", "r1-b", `{"applicant":"B"}`, names.HeaderEntityID, "R-1"),
		submit(t, e, "globex", "credit.evaluate", "r-none", `{"applicant":"C"}`, names.HeaderEntityID, ""),
	}
	e.waitDone(ids...)
	var before ops.TimelineReply
	natstest.Eventually(t, 30*time.Second, func() bool {
		var st int
		before, st = e.timeline("acme", "R-1")
		n := 0
		for _, a := range before.Items {
			if a.Action == string(state.Succeed) {
				n++
			}
		}
		return st == http.StatusOK && n == 2
	}, "R-1's two events archived")
	c := servicetest.Context(t, 2*time.Minute)
	caughtUp := func() bool {
		for p := range e.Subj.Parts() {
			cons, err := e.JS.Consumer(c, "KV_"+e.Subj.StateBucketOf(p), search.FeedConsumer)
			if err != nil {
				return false
			}
			ci, err := cons.Info(c)
			if err != nil || ci.NumPending > 0 || ci.NumAckPending > 0 {
				return false
			}
		}
		return true
	}
	natstest.Eventually(t, 30*time.Second, caughtUp, "the archiver to have read every revision")
	audit, err := e.JS.Stream(c, "TENAZ_AUDIT")
	if err != nil {
		t.Fatal(err)
	}
	info, err := audit.Info(c)
	if err != nil {
		t.Fatal(err)
	}
	msgs := info.State.Msgs
	if byEvent := e.exported(url.Values{"event": {ids[2]}}); len(byEvent) < 3 || byEvent[0].EntityID != "" || byEvent[0].Account != "globex" {
		t.Fatalf("an event without an entity, by its id: want its steps, got %+v", byEvent)
	}

	if err := e.dl.Stop(c); err != nil {
		t.Fatal(err)
	}
	for p := range e.Subj.Parts() {
		if err := e.JS.DeleteConsumer(c, "KV_"+e.Subj.StateBucketOf(p), search.FeedConsumer); err != nil {
			t.Fatal(err)
		}
	}
	e.startDeadletter("rebuilt")
	natstest.Eventually(t, 30*time.Second, caughtUp, "the new replica to have read every record again")
	if info, err = audit.Info(c); err != nil || info.State.Msgs != msgs {
		t.Fatalf("rebuild: the archive had %d messages, has %d (%v): an entry written twice", msgs, info.State.Msgs, err)
	}
	var after ops.TimelineReply
	if err := e.call(ops.EntitiesTimeline, ops.TimelineRequest{Account: "acme", EntityID: "R-1"}, &after); err != nil {
		t.Fatal(err)
	}
	if len(after.Items) != len(before.Items) || len(after.Events) != 2 {
		t.Fatalf("rebuild: the timeline had %d entries, has %d", len(before.Items), len(after.Items))
	}
}

// An export longer than a flush (1,000 lines) streams every line, in
// order: here an event whose archived history holds 2,500 steps.
func TestExportStreamsEveryLine(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	at := time.Now().UTC().Add(-time.Minute)
	const n = 2500
	for i := range 5 { // five revisions of 500 steps each
		r := audit.Revision{ID: "ev_long", Account: "acme", Kind: "credit.evaluate", EntityID: "L-1", Status: state.Polling, Step: (i + 1) * 500}
		for j := range 500 {
			r.Entries = append(r.Entries, state.Entry{At: at.Add(time.Duration(i*500+j) * time.Millisecond), Action: state.Repoll, To: state.Polling})
		}
		b, _ := json.Marshal(r)
		if _, err := e.JS.Publish(servicetest.Context(t, 2*time.Minute), audit.Subject("tenaz", "acme", "L-1", "ev_long"), b); err != nil {
			t.Fatal(err)
		}
	}
	lines := e.exported(url.Values{"since": {at.Add(-time.Second).Format(time.RFC3339Nano)}, "account": {"acme"}})
	if len(lines) != n {
		t.Fatalf("export: want %d lines, got %d", n, len(lines))
	}
	for i, l := range lines {
		if l.Step != i+1 || l.EventID != "ev_long" {
			t.Fatalf("line %d: want step %d of ev_long, got %+v", i, i+1, l)
		}
	}
}
