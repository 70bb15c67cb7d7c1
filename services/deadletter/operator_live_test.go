package deadletter_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tenaz/tenaz/pkg/accounts"
	"github.com/tenaz/tenaz/pkg/breaker"
	"github.com/tenaz/tenaz/pkg/daemon"
	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/queue"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/webhook"
	"github.com/tenaz/tenaz/services/dispatcher"
	"github.com/tenaz/tenaz/services/ingest"
)

// recordedPause is account's pause as recorded in tenaz_ops: whether it
// holds now and until when.
func (e *env) recordedPause(account string) (paused bool, until time.Time) {
	e.t.Helper()
	ps, err := accounts.OpenPauses(servicetest.Context(e.t, 2*time.Minute), e.JS, e.Subj)
	if err != nil {
		e.t.Fatal(err)
	}
	p, ok, _, err := ps.Get(servicetest.Context(e.t, 2*time.Minute), account)
	if err != nil {
		e.t.Fatal(err)
	}
	return ok && p.Holds(time.Now()), p.End()
}

// pausedForever waits until dispatcher d holds account paused until
// resumed.
func (e *env) pausedForever(d *dispatcher.Service, account, when string) {
	e.t.Helper()
	natstest.Eventually(e.t, 20*time.Second, func() bool {
		return d.PausedUntil(account).Equal(accounts.PauseForever)
	}, "%s: %s paused until resumed", when, account)
}

// calls is how many calls the provider got for the events ids.
func (e *env) calls(ids ...string) int {
	n := 0
	for _, id := range ids {
		n += len(e.p.CallsFor(id))
	}
	return n
}

// waitDone waits until every event of ids is done.
func (e *env) waitDone(ids ...string) {
	e.t.Helper()
	for _, id := range ids {
		natstest.Eventually(e.t, 60*time.Second, func() bool {
			r, _, err := e.St.Get(context.Background(), "", id)
			return err == nil && r.Status == state.Done
		}, "%s to be done", id)
	}
}

// actionsSubscription collects the advisories of operator actions.
func (e *env) actionsSubscription() chan *nats.Msg {
	e.t.Helper()
	ch := make(chan *nats.Msg, 32)
	sub, err := e.NC.ChanSubscribe("tenaz.advisory.action.>", ch)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := e.NC.Flush(); err != nil {
		e.t.Fatal(err)
	}
	return ch
}

