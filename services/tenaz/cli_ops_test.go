package tenaz_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/services/ingest"
	"github.com/tenaz/tenaz/services/tenaz/internal/cli"
)

// dead ls, show, replay with a fixed payload, discard, and review resolve
// against tenaz-deadletter in `tenaz run`: the event the target rejected
// is listed with why, shown with its payload, replayed with the payload
// the operator fixed until done, and every action is in its history with
// who acted: anonymous, as auth is disabled here (TestCLIOperatorKey runs
// with the operator key). Acting twice is a conflict (4), an unknown id is 3.
func TestCLIDeadLetters(t *testing.T) {
	t.Parallel()
	p, tz, base := running(t)
	op := newOperator(t, tz.NATSURL())

	var ids []string
	for _, key := range []string{"fix-1", "drop-1", "hand-1"} {
		_, v := post(t, base, key, fmt.Sprintf(`{"account":"acme","kind":"order.create","payload":{"order_id":%q,"reject":true}}`, key))
		waitStatus(t, base, v.ID, "dead")
		ids = append(ids, v.ID)
	}
	fix, drop, hand := ids[0], ids[1], ids[2]

	var list ops.ListReply
	natstest.Eventually(t, 10*time.Second, func() bool {
		op.must(cli.ExitOK, "dead", "ls", "--account", "acme", "--kind", "order.create", "--json").decode(t, &list)
		return list.Total == 3
	}, "dead ls: want the 3 rejected events, got %+v", &list)
	for _, it := range list.Items {
		if it.Reason != "permanent" || it.Class != "permanent" || it.HTTPStatus != 422 || it.Status != state.Dead {
			t.Fatalf("dead ls: want reason and class permanent, HTTP 422, status dead, got %+v", it)
		}
	}
	op.must(cli.ExitOK, "dead", "ls", "--account", "other", "--json").decode(t, &list)
	if list.Total != 0 || len(list.Items) != 0 {
		t.Fatalf("dead ls --account other: want nothing, got %+v", list)
	}
	r := op.must(cli.ExitOK, "dead", "ls", "--limit", "2")
	if !strings.HasPrefix(r.stdout, "ID ") || strings.Count(r.stdout, "ev_") != 2 || !strings.Contains(r.stdout, "2 shown, 3 matching; next page: --cursor ") {
		t.Fatalf("dead ls --limit 2: want a table of 2 and the next page's cursor, got\n%s", r)
	}
	op.must(cli.ExitOK, "dead", "ls", "--limit", "1", "--all", "--json").decode(t, &list)
	if len(list.Items) != 3 || list.NextCursor != "" {
		t.Fatalf("dead ls --all: want all 3 pages in one list, got %+v", list)
	}

	var show ops.ShowReply
	op.must(cli.ExitOK, "dead", "show", fix, "--json").decode(t, &show)
	var payload struct {
		OrderID string `json:"order_id"`
		Reject  bool   `json:"reject"`
	}
	if show.Item.ID != fix || show.Event == nil || json.Unmarshal(show.Event.Payload, &payload) != nil || payload != struct {
		OrderID string `json:"order_id"`
		Reject  bool   `json:"reject"`
	}{"fix-1", true} || show.Record == nil {
		t.Fatalf("dead show: want %s with its payload and record, got %+v", fix, show)
	}
	r = op.must(cli.ExitOK, "dead", "show", fix)
	for _, want := range []string{"LAST ERROR", "permanent 422", "PAYLOAD", `"reject":true`, "accept", "fail"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("dead show: want %q, got\n%s", want, r)
		}
	}
	op.must(cli.ExitNotFound, "dead", "show", "ev_"+strings.Repeat("0", 26))

	// Replay with the payload fixed: done, once, and the history says who.
	var rep ops.ReplayReply
	op.must(cli.ExitOK, "dead", "replay", fix, "--payload", `{"order_id":"fix-1"}`, "-m", "fixed the order", "--json").decode(t, &rep)
	if rep.Replayed != 1 || rep.JobID != "" {
		t.Fatalf("dead replay: want 1 replayed, got %+v", rep)
	}
	waitStatus(t, base, fix, "done")
	if n := p.Effects(fix); n != 1 {
		t.Fatalf("replayed event: want its effect applied once, got %d", n)
	}
	var h ingest.HistoryView
	op.must(cli.ExitOK, "events", "history", fix, "--json").decode(t, &h)
	if !hasEntry(h.History, state.Replay, "anonymous", "fixed the order") {
		t.Fatalf("history: want a replay by anonymous saying why, got %+v", h.History)
	}
	op.must(cli.ExitConflict, "dead", "replay", fix)
	op.must(cli.ExitUsage, "dead", "replay", fix, drop, "--payload", `{}`)
	op.must(cli.ExitUsage, "dead", "replay", fix, "--payload", `{not json`)
	op.must(cli.ExitUsage, "dead", "replay")

	// Discard with a reason; twice is a conflict.
	var act ops.ActionReply
	op.must(cli.ExitOK, "dead", "discard", drop, "-m", "duplicate order", "--json").decode(t, &act)
	if act.Done != 1 {
		t.Fatalf("dead discard: want 1 done, got %+v", act)
	}
	waitStatus(t, base, drop, "cancelled")
	op.must(cli.ExitOK, "events", "history", drop, "--json").decode(t, &h)
	if !hasEntry(h.History, state.Discard, "anonymous", "duplicate order") {
		t.Fatalf("history: want a discard by anonymous saying why, got %+v", h.History)
	}
	op.must(cli.ExitConflict, "dead", "discard", drop, "-m", "again")
	op.must(cli.ExitUsage, "dead", "discard", drop) // no reason

	// A person did it by hand: resolve as done with a result.
	op.must(cli.ExitOK, "review", "resolve", hand, "--outcome", "done", "--result", `{"ref":"by-phone"}`, "-m", "booked by phone", "--json").decode(t, &act)
	waitStatus(t, base, hand, "done")
	op.must(cli.ExitOK, "events", "history", hand, "--json").decode(t, &h)
	if !hasEntry(h.History, state.Resolve, "anonymous", "booked by phone") {
		t.Fatalf("history: want a resolve by anonymous saying why, got %+v", h.History)
	}
	op.must(cli.ExitConflict, "review", "resolve", hand, "--outcome", "discard", "-m", "again")
	if r := op.must(cli.ExitUsage, "review", "resolve", hand, "--outcome", "discard"); !strings.Contains(r.stderr, "--message") {
		t.Fatalf("review resolve --outcome discard without a reason: want the flag named, got\n%s", r)
	}
	op.must(cli.ExitUsage, "review", "resolve", hand, "--outcome", "maybe")

	op.must(cli.ExitOK, "dead", "ls", "--json").decode(t, &list)
	if list.Total != 0 {
		t.Fatalf("dead ls after acting on all three: want none, got %+v", list)
	}
	var rl ops.ListReply
	op.must(cli.ExitOK, "review", "ls", "--json").decode(t, &rl)
	if rl.Total != 0 || rl.Items == nil {
		t.Fatalf("review ls: want an empty list, got %+v", rl)
	}

}

