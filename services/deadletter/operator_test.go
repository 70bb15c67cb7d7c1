package deadletter_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/auth"
	"github.com/tenaz/tenaz/pkg/breaker"
	"github.com/tenaz/tenaz/pkg/dead"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/pkg/state"
)

// openBreaker opens account+target's breaker the way a dispatcher does
// (one failure of a breaker that opens at one, for an hour) and waits for
// the service to list it open.
func (e *env) openBreaker(account, target string) *breaker.Breaker {
	e.t.Helper()
	reg, err := breaker.New(context.Background(), e.JS, breaker.Options{Instance: "dispatcher-1"})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(reg.Stop)
	b := reg.For(account, target, breaker.Config{Failures: 1, Cooldown: time.Hour})
	p, err := b.Allow(context.Background())
	if err != nil || !p.OK {
		e.t.Fatalf("allow: %+v %v", p, err)
	}
	if err := b.Record(context.Background(), p, false); err != nil {
		e.t.Fatal(err)
	}
	var list ops.BreakersReply
	natstest.Eventually(e.t, 10*time.Second, func() bool {
		_ = e.call(ops.BreakersList, ops.BreakersRequest{Account: account}, &list)
		return len(list.Items) == 1 && list.Items[0].State == string(breaker.Open)
	}, "the open breaker to be listed (have %+v)", &list)
	return b
}

// breakerState is the listed state of account+target's breaker.
func (e *env) breakerState(account, target string) ops.BreakerItem {
	e.t.Helper()
	var list ops.BreakersReply
	if err := e.call(ops.BreakersList, ops.BreakersRequest{Account: account}, &list); err != nil {
		e.t.Fatal(err)
	}
	for _, it := range list.Items {
		if it.Target == target {
			return it
		}
	}
	e.t.Fatalf("no breaker %s/%s in %+v", account, target, list.Items)
	return ops.BreakerItem{}
}

// Every operator endpoint on NATS needs the operator credential in the
// request's Authorization header: without one, with a forged key, or with
// an API key it is refused (401, 401, 403) before it reads the body, and
// nothing changes: the dead event stays dead, the review in review, the
// breaker open.
func TestMicroEndpointsNeedTheOperatorCredential(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	deadID := e.seed(1, "acme", "order.create", dead.ReasonPermanent, "permanent", func(int) string { return `{"n":1}` })[0]
	reviewID := e.seed(1, "globex", "credit.evaluate", dead.ReasonReview, "timeout", func(int) string { return `{"n":2}` })[0]
	e.waitListed(state.Dead, url.Values{}, 1)
	e.waitListed(state.ManualReview, url.Values{}, 1)
	e.openBreaker("globex", "erp")
	before := map[string]int{deadID: len(e.Record(deadID).History), reviewID: len(e.Record(reviewID).History)}

	requests := map[string]any{
		ops.DeadList:      ops.ListRequest{},
		ops.DeadShow:      ops.ShowRequest{ID: deadID},
		ops.DeadReplay:    ops.ReplayRequest{IDs: []string{deadID}, Reason: "r"},
		ops.DeadDiscard:   ops.DiscardRequest{IDs: []string{deadID}, Reason: "r"},
		ops.DeadJob:       ops.JobRequest{JobID: "job_x"},
		ops.ReviewList:    ops.ListRequest{},
		ops.ReviewResolve: ops.ResolveRequest{ID: reviewID, Outcome: ops.OutcomeDiscard, Reason: "r"},
		ops.BreakersList:  ops.BreakersRequest{},
		ops.BreakersClose: ops.CloseBreakerRequest{Account: "globex", Target: "erp"},
	}
	for ep, req := range requests {
		for _, c := range []struct {
			name, key string
			status    int
			code      string
		}{
			{"no credential", "", http.StatusUnauthorized, "unauthorized"},
			{"a forged key", auth.KeyPrefix + strings.Repeat("A", 43), http.StatusUnauthorized, "unauthorized"},
			{"acme's API key", acmeSubmitKey, http.StatusForbidden, "forbidden"},
		} {
			err := e.callWith(c.key, ep, req, nil)
			var oe *ops.Error
			if !errors.As(err, &oe) || oe.Status != c.status || oe.Code != c.code {
				t.Errorf("%s with %s: want %d %s, got %v", ep, c.name, c.status, c.code, err)
			}
		}
	}
	if r := e.Record(deadID); r.Status != state.Dead || len(r.History) != before[deadID] {
		t.Errorf("the dead event: want it untouched, got %s with %d entries (had %d)", r.Status, len(r.History), before[deadID])
	}
	if r := e.Record(reviewID); r.Status != state.ManualReview || len(r.History) != before[reviewID] {
		t.Errorf("the review: want it untouched, got %s with %d entries (had %d)", r.Status, len(r.History), before[reviewID])
	}
	if it := e.breakerState("globex", "erp"); it.State != string(breaker.Open) {
		t.Errorf("globex's breaker: want it still open, got %+v", it)
	}
	// The operator's key passes.
	var show ops.ShowReply
	if err := e.callWith(operatorKeys["bob"], ops.DeadShow, ops.ShowRequest{ID: deadID}, &show); err != nil || show.Item.ID != deadID {
		t.Fatalf("dead.show as bob: want the entry, got %+v %v", show, err)
	}
}

