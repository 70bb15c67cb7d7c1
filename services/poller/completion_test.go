package poller_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/dead"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/queue"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/services/dispatcher"
	"github.com/tenaz/tenaz/services/ingest"
)

// A callback sent three times (same webhook-id, concurrently) completes
// the event once; the copies are recorded and change nothing.
func TestCallbackAppliedOnceWhenSentThreeTimes(t *testing.T) {
	w := newWorld(t, "attempts: 3, callback_sla: 1m", worldOpts{})
	id := w.submit("c-1", `{"applicant":"a-1"}`)
	rec := w.WaitStatus(id, state.AwaitingCallback, 10*time.Second)
	if rec.Reference == "" || rec.Deadline == nil {
		t.Fatalf("awaiting_callback: want the provider's reference and a deadline, got %+v", rec)
	}
	body := `{"event_id":"` + id + `","reference":"` + rec.Reference + `","status":"approved","score":712}`
	now := time.Now()
	var wg sync.WaitGroup
	outcomes := make([]string, 3)
	for i := range 3 {
		wg.Go(func() {
			code, rep := w.callback("bureau_a", cbSecret, "msg_1", now, body)
			if code != http.StatusOK {
				t.Errorf("callback copy %d: want 200, got %d", i, code)
			}
			outcomes[i] = rep.Outcome
		})
	}
	wg.Wait()
	applied := 0
	for _, o := range outcomes {
		if o == ingest.CallbackApplied {
			applied++
		} else if o != ingest.CallbackDuplicate && o != ingest.CallbackLate {
			t.Errorf("copy outcome: want applied, duplicate or late, got %q", o)
		}
	}
	if applied != 1 {
		t.Fatalf("want exactly one copy applied, got outcomes %v", outcomes)
	}
	rec = w.Record(id)
	// The two copies are one no-op: recorded once (a copy of a recorded
	// webhook writes nothing).
	if rec.Status != state.Done || count(rec, state.Complete) != 1 || notes(rec, "callback") != 1 {
		t.Fatalf("want done with 1 complete and the copies recorded once, got %s %v", rec.Status, actions(rec))
	}
	var res struct{ Score int }
	if err := json.Unmarshal(rec.Result, &res); err != nil || res.Score != 712 {
		t.Errorf("result: want the callback body (score 712), got %s", rec.Result)
	}
	// A fourth copy, later, is still a recorded no-op.
	if _, rep := w.callback("bureau_a", cbSecret, "msg_1", time.Now(), body); rep.Outcome != ingest.CallbackDuplicate {
		t.Errorf("a later copy: want duplicate, got %q", rep.Outcome)
	}
	if n := w.a.Effects(id); n != 1 {
		t.Errorf("bureau A effects: want 1, got %d", n)
	}
	w.wantMetric("tenaz_callbacks_total", map[string]string{"target": "bureau_a", "result": "applied"}, 1)
	w.wantMetric("tenaz_callbacks_total", map[string]string{"target": "bureau_a", "result": "noop"}, 3)
}

// The provider's own signed callbacks, each sent twice, complete the
// event once; and a callback that names only the provider's reference
// finds its event through the reference index.
func TestProviderCallbacksDuplicatedAndByReference(t *testing.T) {
	w := newWorld(t, "attempts: 3, callback_sla: 1m", worldOpts{callbacks: &provider.CallbackFaults{DuplicateRate: 1}})
	id := w.submit("c-2", `{"applicant":"a-2"}`)
	w.WaitStatus(id, state.Done, 10*time.Second)
	if err := w.a.WaitCallbacks(w.Ctx(), 2); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 5*time.Second, func() bool { return notes(w.Record(id), "duplicate callback") == 1 }, "the duplicate to be recorded")
	rec := w.Record(id)
	if count(rec, state.Complete) != 1 {
		t.Errorf("want one complete, got %v", actions(rec))
	}

	w.a.SetCallbackFaults(provider.CallbackFaults{DropRate: 1})
	id = w.submit("c-2b", `{"applicant":"a-2b"}`)
	rec = w.WaitStatus(id, state.AwaitingCallback, 10*time.Second)
	code, rep := w.callback("bureau_a", cbSecret, "msg_ref", time.Now(), `{"reference":"`+rec.Reference+`","status":"approved"}`)
	if code != http.StatusOK || rep.Outcome != ingest.CallbackApplied || rep.ID != id {
		t.Fatalf("callback by reference: want applied to %s, got %d %+v", id, code, rep)
	}
	code, rep = w.callback("bureau_a", cbSecret, "msg_unknown", time.Now(), `{"reference":"ref_nosuch","status":"approved"}`)
	if code != http.StatusOK || rep.Outcome != ingest.CallbackUnknown {
		t.Errorf("callback for an unknown reference: want 200 unknown_event, got %d %+v", code, rep)
	}
}