// hasEntry reports whether history has an action by actor whose detail
// starts with detail (the service may add to it, e.g. "payload edited").
func hasEntry(history []state.Entry, action state.ActionName, actor, detail string) bool {
	for _, e := range history {
		if e.Action == action && e.Actor == actor && strings.HasPrefix(e.Detail, detail) {
			return true
		}
	}
	return false
}

// breakers ls shows the breaker a failing target opened, and breakers
// close closes it for every replica: the waiting event is then delivered.
func TestCLIBreakers(t *testing.T) {
	t.Parallel()
	p, target := servicetest.Provider(t, provider.Faults{Down: true}, provider.WithIdempotent())
	yaml := strings.Replace(testConfig(t.TempDir(), target.URL, ""),
		`"*": {concurrency: 8, breaker: {failures: 100}}`, `"*": {concurrency: 8, breaker: {failures: 2, cooldown: 10m}}`, 1)
	yaml = strings.Replace(yaml, "attempts: 3,", "attempts: 20,", 1)
	tz := start(t, yaml)
	base := "http://" + tz.HTTPAddr()
	op := newOperator(t, tz.NATSURL())

	_, v := post(t, base, "brk-1", `{"account":"acme","kind":"order.create","payload":{"order_id":"brk-1"}}`)
	var br ops.BreakersReply
	natstest.Eventually(t, 20*time.Second, func() bool {
		op.must(cli.ExitOK, "breakers", "ls", "--account", "acme", "--json").decode(t, &br)
		return len(br.Items) == 1 && br.Items[0].State == "open"
	}, "breakers ls: want acme/erp open after 2 failures, got %+v", &br)
	if it := br.Items[0]; it.Account != "acme" || it.Target != "erp" || it.OpenUntil == nil {
		t.Fatalf("breakers ls: want acme/erp open until a time, got %+v", it)
	}
	r := op.must(cli.ExitOK, "breakers", "ls")
	if !strings.Contains(r.stdout, "ACCOUNT") || !strings.Contains(r.stdout, "open") {
		t.Fatalf("breakers ls: want a table with the open breaker, got\n%s", r)
	}

	p.SetDown(false)
	var closed ops.BreakerItem
	op.must(cli.ExitOK, "breakers", "close", "acme", "erp", "-m", "the target is back", "--json").decode(t, &closed)
	if closed.Account != "acme" || closed.Target != "erp" || closed.State != "closed" || !strings.Contains(closed.Reason, "anonymous") {
		t.Fatalf("breakers close: want acme/erp closed, saying by anonymous, got %+v", closed)
	}
	waitStatus(t, base, v.ID, "done")
	op.must(cli.ExitNotFound, "breakers", "close", "nosuch", "erp", "-m", "x")
	op.must(cli.ExitUsage, "breakers", "close", "bad.account", "erp", "-m", "x")
}