// The actor an action records is the operator whose key the request
// carries, on NATS and HTTP alike: a body that names an actor ("mallory")
// is refused as malformed and changes nothing, and the same request
// without it is recorded as operator:<the key's name>.
func TestActorComesFromTheCredential(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	ids := e.seed(4, "acme", "order.create", dead.ReasonPermanent, "permanent", func(int) string { return `{"n":1}` })
	review := e.seed(1, "globex", "credit.evaluate", dead.ReasonReview, "timeout", func(int) string { return `{"n":2}` })[0]
	e.waitListed(state.Dead, url.Values{}, 4)
	e.waitListed(state.ManualReview, url.Values{}, 1)
	e.openBreaker("acme", "erp")
	e.openBreaker("globex", "erp")

	type action struct {
		name, ep string
		body     map[string]any
		id       string // the event whose history records it; "" for a breaker
		brk      string // the breaker's account
	}
	for _, a := range []action{
		{"replay", ops.DeadReplay, map[string]any{"ids": []string{ids[0]}, "reason": "fixed"}, ids[0], ""},
		{"discard", ops.DeadDiscard, map[string]any{"ids": []string{ids[1]}, "reason": "duplicate"}, ids[1], ""},
		{"resolve", ops.ReviewResolve, map[string]any{"id": review, "outcome": ops.OutcomeDone, "reason": "by phone"}, review, ""},
		{"close", ops.BreakersClose, map[string]any{"account": "acme", "target": "erp"}, "", "acme"},
	} {
		forged := map[string]any{"actor": "mallory"}
		for k, v := range a.body {
			forged[k] = v
		}
		err := e.callWith(operatorKeys["carol"], a.ep, forged, nil)
		var oe *ops.Error
		if !errors.As(err, &oe) || oe.Status != http.StatusBadRequest || oe.Code != "malformed" || !strings.Contains(oe.Message, "actor") {
			t.Errorf("%s naming the actor: want 400 malformed about the actor field, got %v", a.name, err)
		}
		if a.id != "" && !e.Record(a.id).Status.Parked() {
			t.Errorf("%s naming the actor: want the event still parked, got %s", a.name, e.Record(a.id).Status)
		}
		if a.brk != "" && e.breakerState(a.brk, "erp").State != string(breaker.Open) {
			t.Errorf("%s naming the actor: want the breaker still open", a.name)
		}
		if err := e.callWith(operatorKeys["carol"], a.ep, a.body, nil); err != nil {
			t.Fatalf("%s as carol: %v", a.name, err)
		}
		if a.id != "" {
			r := e.Record(a.id)
			if last := lastEntry(r); last.Actor != "operator:carol" || strings.Contains(fmt.Sprint(r.History), "mallory") {
				t.Errorf("%s: want it recorded as operator:carol and mallory nowhere, got %+v", a.name, r.History)
			}
		} else if it := e.breakerState(a.brk, "erp"); it.State != string(breaker.Closed) || !strings.Contains(it.By+" "+it.Reason, "operator:carol") {
			t.Errorf("%s: want the breaker closed by operator:carol, got %+v", a.name, it)
		}
	}

	// HTTP: the principal the Guard authenticated is the actor; a body
	// naming another is refused.
	if code, body := e.postWith(operatorKeys["dave"], "/v1/dead/"+ids[2]+"/replay", map[string]any{"actor": "mallory", "reason": "x"}, nil); code != http.StatusBadRequest || !strings.Contains(body, "malformed") {
		t.Errorf("HTTP replay naming the actor: want 400 malformed, got %d %s", code, body)
	}
	if code, body := e.postWith(operatorKeys["dave"], "/v1/breakers/globex/erp/close", map[string]any{"actor": "mallory"}, nil); code != http.StatusBadRequest || !strings.Contains(body, "malformed") {
		t.Errorf("HTTP close naming the actor: want 400 malformed, got %d %s", code, body)
	}
	if code, body := e.postWith(operatorKeys["dave"], "/v1/dead/"+ids[2]+"/replay", map[string]any{"reason": "x"}, nil); code != http.StatusOK {
		t.Fatalf("HTTP replay as dave: want 200, got %d %s", code, body)
	}
	var replay *state.Entry
	r := e.Record(ids[2])
	for i := range r.History {
		if r.History[i].Action == state.Replay {
			replay = &r.History[i]
		}
	}
	if replay == nil || replay.Actor != "operator:dave" {
		t.Errorf("HTTP replay: want it recorded as operator:dave, got %+v", r.History)
	}
	if code, body := e.postWith(operatorKeys["dave"], "/v1/breakers/globex/erp/close", nil, nil); code != http.StatusOK || !strings.Contains(body, "operator:dave") {
		t.Errorf("HTTP close as dave: want 200 naming operator:dave, got %d %s", code, body)
	}
}