// Forged webhooks are refused with 401 and change nothing: wrong secret,
// tampered body, a timestamp outside the tolerance, no signature.
func TestForgedCallbackRefused(t *testing.T) {
	w := newWorld(t, "attempts: 3, callback_sla: 1m", worldOpts{})
	id := w.submit("c-3", `{"applicant":"a-3"}`)
	rec := w.WaitStatus(id, state.AwaitingCallback, 10*time.Second)
	body := `{"event_id":"` + id + `","status":"approved"}`
	cases := map[string]func() int{
		"wrong secret": func() int {
			c, _ := w.callback("bureau_a", "whsec_"+strings.Repeat("QQ", 16), "msg_f1", time.Now(), body)
			return c
		},
		"old timestamp": func() int {
			c, _ := w.callback("bureau_a", cbSecret, "msg_f2", time.Now().Add(-10*time.Minute), body)
			return c
		},
		"tampered body": func() int {
			req, _ := http.NewRequestWithContext(w.Ctx(), http.MethodPost, w.api.URL+"/v1/callbacks/bureau_a", strings.NewReader(strings.Replace(body, "approved", "rejected", 1)))
			for k, v := range webhookHeaders(cbSecret, "msg_f3", body) {
				req.Header[k] = v
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp.StatusCode
		},
		"unsigned": func() int {
			resp, err := http.Post(w.api.URL+"/v1/callbacks/bureau_a", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp.StatusCode
		},
	}
	for name, send := range cases {
		if code := send(); code != http.StatusUnauthorized {
			t.Errorf("%s: want 401, got %d", name, code)
		}
	}
	after := w.Record(id)
	if after.Status != state.AwaitingCallback || len(after.History) != len(rec.History) {
		t.Errorf("forged callbacks changed the event: %s %v", after.Status, actions(after))
	}
	if code, _ := w.callback("nosuch", cbSecret, "msg_x", time.Now(), body); code != http.StatusNotFound {
		t.Errorf("unknown target: want 404, got %d", code)
	}
	w.wantMetric("tenaz_callbacks_total", map[string]string{"target": "bureau_a", "result": "forged"}, 4)
}

// No callback by the deadline: manual review, kept in DEAD with the
// reason, advised; a callback arriving after that is a recorded no-op.
func TestWatchdogToManualReviewThenLateCallbackIsNoop(t *testing.T) {
	w := newWorld(t, "attempts: 3, callback_sla: 2s", worldOpts{})
	advisories, err := w.NC.SubscribeSync("tenaz.advisory.review.acme.credit.evaluate")
	if err != nil {
		t.Fatal(err)
	}
	id := w.submit("c-4", `{"applicant":"a-4"}`)
	w.WaitStatus(id, state.AwaitingCallback, 10*time.Second)
	rec := w.WaitStatus(id, state.ManualReview, 15*time.Second)
	if why := detailOf(rec, state.Escalate); !strings.Contains(why, "no callback from bureau_a by the deadline") {
		t.Errorf("escalation reason: got %q", why)
	}
	m, err := advisories.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatalf("review advisory: %v", err)
	}
	var adv dead.Advisory
	if err := json.Unmarshal(m.Data, &adv); err != nil || adv.ID != id || adv.Reason != dead.ReasonReview {
		t.Errorf("review advisory: got %s (%v)", m.Data, err)
	}
	s, _ := w.JS.Stream(w.Ctx(), names.StreamDead)
	dm, err := s.GetLastMsgForSubject(w.Ctx(), "tenaz.dead.acme.credit.evaluate")
	if err != nil {
		t.Fatalf("DEAD entry: %v", err)
	}
	var e dead.Entry
	if err := json.Unmarshal(dm.Data, &e); err != nil || e.Reason != dead.ReasonReview || e.Event == nil || string(e.Event.Payload) != `{"applicant":"a-4"}` {
		t.Errorf("DEAD entry: want the review with its payload, got %s", dm.Data)
	}

	code, rep := w.callback("bureau_a", cbSecret, "msg_late", time.Now(), `{"event_id":"`+id+`","status":"approved"}`)
	if code != http.StatusOK || rep.Outcome != ingest.CallbackLate {
		t.Fatalf("late callback: want 200 late, got %d %q", code, rep.Outcome)
	}
	after := w.Record(id)
	if after.Status != state.ManualReview || after.Result != nil || !strings.Contains(detailOf(after, state.Note), "late callback") {
		t.Errorf("late callback: want a recorded no-op, got %s result=%s %v", after.Status, after.Result, actions(after))
	}
}

// With on_callback_timeout: fallback, the deadline moves the event to the
// fallback bureau, which is polled to done; the primary's late callback
// is recorded and never applied over the fallback's result.
func TestWatchdogToFallbackLatePrimaryNotApplied(t *testing.T) {
	w := newWorld(t, `attempts: 3, callback_sla: 2s, on_callback_timeout: fallback,
    fallback: {target: bureau_b, completion: poll, attempts: 3, poll_sla: 1m}`, worldOpts{b: provider.Faults{PollAfter: 1}})
	id := w.submit("c-5", `{"applicant":"a-5","decision":"rejected"}`)
	first := w.WaitStatus(id, state.AwaitingCallback, 10*time.Second)
	natstest.Eventually(t, 20*time.Second, func() bool { return w.Record(id).Status == state.Done }, "done: %v", actions(w.Record(id)))
	rec := w.Record(id)
	if rec.Stage != state.StageFallback {
		t.Fatalf("want done at the fallback stage, got %s: %v", rec.Stage, actions(rec))
	}
	var res struct{ Status string }
	if err := json.Unmarshal(rec.Result, &res); err != nil || res.Status != "rejected" {
		t.Fatalf("want the fallback's poll answer as result, got %s", rec.Result)
	}
	code, rep := w.callback("bureau_a", cbSecret, "msg_"+first.Reference, time.Now(),
		`{"event_id":"`+id+`","reference":"`+first.Reference+`","status":"approved"}`)
	if code != http.StatusOK || rep.Outcome != ingest.CallbackLate {
		t.Fatalf("late primary callback: want 200 late, got %d %q", code, rep.Outcome)
	}
	after := w.Record(id)
	if string(after.Result) != string(rec.Result) || after.Status != state.Done {
		t.Errorf("late primary result applied over the fallback's: %s", after.Result)
	}
	if w.a.Effects(id) != 1 || w.b.Effects(id) != 1 {
		t.Errorf("effects: want one at each bureau, got A=%d B=%d", w.a.Effects(id), w.b.Effects(id))
	}
}

// The primary fails three times (transient): the fallback stage takes
// over and is polled until done. Status and history show both stages.
func TestFallbackAfterThreeFailuresThenPollToDone(t *testing.T) {
	w := newWorld(t, `attempts: 3, backoff: {initial: 1s, max: 1s, jitter: 0},
    fallback: {target: bureau_b, completion: poll, attempts: 3, poll_sla: 1m}`,
		worldOpts{a: provider.Faults{Status: http.StatusServiceUnavailable}, b: provider.Faults{PollAfter: 2}})
	id := w.submit("c-6", `{"applicant":"a-6"}`)
	rec := w.WaitStatus(id, state.Done, 30*time.Second)
	if rec.Stage != state.StageFallback {
		t.Fatalf("want the fallback stage, got %s", rec.Stage)
	}
	if n := len(w.a.CallsFor(id)); n != 3 {
		t.Errorf("primary: want 3 attempts, got %d", n)
	}
	if w.b.Effects(id) != 1 || w.b.Polls(rec.Reference) != 3 {
		t.Errorf("fallback: want 1 effect and 3 polls, got %d and %d", w.b.Effects(id), w.b.Polls(rec.Reference))
	}
	stages := map[string]bool{}
	for _, e := range rec.History {
		stages[e.Stage] = true
	}
	if !stages[state.StagePrimary] || !stages[state.StageFallback] || count(rec, state.Fallback) != 1 ||
		count(rec, state.Retry) != 2 || count(rec, state.Poll) != 1 || count(rec, state.Complete) != 1 {
		t.Errorf("history: want both stages, 2 retries, fallback, poll, complete; got %v", actions(rec))
	}
	if rec.Polls != 2 {
		t.Errorf("polls before the final one: want 2, got %d", rec.Polls)
	}
	// Every message its path put in EVENTS (its dispatches, the fired
	// retries and polls) leaves it, trimmed by the dispatcher and the poller.
	events := w.Subj.EventsStream("acme")
	natstest.Eventually(t, servicetest.WaitFor, func() bool {
		return w.SubjectMsgs(events, w.Subj.EventsOf("acme")) == 0 && w.SubjectMsgs(events, w.Subj.TimersIn(w.Subj.PartitionOf("acme"))) == 0
	}, "the event's messages to leave EVENTS")
	acme := func(kv ...string) map[string]string {
		m := map[string]string{"account": "acme", "kind": "credit.evaluate"}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	w.wantMetric("tenaz_polls_total", map[string]string{"target": "bureau_b", "result": "pending"}, 2)
	w.wantMetric("tenaz_polls_total", map[string]string{"target": "bureau_b", "result": "done"}, 1)
	w.wantMetric("tenaz_attempts_total", acme("class", "transient"), 3)
	w.wantMetric("tenaz_attempts_total", acme("class", "ok"), 1)
	w.wantMetric("tenaz_retries_total", acme("class", "transient"), 2)
	w.wantMetric("tenaz_outcomes_total", acme("state", "done"), 1)
	w.wantMetric("tenaz_outcomes_total", acme("state", "polling"), 1)
	w.wantMetric("tenaz_wait_seconds", acme(), 1)
}

// Polling that never brings a result ends in manual review at the poll
// SLA, with the reason and the last answer.
func TestPollSLAToManualReview(t *testing.T) {
	w := newWorld(t, `attempts: 1,
    fallback: {target: bureau_b, completion: poll, attempts: 3, poll_sla: 5s}`,
		worldOpts{a: provider.Faults{Status: http.StatusServiceUnavailable}, b: provider.Faults{PollAfter: 1000}})
	id := w.submit("c-7", `{"applicant":"a-7"}`)
	rec := w.WaitStatus(id, state.ManualReview, 20*time.Second)
	why := detailOf(rec, state.Escalate)
	if !strings.Contains(why, "poll SLA passed") || !strings.Contains(why, `status is "processing"`) {
		t.Errorf("reason: want the poll SLA and the last answer, got %q", why)
	}
	if rec.Polls < 2 || count(rec, state.Repoll) != 1 {
		t.Errorf("want several polls in one history line, got polls=%d %v", rec.Polls, actions(rec))
	}
}

// The reconciler finds an event whose EVENTS message was deleted by hand
// (pending with nothing on its way) and puts it back: it then reaches
// done. While the message still waits, it repairs nothing.
func TestReconcilerRepairsDeletedMessage(t *testing.T) {
	w := newWorld(t, "attempts: 3, callback_sla: 1m", worldOpts{noDispatch: true, noPoller: true})
	p := w.poller(false)
	id := w.submit("c-8", `{"applicant":"a-8"}`)
	w.WaitStatus(id, state.Pending, 5*time.Second)
	natstest.Eventually(t, 5*time.Second, func() bool { return time.Since(w.Record(id).UpdatedAt) > 1100*time.Millisecond },
		"the event's grace to pass")
	rep, err := p.Reconcile(w.Ctx())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Repairs() != 0 || rep.Overdue != 1 {
		t.Fatalf("message still queued: want 1 overdue and no repair, got %+v", rep)
	}
	// Delete the event's message by hand.
	s, _ := w.JS.Stream(w.Ctx(), w.Subj.EventsStream("acme"))
	subj, _ := w.Subj.Event("acme", "credit.evaluate")
	m, err := s.GetLastMsgForSubject(w.Ctx(), subj)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteMsg(w.Ctx(), m.Sequence); err != nil {
		t.Fatal(err)
	}
	rep, err = p.Reconcile(w.Ctx())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Repaired["requeued"] != 1 {
		t.Fatalf("want one requeue, got %+v", rep)
	}
	w.wantMetric("tenaz_reconciler_repairs_total", map[string]string{"repair": "requeued"}, 1)
	w.wantMetric("tenaz_events", map[string]string{"state": "pending", "account": "acme", "kind": "credit.evaluate"}, 1)
	found := false
	for _, c := range rep.Counts {
		if c.Account == "acme" && c.Kind == "credit.evaluate" && c.State == state.Pending && c.N == 1 {
			found = true
		}
	}
	if !found {
		t.Errorf("census: want acme/credit.evaluate/pending = 1, got %+v", rep.Counts)
	}
	w.dispatcher()
	w.WaitStatus(id, state.AwaitingCallback, 10*time.Second)
	if n := w.a.Effects(id); n != 1 {
		t.Errorf("want the repaired event delivered once, got %d", n)
	}
}

// A polling event whose timer was lost (its schedule purged by hand) is
// rescheduled by the reconciler and polled to done.
func TestReconcilerReschedulesLostPoll(t *testing.T) {
	w := newWorld(t, `attempts: 1,
    fallback: {target: bureau_b, completion: poll, attempts: 3, poll_sla: 1m}`,
		worldOpts{a: provider.Faults{Status: http.StatusServiceUnavailable}, b: provider.Faults{PollAfter: 1000}, noPoller: true})
	id := w.submit("c-9", `{"applicant":"a-9"}`)
	w.WaitStatus(id, state.Polling, 10*time.Second)
	s, _ := w.JS.Stream(w.Ctx(), w.Subj.EventsStream("acme"))
	if err := s.Purge(w.Ctx(), jetstreamPurgeSubject(w.Subj.Schedule("acme", id))); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 10*time.Second, func() bool {
		r := w.Record(id)
		return r.NextRunAt != nil && time.Since(*r.NextRunAt) > 1100*time.Millisecond
	}, "the poll to be overdue")
	w.b.SetFaults(provider.Faults{})
	p := w.poller(false)
	rep, err := p.Reconcile(w.Ctx())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Repaired["poll_rescheduled"] != 1 {
		t.Fatalf("want one poll rescheduled, got %+v", rep)
	}
	w.WaitStatus(id, state.Done, 10*time.Second)
}

// With callback.done_when, a not-final callback ("processing") is
// recorded and the event keeps waiting; the final one completes it; one
// arriving out of order after that is a recorded no-op.
func TestCallbackProgressAndOutOfOrder(t *testing.T) {
	w := newWorld(t, "attempts: 3, callback_sla: 1m", worldOpts{
		bureauA: "    callback: {done_when: {field: status, in: [approved, rejected]}}"})
	id := w.submit("c-10", `{"applicant":"a-10"}`)
	w.WaitStatus(id, state.AwaitingCallback, 10*time.Second)
	cb := func(wid, status string, ts time.Time) string {
		code, rep := w.callback("bureau_a", cbSecret, wid, ts, `{"event_id":"`+id+`","status":"`+status+`"}`)
		if code != http.StatusOK {
			t.Fatalf("callback %s: want 200, got %d", wid, code)
		}
		return rep.Outcome
	}
	t0 := time.Now()
	if o := cb("msg_p1", "processing", t0); o != ingest.CallbackProgress {
		t.Fatalf("processing: want progress, got %q", o)
	}
	if s := w.Record(id).Status; s != state.AwaitingCallback {
		t.Fatalf("after a not-final callback: want awaiting_callback, got %s", s)
	}
	if o := cb("msg_p3", "rejected", t0.Add(2*time.Second)); o != ingest.CallbackApplied {
		t.Fatalf("final: want applied, got %q", o)
	}
	if o := cb("msg_p2", "processing", t0.Add(time.Second)); o != ingest.CallbackLate {
		t.Fatalf("out of order after the final one: want late, got %q", o)
	}
	rec := w.Record(id)
	var res struct{ Status string }
	_ = json.Unmarshal(rec.Result, &res)
	if rec.Status != state.Done || res.Status != "rejected" || notes(rec, "callback") != 2 {
		t.Errorf("want done with the final result and two recorded callbacks, got %s %s %v", rec.Status, rec.Result, actions(rec))
	}
}

// A run whose message vanished (claimed, then the message deleted: no
// redelivery will ever come) is found by the reconciler after
// running_grace, put back to retrying and delivered.
func TestReconcilerRecoversLostRun(t *testing.T) {
	claimed := make(chan string, 1)
	w := newWorld(t, "attempts: 3, callback_sla: 1m", worldOpts{
		noPoller: true,
		hooks: &dispatcher.Hooks{AfterClaim: func(id string, attempt int) error {
			if attempt == 1 {
				claimed <- id
				return errors.New("simulated crash after the claim")
			}
			return nil
		}},
	})
	w.cfg.Poller.RunningGrace = config.Duration(time.Second)
	id := w.submit("c-11", `{"applicant":"a-11"}`)
	select {
	case <-claimed:
	case <-time.After(10 * time.Second):
		t.Fatal("no claim")
	}
	w.WaitStatus(id, state.Running, 5*time.Second)
	s, _ := w.JS.Stream(w.Ctx(), w.Subj.EventsStream("acme"))
	subj, _ := w.Subj.Event("acme", "credit.evaluate")
	m, err := s.GetLastMsgForSubject(w.Ctx(), subj)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteMsg(w.Ctx(), m.Sequence); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 5*time.Second, func() bool { return time.Since(w.Record(id).UpdatedAt) > 1100*time.Millisecond },
		"the running grace to pass")
	p := w.poller(false)
	rep, err := p.Reconcile(w.Ctx())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Repaired["lost_run"] != 1 {
		t.Fatalf("want one lost run recovered, got %+v", rep)
	}
	rec := w.WaitStatus(id, state.AwaitingCallback, 10*time.Second)
	if count(rec, state.Recover) != 1 || w.a.Effects(id) != 1 {
		t.Errorf("want one recover and one effect, got %v and %d", actions(rec), w.a.Effects(id))
	}
}