// dead replay --all replays every match as a job and follows it with a
// progress bar on a terminal until done: every event ends done, each
// effect applied once, and none is left dead.
func TestCLIBulkReplay(t *testing.T) {
	t.Parallel()
	const n = 300
	p, target := servicetest.Provider(t, provider.Faults{Status: http.StatusUnprocessableEntity}, provider.WithIdempotent())
	tz := start(t, testConfig(t.TempDir(), target.URL, ""))
	base := "http://" + tz.HTTPAddr()
	op := newOperator(t, tz.NATSURL())

	ids := submitN(t, base, "bulk", n)
	_, other := post(t, base, "other-kind", `{"account":"globex","kind":"order.create","payload":{"order_id":"other-kind"}}`)
	_, other2 := post(t, base, "other-kind-2", `{"account":"globex","kind":"order.create","payload":{"order_id":"other-kind-2"}}`)
	var list ops.ListReply
	natstest.Eventually(t, 30*time.Second, func() bool {
		op.must(cli.ExitOK, "dead", "ls", "--account", "acme", "--limit", "1", "--json").decode(t, &list)
		return list.Total == n
	}, "want %d dead events of acme, got %v", n, natstest.Lazy(func() any { return list.Total }))
	waitStatus(t, base, other.ID, "dead")
	waitStatus(t, base, other2.ID, "dead")

	p.SetFaults(provider.Faults{})
	var out, errb bytes.Buffer
	env := &cli.Env{Stdout: &out, Stderr: &errb, StderrTTY: true, Getenv: func(k string) string { return op.env[k] }}
	args := []string{"dead", "replay", "--all", "--account", "acme", "--kind", "order.create", "--rate", "1000", "--json"}
	if code := cli.Main(&cli.Commands{}, args, env); code != cli.ExitOK {
		t.Fatalf("dead replay --all: want exit 0, got %d\nstdout:\n%s\nstderr:\n%q", code, out.String(), errb.String())
	}
	r := cliRun{args: args, stdout: out.String(), stderr: errb.String()}
	var job ops.JobReply
	r.decode(t, &job)
	if job.State != ops.JobDone || job.Total != n || job.Done != n || job.Failed != 0 || job.Filter.Account != "acme" || job.Actor != "anonymous" {
		t.Fatalf("replay job: want done with %d of %d replayed by anonymous, got %+v", n, n, job)
	}
	if !strings.Contains(r.stderr, "\r[") || !strings.Contains(r.stderr, fmt.Sprintf("] %d/%d 100%%", n, n)) || !strings.HasSuffix(r.stderr, "\x1b[K\n") {
		t.Fatalf("progress: want a bar redrawn on stderr ending at %d/%d 100%%, got %q", n, n, r.stderr)
	}
	for i, id := range ids {
		waitStatus(t, base, id, "done")
		if e := p.Effects(id); e != 1 {
			t.Fatalf("bulk-%d: want its effect applied once, got %d", i, e)
		}
	}
	if d := p.DuplicateEffects(); len(d) != 0 {
		t.Fatalf("want no effect applied twice, got %v", d)
	}
	op.must(cli.ExitOK, "dead", "ls", "--account", "acme", "--json").decode(t, &list)
	if list.Total != 0 {
		t.Fatalf("dead ls after the job: want none of acme, got %d", list.Total)
	}
	if s := get(t, base+"/v1/events/"+other.ID).Status; s != "dead" {
		t.Fatalf("an event outside the filter: want it still dead, got %s", s)
	}

	// The job can be read again; an unknown job is 3, an id no job has 2.
	var again ops.JobReply
	op.must(cli.ExitOK, "dead", "job", job.JobID, "--no-wait", "--json").decode(t, &again)
	if again.JobID != job.JobID || again.State != ops.JobDone || again.Done != n {
		t.Fatalf("dead job --no-wait: want the finished job, got %+v", again)
	}
	op.must(cli.ExitNotFound, "dead", "job", "job_0000000000000001")
	op.must(cli.ExitUsage, "dead", "job", "nosuchjob") // not a job's id

	// A job started by mistake is cancelled, with a reason (this one
	// replays the first of globex's two at once, the second in 1,000 s);
	// a finished one is a conflict (4), --cancel without -m a usage error
	// (2).
	var slow ops.ReplayReply
	op.must(cli.ExitOK, "dead", "replay", "--all", "--account", "globex", "--rate", "0.001", "--no-wait", "--json").decode(t, &slow)
	op.must(cli.ExitUsage, "dead", "job", slow.JobID, "--cancel")
	var cancelled ops.JobReply
	op.must(cli.ExitOK, "dead", "job", slow.JobID, "--cancel", "-m", "wrong account", "--json").decode(t, &cancelled)
	if cancelled.State != ops.JobCancelled || cancelled.CancelReason != "wrong account" || cancelled.CancelledBy != "anonymous" {
		t.Fatalf("dead job --cancel: want the job cancelled for \"wrong account\" by anonymous, got %+v", cancelled)
	}
	op.must(cli.ExitConflict, "dead", "job", job.JobID, "--cancel", "-m", "too late")
}