// A paused account gets no calls while another account's events are
// delivered; resumed, its backlog drains. The pause and the resume are in
// the audit, with who and why, and advised; the other account has none.
func TestPausedAccountGetsNoCallsUntilResumed(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	startIngest(t, e)
	d := e.startDispatcher(nil)
	advisories := e.actionsSubscription()
	// Both accounts running, with their readers and lanes.
	e.waitDone(submit(t, e, "acme", "order.create", "a-0", `{"n":0}`), submit(t, e, "globex", "order.create", "g-0", `{"n":0}`))

	var rep ops.AccountReply
	st, body := e.post("/v1/accounts/acme/pause", map[string]string{"reason": "erp migration"}, &rep)
	if st != http.StatusOK {
		t.Fatalf("pause: want 200, got %d %s", st, body)
	}
	if rep.Paused == nil || rep.Paused.Actor != "operator:alice" || rep.Paused.Reason != "erp migration" || rep.Paused.Until != nil ||
		!rep.UntilResumed || rep.HeldUntil != nil {
		t.Fatalf("pause: want alice's pause until resumed, got %+v", rep)
	}
	// A pause without an end shows no end: no held_until (the stored
	// 2999-01-01 is the dispatchers' business), until_resumed instead.
	if strings.Contains(body, "held_until") || strings.Contains(body, "2999") || !strings.Contains(body, `"until_resumed":true`) {
		t.Fatalf("pause: want until_resumed and no held_until in the answer, got %s", body)
	}
	if p, _ := e.recordedPause("acme"); !p {
		t.Fatal("acme: want its pause recorded once the pause is answered")
	}
	e.pausedForever(d, "acme", "paused")
	if until := d.PausedUntil("globex"); !until.IsZero() {
		t.Fatalf("globex: want it running, got paused until %v", until)
	}
	var acme, globex []string
	for i := 1; i <= 3; i++ {
		acme = append(acme, submit(t, e, "acme", "order.create", fmt.Sprintf("a-%d", i), fmt.Sprintf(`{"n":%d}`, i)))
	}
	for i := 1; i <= 3; i++ {
		globex = append(globex, submit(t, e, "globex", "order.create", fmt.Sprintf("g-%d", i), fmt.Sprintf(`{"n":%d}`, i)))
	}
	e.waitDone(globex...) // submitted after acme's: the dispatcher is busy, not idle
	if n := e.calls(acme...); n != 0 {
		t.Fatalf("paused acme: want no call, got %d", n)
	}
	for _, id := range acme {
		if r := e.Record(id); r.Status != state.Pending {
			t.Fatalf("paused acme's %s: want it pending, got %s", id, r.Status)
		}
	}
	var pauses ops.PausesReply
	if st := e.get("/v1/pauses", &pauses); st != http.StatusOK || len(pauses.Items) != 1 || pauses.Items[0].Account != "acme" ||
		!pauses.Items[0].UntilResumed || pauses.Items[0].HeldUntil != nil {
		t.Fatalf("GET /v1/pauses: want acme alone, held until resumed, got %d %+v", st, pauses)
	}

	// Resumed over NATS, by bob: the backlog drains.
	rep = ops.AccountReply{}
	if err := e.callWith(operatorKeys["bob"], ops.AccountsResume, ops.ResumeRequest{Account: "acme", Reason: "migration done"}, &rep); err != nil {
		t.Fatalf("accounts.resume: %v", err)
	}
	if rep.Paused != nil || rep.HeldUntil != nil || rep.UntilResumed {
		t.Fatalf("resume: want acme running, got %+v", rep)
	}
	e.waitDone(acme...)
	err := e.call(ops.AccountsResume, ops.ResumeRequest{Account: "acme", Reason: "again"}, nil)
	var oe *ops.Error
	if !errors.As(err, &oe) || oe.Status != http.StatusConflict || oe.Code != "not_paused" {
		t.Fatalf("resuming a running account: want 409 not_paused, got %v", err)
	}

	var audit ops.ActionsReply
	if st := e.get("/v1/actions?account=acme", &audit); st != http.StatusOK || len(audit.Items) != 2 {
		t.Fatalf("acme's audit: want 2 actions, got %d %+v", st, audit)
	}
	if a := audit.Items[0]; a.Action != ops.ActionResume || a.Actor != "operator:bob" || a.Reason != "migration done" {
		t.Fatalf("newest action: want bob's resume, got %+v", a)
	}
	if a := audit.Items[1]; a.Action != ops.ActionPause || a.Actor != "operator:alice" || a.Reason != "erp migration" || a.Until != nil {
		t.Fatalf("oldest action: want alice's pause until resumed, got %+v", a)
	}
	if e.get("/v1/actions?account=globex", &audit); len(audit.Items) != 0 {
		t.Fatalf("globex's audit: want none, got %+v", audit.Items)
	}
	for _, want := range []string{ops.ActionPause, ops.ActionResume} {
		select {
		case m := <-advisories:
			var a ops.Action
			if err := json.Unmarshal(m.Data, &a); err != nil || m.Subject != "tenaz.advisory.action.acme" || a.Action != want {
				t.Fatalf("advisory: want %s on tenaz.advisory.action.acme, got %s %s", want, m.Subject, m.Data)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no advisory of the %s", want)
		}
	}
}

// An operator's pause holds through everything else that changes whether
// an account runs: its reader retired while idle and started again by the
// next event, a breaker of the account opening and closing, and a
// dispatcher's restart. Only the resume lets the account's event through.
func TestOperatorPauseOutlastsRetirementBreakersAndRestarts(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	startIngest(t, e)
	opts := dispatcher.Options{Relist: 200 * time.Millisecond, IdleAfter: 3 * time.Second}
	d := e.startDispatcherWith(opts)
	e.waitDone(submit(t, e, "acme", "order.create", "a-0", `{"n":0}`), submit(t, e, "globex", "order.create", "g-0", `{"n":0}`))
	if st, body := e.post("/v1/accounts/acme/pause", map[string]string{"reason": "erp migration"}, nil); st != http.StatusOK {
		t.Fatalf("pause: want 200, got %d %s", st, body)
	}
	e.pausedForever(d, "acme", "paused")

	// Idle, the paused account's reader is retired; the next event starts
	// one again, which reads nothing.
	natstest.Eventually(t, 30*time.Second, func() bool { return !slices.Contains(d.Accounts(), "acme") }, "acme's idle reader to be retired")
	a1 := submit(t, e, "acme", "order.create", "a-1", `{"n":1}`)
	e.waitDone(submit(t, e, "globex", "order.create", "g-1", `{"n":1}`))
	e.pausedForever(d, "acme", "started again")

	// A breaker of acme opens and closes, as a dispatcher's failures
	// would; globex's too, after acme's: once globex has been held and
	// let go, the dispatcher has heard acme's changes.
	reg, err := breaker.New(servicetest.Context(t, 2*time.Minute), e.JS, breaker.Options{Instance: "dispatcher-x"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Stop)
	trip := func(account string) {
		b := reg.For(account, "erp", breaker.Config{Failures: 1, Cooldown: time.Hour})
		p, err := b.Allow(servicetest.Context(t, 2*time.Minute))
		if err != nil || !p.OK {
			t.Fatalf("allow %s: %+v %v", account, p, err)
		}
		if err := b.Record(servicetest.Context(t, 2*time.Minute), p, false); err != nil {
			t.Fatal(err)
		}
	}
	trip("acme")
	trip("globex")
	natstest.Eventually(t, 20*time.Second, func() bool { return !d.PausedUntil("globex").IsZero() }, "globex held by its breaker")
	e.pausedForever(d, "acme", "its breaker open")
	for _, a := range []string{"acme", "globex"} {
		if err := reg.Close(servicetest.Context(t, 2*time.Minute), a, "erp", "operator:carol"); err != nil {
			t.Fatal(err)
		}
	}
	natstest.Eventually(t, 20*time.Second, func() bool { return d.PausedUntil("globex").IsZero() }, "globex let go when its breaker closed")
	e.pausedForever(d, "acme", "its breaker closed")

	// The dispatcher restarts.
	servicetest.Stop(t, d)
	d = e.startDispatcherWith(opts)
	e.waitDone(submit(t, e, "globex", "order.create", "g-2", `{"n":2}`))
	e.pausedForever(d, "acme", "the dispatcher restarted")
	if n := e.calls(a1); n != 0 {
		t.Fatalf("paused acme: want no call of %s, got %d", a1, n)
	}

	if st, body := e.post("/v1/accounts/acme/resume", map[string]string{"reason": "migration done"}, nil); st != http.StatusOK {
		t.Fatalf("resume: want 200, got %d %s", st, body)
	}
	e.waitDone(a1)
}

// Retry now: a retrying event of acme (an hour to its next attempt) is
// called again within a couple of seconds, globex's retrying event keeps
// its hour, and a scheduled event runs now; each retry_now is in the
// event's history with who and why. An event that is not waiting is 409.
func TestRetryNowCallsWithinSeconds(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	e.p.SetFaults(provider.Faults{FailFirst: 1})
	startIngest(t, e)
	e.startDispatcher(nil)
	a := submit(t, e, "acme", "order.slow", "s-1", `{"n":1}`)
	g := submit(t, e, "globex", "order.slow", "s-2", `{"n":2}`)
	for _, id := range []string{a, g} {
		natstest.Eventually(t, 30*time.Second, func() bool {
			r, _, err := e.St.Get(context.Background(), "", id)
			return err == nil && r.Status == state.Retrying
		}, "%s to be retrying after its 503", id)
	}
	gBefore := e.Record(g)
	if gBefore.NextRunAt == nil || time.Until(*gBefore.NextRunAt) < 50*time.Minute {
		t.Fatalf("globex's event: want its next attempt in about an hour, got %v", gBefore.NextRunAt)
	}

	var rep ops.EventReply
	if st, body := e.post("/v1/events/"+a+"/retry", map[string]string{"reason": "erp is back"}, &rep); st != http.StatusOK {
		t.Fatalf("retry: want 200, got %d %s", st, body)
	}
	asked := time.Now()
	if rep.Status != state.Retrying || rep.NextRunAt == nil || rep.NextRunAt.Sub(asked) > time.Second {
		t.Fatalf("retry: want it retrying, due within a second, got %+v", rep)
	}
	natstest.Eventually(t, 10*time.Second, func() bool { return e.calls(a) == 2 }, "acme's second call")
	if took := e.p.CallsFor(a)[1].At.Sub(asked); took > 3*time.Second {
		t.Fatalf("retry now: the call came %v after the answer, want within a second or two", took)
	}
	t.Logf("retry now: the call %v after the answer", e.p.CallsFor(a)[1].At.Sub(asked).Round(time.Millisecond))
	e.waitDone(a)
	var entry *state.Entry
	for _, h := range e.Record(a).History {
		if h.Action == state.RetryNow {
			entry = &h
		}
	}
	if entry == nil || entry.Actor != "operator:alice" || entry.Detail != "erp is back" {
		t.Fatalf("history: want a retry_now by operator:alice with the reason, got %+v", e.Record(a).History)
	}
	if r := e.Record(g); r.Status != state.Retrying || !r.NextRunAt.Equal(*gBefore.NextRunAt) || e.calls(g) != 1 {
		t.Fatalf("globex's event: want it untouched (retrying, same next run, one call), got %s %v with %d calls", r.Status, r.NextRunAt, e.calls(g))
	}

	// A scheduled event, over NATS, to a provider that fails no more.
	e.p.SetFaults(provider.Faults{})
	later := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	env, err := ingestEvent(e, "acme", "order.create", "d-1", later)
	if err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 30*time.Second, func() bool {
		r, _, err := e.St.Get(context.Background(), "", env)
		return err == nil && r.Status == state.Scheduled
	}, "the delayed event to be scheduled")
	if err := e.callWith(operatorKeys["bob"], ops.EventsRetry, ops.EventActionRequest{ID: env, Reason: "the customer asked"}, &rep); err != nil {
		t.Fatalf("events.retry: %v", err)
	}
	e.waitDone(env)

	err = e.call(ops.EventsRetry, ops.EventActionRequest{ID: a, Reason: "again"}, nil)
	var oe *ops.Error
	if !errors.As(err, &oe) || oe.Status != http.StatusConflict || oe.Code != "not_waiting" {
		t.Fatalf("retrying a done event: want 409 not_waiting, got %v", err)
	}
}

// ingestEvent submits a delayed event over NATS and returns its id.
func ingestEvent(e *env, account, kind, key, notBefore string) (string, error) {
	m := nats.NewMsg("tenaz.intake." + account + "." + kind)
	m.Data = []byte(`{"n":1}`)
	m.Header.Set("Idempotency-Key", key)
	m.Header.Set(names.HeaderNotBefore, notBefore)
	if _, err := e.JS.PublishMsg(context.Background(), m); err != nil {
		return "", err
	}
	return event.ID(account, key), nil
}

// Cancelling the wait of an event awaiting its callback: it is cancelled,
// with who and why in its history, its deadline is purged, and the
// provider's callback that comes afterwards is answered "late" and
// recorded as a no-op; globex's event, awaiting the same bureau, is
// completed by its callback.
func TestCancelWaitMakesTheLateCallbackANoOp(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	ing := startIngest(t, e)
	mux := http.NewServeMux()
	ing.Routes(mux)
	hooks := httptest.NewServer(daemon.Handler(e.cfg, e.auth, mux))
	t.Cleanup(hooks.Close)
	e.startDispatcher(nil)
	a := submit(t, e, "acme", "credit.callback", "c-1", `{"n":1}`)
	g := submit(t, e, "globex", "credit.callback", "c-2", `{"n":2}`)
	for _, id := range []string{a, g} {
		natstest.Eventually(t, 30*time.Second, func() bool {
			r, _, err := e.St.Get(context.Background(), "", id)
			return err == nil && r.Status == state.AwaitingCallback
		}, "%s to await its callback", id)
	}
	q := queue.New(e.JS, e.Subj)
	if has, err := q.HasSchedule(servicetest.Context(t, 2*time.Minute), "acme", a); err != nil || !has {
		t.Fatalf("acme's event: want its callback deadline scheduled, got %v %v", has, err)
	}

	var rep ops.EventReply
	if err := e.callWith(operatorKeys["bob"], ops.EventsCancel, ops.EventActionRequest{ID: a, Reason: "the bureau lost the file"}, &rep); err != nil {
		t.Fatalf("events.cancel_wait: %v", err)
	}
	if rep.Status != state.Cancelled {
		t.Fatalf("cancel wait: want cancelled, got %+v", rep)
	}
	last := lastEntry(e.Record(a))
	if last.Action != state.CancelWait || last.From != state.AwaitingCallback || last.Actor != "operator:bob" || last.Detail != "the bureau lost the file" {
		t.Fatalf("history: want bob's cancel_wait from awaiting_callback with the reason, got %+v", last)
	}
	if has, err := q.HasSchedule(servicetest.Context(t, 2*time.Minute), "acme", a); err != nil || has {
		t.Fatalf("acme's event: want its deadline purged, got %v %v", has, err)
	}

	callback := func(id, webhookID string) ingest.CallbackReply {
		t.Helper()
		body := fmt.Sprintf(`{"event_id":%q,"status":"approved"}`, id)
		req, _ := http.NewRequest(http.MethodPost, hooks.URL+"/v1/callbacks/bureau_cb", strings.NewReader(body))
		for k, v := range webhook.Headers(cbSecret, webhookID, time.Now(), []byte(body)) {
			req.Header[k] = v
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out ingest.CallbackReply
		if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&out) != nil {
			t.Fatalf("callback for %s: want 200 with an outcome, got %d", id, resp.StatusCode)
		}
		return out
	}
	if out := callback(a, "msg_late"); out.Outcome != ingest.CallbackLate {
		t.Fatalf("acme's callback after the cancel: want %q, got %+v", ingest.CallbackLate, out)
	}
	r := e.Record(a)
	if last := lastEntry(r); r.Status != state.Cancelled || last.Action != state.Note || !strings.Contains(last.Detail, "late callback") || !strings.Contains(last.Detail, "cancelled") {
		t.Fatalf("acme's event: want it cancelled with the late callback noted, got %s %+v", r.Status, last)
	}
	if out := callback(g, "msg_globex"); out.Outcome != ingest.CallbackApplied {
		t.Fatalf("globex's callback: want %q, got %+v", ingest.CallbackApplied, out)
	}
	e.waitDone(g)
}

// An operator opens acme's breaker to erp for a few seconds: no call of
// acme reaches erp before then while globex's do; after it, one probe
// delivers acme's event. The opening is in the breaker's reason and the
// audit.
func TestOperatorOpensABreakerUntilItsTime(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	startIngest(t, e)
	e.startDispatcher(nil)
	var item ops.BreakerItem
	if st, body := e.post("/v1/breakers/acme/erp/open", map[string]string{"reason": "erp maintenance", "for": "4s"}, &item); st != http.StatusOK {
		t.Fatalf("open: want 200, got %d %s", st, body)
	}
	if item.State != string(breaker.Open) || item.OpenUntil == nil || item.Reason != "opened by operator:alice: erp maintenance" {
		t.Fatalf("open: want it open until a time with the operator and the reason, got %+v", item)
	}
	until := *item.OpenUntil
	a := submit(t, e, "acme", "order.create", "b-1", `{"n":1}`)
	e.waitDone(submit(t, e, "globex", "order.create", "b-2", `{"n":2}`))
	e.waitDone(a)
	if at := e.p.CallsFor(a)[0].At; at.Before(until) {
		t.Fatalf("acme's call at %v: want none before the breaker's time %v", at, until)
	}
	var audit ops.ActionsReply
	if err := e.call(ops.ActionsList, ops.ActionsRequest{Account: "acme"}, &audit); err != nil || len(audit.Items) != 1 ||
		audit.Items[0].Action != ops.ActionOpenBreaker || audit.Items[0].Target != "erp" || audit.Items[0].Until == nil || !audit.Items[0].Until.Equal(until) {
		t.Fatalf("acme's audit: want alice's open_breaker of erp until %v, got %+v %v", until, audit, err)
	}
}

// Resumes at once end one pause: each clears only the pause it read, so
// one is answered 200 and the others 409 not_paused, and the audit has
// one resume. (Each cleared unconditionally before: all of them were
// answered 200 and audited.)
func TestConcurrentResumesEndOnePause(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	if st, body := e.post("/v1/accounts/acme/pause", map[string]string{"reason": "erp migration"}, nil); st != http.StatusOK {
		t.Fatalf("pause: want 200, got %d %s", st, body)
	}
	const n = 8
	type answer struct {
		status int
		body   string
		err    error
	}
	answers := make(chan answer, n)
	start := make(chan struct{})
	for i := range n {
		go func() {
			<-start
			body := fmt.Sprintf(`{"reason":"resume %d"}`, i)
			resp, err := http.Post(e.http.URL+"/v1/accounts/acme/resume", "application/json", strings.NewReader(body))
			if err != nil {
				answers <- answer{err: err}
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			answers <- answer{status: resp.StatusCode, body: string(b)}
		}()
	}
	close(start)
	ok := 0
	for range n {
		a := <-answers
		switch {
		case a.err != nil:
			t.Fatal(a.err)
		case a.status == http.StatusOK:
			ok++
		case a.status != http.StatusConflict || !strings.Contains(a.body, `"not_paused"`):
			t.Fatalf("a resume that came second: want 409 not_paused, got %d %s", a.status, a.body)
		}
	}
	if ok != 1 {
		t.Fatalf("%d resumes at once: want one answered 200, got %d", n, ok)
	}
	var audit ops.ActionsReply
	if st := e.get("/v1/actions?account=acme", &audit); st != http.StatusOK || len(audit.Items) != 2 || audit.Items[0].Action != ops.ActionResume {
		t.Fatalf("acme's audit: want the pause and one resume, got %d %+v", st, audit.Items)
	}
}