// Regression: a replayed event's new callback deadline was dropped as a
// duplicate of its first one (same message id within the stream's
// duplicate window), so the replayed event waited in awaiting_callback
// forever. Every step's message id now carries the record's step count.
func TestReplayedEventGetsFreshDeadline(t *testing.T) {
	w := newWorld(t, "attempts: 3, callback_sla: 2s", worldOpts{})
	id := w.submit("c-12", `{"applicant":"a-12"}`)
	w.WaitStatus(id, state.ManualReview, 15*time.Second)
	rec, _, _, err := w.St.Transition(w.Ctx(), "", id, state.Action{Name: state.Replay, Actor: "operator:test", Detail: "try again"})
	if err != nil {
		t.Fatal(err)
	}
	env, err := w.St.Envelope(rec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := queue.New(w.JS, w.Subj).Enqueue(w.Ctx(), env, id+"/replay/test"); err != nil {
		t.Fatal(err)
	}
	w.WaitStatus(id, state.AwaitingCallback, 10*time.Second)
	rec = w.WaitStatus(id, state.ManualReview, 15*time.Second)
	if count(rec, state.Escalate) != 2 {
		t.Errorf("want two escalations (before and after the replay), got %v", actions(rec))
	}
}

// A run that waits for its account's rate is not lost, however long it
// waits: its message is still in EVENTS, held by its dispatcher. Before,
// the reconciler took every run older than running_grace for lost and
// requeued it: at a slow rate the waiting run still called once its turn
// came, its outcome was ignored, and the requeued one called again.
func TestReconcilerLeavesARunWaitingForItsRate(t *testing.T) {
	w := newWorld(t, "attempts: 3, callback_sla: 1m", worldOpts{noPoller: true, accounts: "  acme: {rate: 12/m, concurrency: 2}"})
	w.cfg.Poller.RunningGrace = config.Duration(time.Second)
	ids := []string{w.submit("c-31", `{"applicant":"a-31"}`), w.submit("c-32", `{"applicant":"a-32"}`)}
	// One is called at once; the other waits 5 s for the account's rate,
	// running.
	natstest.Eventually(t, 10*time.Second, func() bool {
		for _, id := range ids {
			if r := w.Record(id); r.Status == state.Running && time.Since(r.UpdatedAt) > 1100*time.Millisecond {
				return true
			}
		}
		return false
	}, "a run waiting for its rate past the running grace")
	rep, err := w.poller(false).Reconcile(w.Ctx())
	if err != nil {
		t.Fatal(err)
	}
	if n := rep.Repaired["lost_run"]; n != 0 {
		t.Fatalf("want no lost run, got %d (%+v)", n, rep)
	}
	for _, id := range ids {
		rec := w.WaitStatus(id, state.AwaitingCallback, 15*time.Second)
		if count(rec, state.Recover) != 0 || w.a.Effects(id) != 1 {
			t.Errorf("%s: want no recover and one effect, got %v and %d", id, actions(rec), w.a.Effects(id))
		}
	}
}