// review ls lists the events whose callback never came; review resolve
// requeues one to the primary (it is sent again and waits for its
// callback) and resolves the other as done with the operator's result.
func TestCLIReview(t *testing.T) {
	t.Parallel()
	p, targetURL := idempotentTarget(t)
	yaml := testConfig(t.TempDir(), targetURL,
		"  credit.check: {target: erp, completion: callback, callback_sla: 1s, attempts: 3, backoff: {initial: 1s, jitter: 0}}\n")
	yaml = strings.Replace(yaml, "timeout: 5s}", `timeout: 5s, callback_secret: "whsec_dGVuYXotY2xpLXRlc3Qtd2ViaG9vay1zZWNyZXQtMzI="}`, 1)
	tz := start(t, yaml)
	base := "http://" + tz.HTTPAddr()
	op := newOperator(t, tz.NATSURL())

	_, requeue := post(t, base, "rev-1", `{"account":"acme","kind":"credit.check","payload":{"applicant":"rev-1"}}`)
	_, byHand := post(t, base, "rev-2", `{"account":"acme","kind":"credit.check","payload":{"applicant":"rev-2"}}`)
	waitStatus(t, base, requeue.ID, "manual_review")
	waitStatus(t, base, byHand.ID, "manual_review")
	var list ops.ListReply
	natstest.Eventually(t, 10*time.Second, func() bool {
		op.must(cli.ExitOK, "review", "ls", "--kind", "credit.check", "--json").decode(t, &list)
		return list.Total == 2
	}, "review ls: want the 2 events whose callback never came, got %+v", &list)
	for _, it := range list.Items {
		if (it.ID != requeue.ID && it.ID != byHand.ID) || it.Status != state.ManualReview || it.Account != "acme" {
			t.Fatalf("review ls: want %s and %s in manual_review for acme, got %+v", requeue.ID, byHand.ID, it)
		}
	}
	r := op.must(cli.ExitOK, "review", "ls")
	if !strings.Contains(r.stdout, requeue.ID) || !strings.Contains(r.stdout, "manual_review") {
		t.Fatalf("review ls: want the events in the table, got\n%s", r)
	}
	op.must(cli.ExitOK, "dead", "ls", "--kind", "credit.check", "--json").decode(t, &list)
	if list.Total != 0 {
		t.Fatalf("dead ls: want no manual reviews among dead letters, got %+v", list)
	}

	var act ops.ActionReply
	op.must(cli.ExitOK, "review", "resolve", requeue.ID, "--outcome", "requeue_primary", "-m", "bureau says resend", "--json").decode(t, &act)
	if act.Done != 1 {
		t.Fatalf("resolve requeue_primary: want 1 done, got %+v", act)
	}
	natstest.Eventually(t, 10*time.Second, func() bool { return len(p.CallsFor(requeue.ID)) == 2 }, "the requeued event to be sent to the primary again")
	waitStatus(t, base, requeue.ID, "awaiting_callback")
	var h ingest.HistoryView
	op.must(cli.ExitOK, "events", "history", requeue.ID, "--json").decode(t, &h)
	var requeued bool
	for _, e := range h.History {
		requeued = requeued || (e.Actor == "anonymous" && strings.HasPrefix(e.Detail, "bureau says resend") &&
			e.From == state.ManualReview && e.To == state.Pending)
	}
	if !requeued {
		t.Fatalf("history: want the requeue by anonymous from manual_review to pending, got %+v", h.History)
	}

	op.must(cli.ExitOK, "review", "resolve", byHand.ID, "--outcome", "done", "--result", `{"score":710}`, "-m", "score by phone", "--json").decode(t, &act)
	waitStatus(t, base, byHand.ID, "done")
	var ev ingest.View
	op.must(cli.ExitOK, "events", "get", byHand.ID, "--json").decode(t, &ev)
	var result struct{ Score int }
	if err := json.Unmarshal(ev.Result, &result); err != nil || result.Score != 710 {
		t.Fatalf("resolved event: want the operator's result {score 710}, got %s (%v)", ev.Result, err)
	}
	op.must(cli.ExitOK, "events", "history", byHand.ID, "--json").decode(t, &h)
	if !hasEntry(h.History, state.Resolve, "anonymous", "score by phone") {
		t.Fatalf("history: want the resolve by anonymous, got %+v", h.History)
	}
	if len(p.CallsFor(byHand.ID)) != 1 {
		t.Fatalf("resolved by hand: want no second call to the target, got %d", len(p.CallsFor(byHand.ID)))
	}
}

// An empty --result is a mistake (a variable that expanded to nothing),
// not a resolve with no result: it is a usage error (2) naming the flag,
// refused before any connection, as an empty --payload of dead replay is.
func TestCLIReviewResolveEmptyResult(t *testing.T) {
	t.Parallel()
	op := newOperator(t, "nats://127.0.0.1:1") // nothing listens: a refusal must come first
	const id = "ev_01234567890123456789012345"
	for _, args := range [][]string{{"--result", ""}, {"--result="}} {
		r := op.must(cli.ExitUsage, append([]string{"review", "resolve", id, "--outcome", "done"}, args...)...)
		if !strings.Contains(r.stderr, "--result") {
			t.Errorf("review resolve %v: want the flag named, got\n%s", args, r)
		}
	}
}
