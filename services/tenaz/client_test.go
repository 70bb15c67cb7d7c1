package tenaz_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tenaz/tenaz/pkg/client"
	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/state"
)

// clientTenaz is a secured tenaz for the client tests (operatorConfig: an
// acme key, the operator alice, NATS with a password), with a callback
// kind whose callback never comes (manual review) and a target "flaky"
// that is down (its breaker opens at the first failure).
type clientTenaz struct {
	erp, flaky *provider.Provider
	nats, http *client.Client
	nc         *nats.Conn
	base       string
}

func startClientTenaz(t *testing.T) *clientTenaz {
	t.Helper()
	c := &clientTenaz{erp: provider.New(provider.Faults{}, provider.WithIdempotent()),
		flaky: provider.New(provider.Faults{Down: true}, provider.WithIdempotent())}
	erp, flaky := httptest.NewServer(c.erp), httptest.NewServer(c.flaky)
	t.Cleanup(erp.Close)
	t.Cleanup(flaky.Close)
	t.Cleanup(func() { _ = c.erp.Close(); _ = c.flaky.Close() })
	yaml := operatorConfig(t.TempDir(), erp.URL)
	yaml = strings.Replace(yaml, "timeout: 5s}", `timeout: 5s, callback_secret: "whsec_dGVuYXotY2xpLXRlc3Qtd2ViaG9vay1zZWNyZXQtMzI="}`, 1)
	yaml = strings.Replace(yaml, "targets:\n", fmt.Sprintf("targets:\n  flaky: {url: %q, timeout: 5s}\n", flaky.URL+"/api/{{.Kind}}"), 1)
	yaml += "  credit.check: {target: erp, completion: callback, callback_sla: 1s, attempts: 3, backoff: {initial: 1s, jitter: 0}}\n" +
		"  flaky.call: {target: flaky, attempts: 50, backoff: {initial: 1s, max: 1s, jitter: 0}}\n"
	tz := start(t, yaml)
	c.base = "http://" + tz.HTTPAddr()
	nc, err := nats.Connect(tz.NATSURL(), nats.UserInfo(opsNATSUser, opsNATSPassword))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	c.nc = nc
	c.nats = client.NewNATS(nc, client.WithOperatorKey(secAliceKey))
	if c.http, err = client.NewHTTP(c.base, client.WithAPIKey(secAcmeKey), client.WithOperatorKey(secAliceKey)); err != nil {
		t.Fatal(err)
	}
	return c
}

// callCtx bounds one step of a client test.
func callCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

func order(id string, extra string) event.Submission {
	return event.Submission{Account: "acme", Kind: "order.create", Payload: json.RawMessage(`{"order_id":"` + id + `"` + extra + `}`)}
}

func mustStatus(t *testing.T, what string, v event.View, err error, want state.State) {
	t.Helper()
	if err != nil || v.Status != want {
		t.Fatalf("%s: want %s, got %+v (%v)", what, want, v, err)
	}
}

// wantCode fails unless err is an *client.Error with code and status.
func wantCode(t *testing.T, what string, err error, code client.Code, status int) {
	t.Helper()
	var ce *client.Error
	if !errors.Is(err, code) || !errors.As(err, &ce) || ce.Status != status {
		t.Fatalf("%s: want %s (%d), got %#v", what, code, status, err)
	}
}

// Every call of pkg/client against a real tenaz, over NATS and over HTTP
// alike: submit (a new event, the same again, the key with another
// payload), get, history, wait, cancel; the dead letters (list, show,
// replay with a fixed payload, discard, resolve), the review queue, the
// errors with the server's codes, and the refusals without the right key.
func TestClient(t *testing.T) {
	t.Parallel()
	c := startClientTenaz(t)
	for _, tr := range []struct {
		name string
		c    *client.Client
		// cancelActor, cancelDetail: what the history records of a cancel.
		cancelActor, cancelDetail string
	}{
		{"nats", c.nats, "operator:alice", "customer withdrew"},
		{"http", c.http, "api:operator:alice", "cancelled by caller"},
	} {
		t.Run(tr.name, func(t *testing.T) {
			t.Parallel()
			tz, p := tr.c, tr.name

			// Submit, then the same again: the same event; the key with another payload: refused.
			r, err := tz.Submit(callCtx(t, 10*time.Second), order(p+"-1", ""), client.IdempotencyKey(p+"-1"))
			if err != nil || r.Duplicate || !strings.HasPrefix(r.ID, "ev_") || r.Account != "acme" || r.IdempotencyKey != p+"-1" {
				t.Fatalf("submit: want a new acme event under key %s-1, got %+v (%v)", p, r, err)
			}
			v, err := tz.Wait(callCtx(t, 20*time.Second), r.ID)
			mustStatus(t, "wait", v, err, state.Done)
			if v.Attempts != 1 || c.erp.Effects(r.ID) != 1 {
				t.Fatalf("wait: want done after 1 attempt, its effect applied once, got %+v (%d effects)", v, c.erp.Effects(r.ID))
			}
			dup, err := tz.Submit(callCtx(t, 10*time.Second), order(p+"-1", ""), client.IdempotencyKey(p+"-1"))
			if err != nil || !dup.Duplicate || dup.ID != r.ID || dup.Status != state.Done {
				t.Fatalf("submit again: want the done event %s as a duplicate, got %+v (%v)", r.ID, dup, err)
			}
			_, err = tz.Submit(callCtx(t, 10*time.Second), order(p+"-1", `,"total":5`), client.IdempotencyKey(p+"-1"))
			wantCode(t, "the key with another payload", err, client.ErrIdempotencyKeyReused, http.StatusConflict)
			_, err = tz.Submit(callCtx(t, 10*time.Second), event.Submission{Account: "acme", Kind: "no.such", Payload: json.RawMessage(`{}`)})
			wantCode(t, "an unknown kind", err, client.ErrUnknownKind, http.StatusUnprocessableEntity)

			v, err = tz.Get(callCtx(t, 5*time.Second), r.ID)
			mustStatus(t, "get", v, err, state.Done)
			h, err := tz.History(callCtx(t, 5*time.Second), r.ID)
			if err != nil || h.ID != r.ID || strings.Join(actions(h.History), ",") != "accept,claim,succeed" {
				t.Fatalf("history: want accept,claim,succeed, got %+v (%v)", h, err)
			}
			unknown := "ev_" + strings.Repeat("0", 26)
			_, err = tz.Get(callCtx(t, 5*time.Second), unknown)
			wantCode(t, "get an unknown event", err, client.ErrNotFound, http.StatusNotFound)
			_, err = tz.History(callCtx(t, 5*time.Second), unknown)
			wantCode(t, "history of an unknown event", err, client.ErrNotFound, http.StatusNotFound)

			// Cancel a delayed event; a second cancel is refused; Wait answers at once.
			due := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
			sub := order(p+"-2", "")
			sub.NotBefore = due
			d, err := tz.Submit(callCtx(t, 10*time.Second), sub, client.IdempotencyKey(p+"-2"))
			mustStatus(t, "submit a delayed event", d.View, err, state.Scheduled)
			// Wait gives up when its ctx ends, with the last status seen.
			v, err = tz.Wait(callCtx(t, 500*time.Millisecond), d.ID)
			if !errors.Is(err, context.DeadlineExceeded) || v.Status != state.Scheduled {
				t.Fatalf("wait on an event due in an hour: want the deadline and status scheduled, got %+v (%v)", v, err)
			}
			v, err = tz.Cancel(callCtx(t, 5*time.Second), d.ID, "customer withdrew")
			mustStatus(t, "cancel", v, err, state.Cancelled)
			h, _ = tz.History(callCtx(t, 5*time.Second), d.ID)
			if last := h.History[len(h.History)-1]; last.Action != state.Cancel || last.Actor != tr.cancelActor || last.Detail != tr.cancelDetail {
				t.Fatalf("history after cancel: want {cancel %s %s}, got %+v", tr.cancelActor, tr.cancelDetail, last)
			}
			_, err = tz.Cancel(callCtx(t, 5*time.Second), d.ID, "again")
			wantCode(t, "cancel twice", err, client.ErrNotCancellable, http.StatusConflict)
			v, err = tz.Wait(callCtx(t, 5*time.Second), d.ID)
			mustStatus(t, "wait on a cancelled event", v, err, state.Cancelled)

			// Three events the target rejects: dead, listed, shown; then replayed
			// with the payload fixed, discarded, resolved by hand.
			var dead []string
			for _, n := range []string{"fix", "drop", "hand"} {
				r, err := tz.Submit(callCtx(t, 10*time.Second), order(p+"-"+n, `,"reject":true`), client.IdempotencyKey(p+"-"+n))
				if err != nil {
					t.Fatal(err)
				}
				v, err := tz.Wait(callCtx(t, 20*time.Second), r.ID)
				mustStatus(t, "wait on a rejected event", v, err, state.Dead)
				dead = append(dead, r.ID)
			}
			fix, drop, hand := dead[0], dead[1], dead[2]
			var list ops.ListReply
			natstest.Eventually(t, 10*time.Second, func() bool {
				list, err = tz.ListDead(callCtx(t, 5*time.Second), ops.ListRequest{Account: "acme", Kind: "order.create", Limit: ops.MaxLimit})
				return err == nil && len(itemIDs(list, dead...)) == 3
			}, "list dead: want %v listed, got %v", dead, natstest.Lazy(func() any { return fmt.Sprint(list, err) }))
			for _, it := range list.Items {
				if slices.Contains(dead, it.ID) && (it.Reason != "permanent" || it.HTTPStatus != http.StatusUnprocessableEntity || it.Status != state.Dead) {
					t.Fatalf("list dead: want reason permanent and HTTP 422, got %+v", it)
				}
			}
			show, err := tz.ShowDead(callCtx(t, 5*time.Second), ops.ShowRequest{ID: fix})
			if err != nil || show.Item.ID != fix || show.Event == nil || !strings.Contains(string(show.Event.Payload), `"reject":true`) || show.Record == nil {
				t.Fatalf("show dead: want %s with its payload and record, got %+v (%v)", fix, show, err)
			}
			_, err = tz.ShowDead(callCtx(t, 5*time.Second), ops.ShowRequest{ID: unknown})
			wantCode(t, "show an unknown dead letter", err, client.ErrNotFound, http.StatusNotFound)

			rep, err := tz.Replay(callCtx(t, 10*time.Second), ops.ReplayRequest{IDs: []string{fix}, Payload: json.RawMessage(`{"order_id":"` + p + `-fix"}`), Reason: "fixed the order"})
			if err != nil || rep.Replayed != 1 || rep.JobID != "" {
				t.Fatalf("replay: want 1 replayed, got %+v (%v)", rep, err)
			}
			v, err = tz.Wait(callCtx(t, 20*time.Second), fix)
			mustStatus(t, "wait on the replayed event", v, err, state.Done)
			_, err = tz.Replay(callCtx(t, 10*time.Second), ops.ReplayRequest{IDs: []string{fix}})
			wantCode(t, "replay a done event", err, client.ErrNotParked, http.StatusConflict)

			act, err := tz.Discard(callCtx(t, 10*time.Second), ops.DiscardRequest{IDs: []string{drop}, Reason: "duplicate order"})
			if err != nil || act.Done != 1 {
				t.Fatalf("discard: want 1 done, got %+v (%v)", act, err)
			}
			v, err = tz.Wait(callCtx(t, 10*time.Second), drop)
			mustStatus(t, "wait on the discarded event", v, err, state.Cancelled)

			act, err = tz.Resolve(callCtx(t, 10*time.Second), ops.ResolveRequest{ID: hand, Outcome: ops.OutcomeDone, Result: json.RawMessage(`{"ref":"by-phone"}`), Reason: "booked by phone"})
			if err != nil || act.Done != 1 {
				t.Fatalf("resolve: want 1 done, got %+v (%v)", act, err)
			}
			v, err = tz.Wait(callCtx(t, 10*time.Second), hand)
			if mustStatus(t, "wait on the resolved event", v, err, state.Done); string(v.Result) != `{"ref":"by-phone"}` {
				t.Fatalf("resolved event: want the operator's result, got %s", v.Result)
			}
			_, err = tz.Resolve(callCtx(t, 10*time.Second), ops.ResolveRequest{ID: hand, Outcome: ops.OutcomeDiscard, Reason: "again"})
			wantCode(t, "resolve a done event", err, client.ErrNotParked, http.StatusConflict)

			// The review queue: a callback that never comes.
			rv, err := tz.Submit(callCtx(t, 10*time.Second), event.Submission{Account: "acme", Kind: "credit.check", Payload: json.RawMessage(`{"applicant":"` + p + `"}`)})
			if err != nil {
				t.Fatal(err)
			}
			v, err = tz.Wait(callCtx(t, 30*time.Second), rv.ID)
			mustStatus(t, "wait on an event whose callback never comes", v, err, state.ManualReview)
			natstest.Eventually(t, 10*time.Second, func() bool {
				list, err = tz.ListReview(callCtx(t, 5*time.Second), ops.ListRequest{Kind: "credit.check"})
				return err == nil && len(itemIDs(list, rv.ID)) == 1
			}, "list review: want %s, got %v", rv.ID, natstest.Lazy(func() any { return fmt.Sprint(list, err) }))
			if act, err = tz.Resolve(callCtx(t, 10*time.Second), ops.ResolveRequest{ID: rv.ID, Outcome: ops.OutcomeDiscard, Reason: "withdrawn"}); err != nil || act.Done != 1 {
				t.Fatalf("resolve the review: want 1 done, got %+v (%v)", act, err)
			}
			v, err = tz.Wait(callCtx(t, 10*time.Second), rv.ID)
			mustStatus(t, "wait on the discarded review", v, err, state.Cancelled)
		})
	}

	// The credential decides: no operator key, an API key where an
	// operator's is needed, no key at all.
	t.Run("auth", func(t *testing.T) {
		t.Parallel()
		_, err := client.NewNATS(c.nc).ListDead(callCtx(t, 5*time.Second), ops.ListRequest{})
		wantCode(t, "NATS, no operator key", err, client.ErrUnauthorized, http.StatusUnauthorized)
		keyOnly, _ := client.NewHTTP(c.base, client.WithAPIKey(secAcmeKey))
		_, err = keyOnly.ListBreakers(callCtx(t, 5*time.Second), "")
		wantCode(t, "HTTP, an API key on an operator call", err, client.ErrForbidden, http.StatusForbidden)
		none, _ := client.NewHTTP(c.base)
		_, err = none.Get(callCtx(t, 5*time.Second), "ev_"+strings.Repeat("0", 26))
		wantCode(t, "HTTP, no key", err, client.ErrUnauthorized, http.StatusUnauthorized)
		other := client.NewNATS(c.nc, client.WithPrefix("other"))
		if _, err = other.Get(callCtx(t, 5*time.Second), "ev_"+strings.Repeat("0", 26)); !errors.Is(err, client.ErrUnavailable) || !errors.Is(err, nats.ErrNoResponders) || !strings.Contains(err.Error(), "other.api.ingest.get") {
			t.Fatalf("NATS, a prefix nothing answers: want ErrUnavailable naming the subject, got %v", err)
		}
		down, _ := client.NewHTTP("http://127.0.0.1:1")
		if _, err = down.Get(callCtx(t, 5*time.Second), "ev_x"); !errors.Is(err, client.ErrUnavailable) {
			t.Fatalf("HTTP, nothing listens: want ErrUnavailable, got %v", err)
		}
	})

	// A breaker the down target opened: listed over both transports,
	// closed over one, and the waiting event is delivered.
	t.Run("breakers", func(t *testing.T) {
		t.Parallel()
		r, err := c.http.Submit(callCtx(t, 10*time.Second), event.Submission{Account: "acme", Kind: "flaky.call", Payload: json.RawMessage(`{"n":1}`)})
		if err != nil {
			t.Fatal(err)
		}
		var br ops.BreakersReply
		natstest.Eventually(t, 20*time.Second, func() bool {
			br, err = c.nats.ListBreakers(callCtx(t, 5*time.Second), "acme")
			return err == nil && slices.ContainsFunc(br.Items, func(b ops.BreakerItem) bool { return b.Target == "flaky" && b.State == "open" })
		}, "list breakers: want acme/flaky open, got %v", natstest.Lazy(func() any { return fmt.Sprint(br, err) }))
		if br, err = c.http.ListBreakers(callCtx(t, 5*time.Second), "acme"); err != nil || !slices.ContainsFunc(br.Items, func(b ops.BreakerItem) bool { return b.Target == "flaky" && b.State == "open" }) {
			t.Fatalf("list breakers over HTTP: want acme/flaky open, got %+v (%v)", br, err)
		}
		c.flaky.SetDown(false)
		b, err := c.nats.CloseBreaker(callCtx(t, 5*time.Second), "acme", "flaky", "flaky is back")
		if err != nil || b.State != "closed" || !strings.Contains(b.Reason, "alice") {
			t.Fatalf("close breaker: want acme/flaky closed by alice, got %+v (%v)", b, err)
		}
		acts, err := c.nats.Actions(callCtx(t, 5*time.Second), ops.ActionsRequest{Account: "acme", Limit: 10})
		if err != nil || !slices.ContainsFunc(acts.Items, func(a ops.Action) bool {
			return a.Action == ops.ActionCloseBreaker && a.Target == "flaky" && a.Reason == "flaky is back"
		}) {
			t.Fatalf("actions: want the close of acme/flaky with its reason, got %+v (%v)", acts.Items, err)
		}
		v, err := c.http.Wait(callCtx(t, 20*time.Second), r.ID)
		mustStatus(t, "wait on the event behind the breaker", v, err, state.Done)
		_, err = c.http.CloseBreaker(callCtx(t, 5*time.Second), "acme", "nosuch", "no such target")
		wantCode(t, "close an unknown breaker", err, client.ErrNotFound, http.StatusNotFound)
	})

	// The operators' actions, over both transports: pause an account (its
	// event waits while another account's is delivered), list the pauses,
	// resume it (the event is delivered), retry a delayed event now, open
	// a breaker until a time, read the audit; and the refusals.
	t.Run("operator actions", func(t *testing.T) {
		t.Parallel()
		rep, err := c.nats.PauseAccount(callCtx(t, 5*time.Second), ops.PauseRequest{Account: "pz", For: "1h", Reason: "erp migration"})
		if err != nil || rep.Paused == nil || rep.Paused.Actor != "operator:alice" || rep.Paused.Until == nil {
			t.Fatalf("pause: want alice's pause for an hour, got %+v (%v)", rep, err)
		}
		held, err := c.nats.Submit(callCtx(t, 10*time.Second), event.Submission{Account: "pz", Kind: "order.create", Payload: json.RawMessage(`{"order_id":"pz-1"}`)})
		if err != nil {
			t.Fatal(err)
		}
		r, err := c.nats.Submit(callCtx(t, 10*time.Second), event.Submission{Account: "pz2", Kind: "order.create", Payload: json.RawMessage(`{"order_id":"pz2-1"}`)})
		if err != nil {
			t.Fatal(err)
		}
		v, err := c.nats.Wait(callCtx(t, 20*time.Second), r.ID)
		mustStatus(t, "wait on the other account's event", v, err, state.Done)
		v, err = c.nats.Get(callCtx(t, 5*time.Second), held.ID)
		mustStatus(t, "the paused account's event", v, err, state.Pending)
		ps, err := c.http.Pauses(callCtx(t, 5*time.Second), "")
		if err != nil || !slices.ContainsFunc(ps.Items, func(a ops.AccountReply) bool { return a.Account == "pz" && a.Paused != nil }) {
			t.Fatalf("pauses: want pz paused, got %+v (%v)", ps, err)
		}
		if rep, err = c.http.ResumeAccount(callCtx(t, 5*time.Second), "pz", "migration done"); err != nil || rep.Paused != nil {
			t.Fatalf("resume: want pz running, got %+v (%v)", rep, err)
		}
		v, err = c.nats.Wait(callCtx(t, 20*time.Second), held.ID)
		mustStatus(t, "wait on the resumed account's event", v, err, state.Done)
		_, err = c.nats.ResumeAccount(callCtx(t, 5*time.Second), "pz", "again")
		wantCode(t, "resume a running account", err, client.ErrNotPaused, http.StatusConflict)
		_, err = c.http.PauseAccount(callCtx(t, 5*time.Second), ops.PauseRequest{Account: "pz"})
		wantCode(t, "pause without a reason", err, client.ErrReasonRequired, http.StatusBadRequest)

		s := event.Submission{Account: "pz", Kind: "order.create", NotBefore: time.Now().Add(time.Hour).UTC().Format(time.RFC3339), Payload: json.RawMessage(`{"order_id":"pz-2"}`)}
		later, err := c.nats.Submit(callCtx(t, 10*time.Second), s)
		if err != nil {
			t.Fatal(err)
		}
		if e, err := c.http.RetryNow(callCtx(t, 5*time.Second), later.ID, "the customer asked"); err != nil || e.Status != state.Scheduled || e.NextRunAt == nil {
			t.Fatalf("retry now: want it scheduled now, got %+v (%v)", e, err)
		}
		v, err = c.nats.Wait(callCtx(t, 20*time.Second), later.ID)
		mustStatus(t, "wait on the event retried now", v, err, state.Done)
		_, err = c.nats.RetryNow(callCtx(t, 5*time.Second), later.ID, "again")
		wantCode(t, "retry a done event", err, client.ErrNotWaiting, http.StatusConflict)
		_, err = c.http.CancelWait(callCtx(t, 5*time.Second), later.ID, "no")
		wantCode(t, "cancel the wait of a done event", err, client.ErrNotWaiting, http.StatusConflict)
		_, err = c.nats.CancelWait(callCtx(t, 5*time.Second), "ev_"+strings.Repeat("0", 26), "no")
		wantCode(t, "cancel the wait of an unknown event", err, client.ErrNotFound, http.StatusNotFound)

		until := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
		b, err := c.http.OpenBreaker(callCtx(t, 5*time.Second), ops.OpenBreakerRequest{Account: "pz", Target: "erp", Until: &until, Reason: "erp maintenance"})
		if err != nil || b.State != "open" || b.OpenUntil == nil || !b.OpenUntil.Equal(until) || !strings.Contains(b.Reason, "erp maintenance") {
			t.Fatalf("open breaker: want pz/erp open until %v with the reason, got %+v (%v)", until, b, err)
		}
		if b, err = c.http.CloseBreaker(callCtx(t, 5*time.Second), "pz", "erp", "maintenance over"); err != nil || b.State != "closed" {
			t.Fatalf("close breaker: want pz/erp closed, got %+v (%v)", b, err)
		}
		for _, tz := range []*client.Client{c.nats, c.http} {
			acts, err := tz.Actions(callCtx(t, 5*time.Second), ops.ActionsRequest{Account: "pz", Limit: 10})
			var names []string
			for _, a := range acts.Items {
				names = append(names, a.Action)
			}
			if want := []string{ops.ActionCloseBreaker, ops.ActionOpenBreaker, ops.ActionResume, ops.ActionPause}; err != nil || !slices.Equal(names, want) {
				t.Fatalf("actions: want %v (newest first), got %v (%v)", want, names, err)
			}
			if r := acts.Items[0].Reason; r != "maintenance over" {
				t.Fatalf("actions: want the close's reason %q (sent over HTTP), got %q", "maintenance over", r)
			}
		}
	})

	// Over NATS, Wait reads the event when its record changes (a watch),
	// not on a timer: it reads it about once per change, where polling
	// from 100ms up to 2s would read it 9 times in the 8s it waits.
	t.Run("wait watches", func(t *testing.T) {
		t.Parallel()
		s := order("watch-1", "")
		s.NotBefore = time.Now().Add(8 * time.Second).UTC().Format(time.RFC3339)
		r, err := c.nats.Submit(callCtx(t, 10*time.Second), s)
		if err != nil {
			t.Fatal(err)
		}
		var gets atomic.Int32 // reads of this event (other subtests read theirs)
		sub, err := c.nc.Subscribe("tenaz.api.ingest.get", func(m *nats.Msg) {
			if string(m.Data) == r.ID {
				gets.Add(1)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
		if err := c.nc.Flush(); err != nil {
			t.Fatal(err)
		}
		v, err := c.nats.Wait(callCtx(t, 30*time.Second), r.ID)
		mustStatus(t, "wait on a delayed event", v, err, state.Done)
		h, err := c.nats.History(callCtx(t, 5*time.Second), r.ID)
		if err != nil {
			t.Fatal(err)
		}
		// One read at the start, up to two for the watch's first value and
		// its end-of-initial-values marker, one per change.
		if n := int(gets.Load()); n > len(h.History)+3 {
			t.Fatalf("wait: want about one read per change of the record (%d changes), got %d reads", len(h.History), n)
		}
	})

	// Replay by filter is a background job, read over both transports.
	t.Run("job", func(t *testing.T) {
		t.Parallel()
		var ids []string
		for i := range 3 {
			sub := event.Submission{Account: "bulk", Kind: "order.create", Payload: json.RawMessage(fmt.Sprintf(`{"order_id":"b-%d","reject":true}`, i))}
			r, err := c.nats.Submit(callCtx(t, 10*time.Second), sub)
			if err != nil {
				t.Fatal(err)
			}
			v, err := c.nats.Wait(callCtx(t, 20*time.Second), r.ID)
			mustStatus(t, "wait on a rejected event", v, err, state.Dead)
			ids = append(ids, r.ID)
		}
		var list ops.ListReply
		natstest.Eventually(t, 10*time.Second, func() bool {
			list, _ = c.http.ListDead(callCtx(t, 5*time.Second), ops.ListRequest{Account: "bulk"})
			return list.Total == 3
		}, "want the 3 dead events of bulk listed, got %v", &list)
		rep, err := c.http.Replay(callCtx(t, 10*time.Second), ops.ReplayRequest{Filter: &ops.ListRequest{Account: "bulk"}, RatePerSecond: 100, Reason: "bulk"})
		if err != nil || rep.JobID == "" {
			t.Fatalf("replay by filter: want a job, got %+v (%v)", rep, err)
		}
		var j ops.JobReply
		natstest.Eventually(t, 20*time.Second, func() bool {
			j, err = c.http.ReplayJob(callCtx(t, 5*time.Second), rep.JobID)
			return err == nil && j.State != ops.JobRunning
		}, "the job to end, got %v", natstest.Lazy(func() any { return fmt.Sprint(j, err) }))
		if j.State != ops.JobDone || j.Total != 3 || j.Done != 3 || j.Actor != "operator:alice" {
			t.Fatalf("job: want done with 3 of 3 replayed by operator:alice, got %+v", j)
		}
		for _, id := range ids {
			if h, err := c.nats.History(callCtx(t, 5*time.Second), id); err != nil || !hasEntry(h.History, state.Replay, "operator:alice", "bulk") {
				t.Fatalf("history of %s: want the job's replay by operator:alice, got %+v (%v)", id, h.History, err)
			}
		}
		if again, err := c.nats.ReplayJob(callCtx(t, 5*time.Second), rep.JobID); err != nil || again.JobID != j.JobID || again.Done != 3 {
			t.Fatalf("the job over NATS: want %+v, got %+v (%v)", j, again, err)
		}
		_, err = c.nats.ReplayJob(callCtx(t, 5*time.Second), "job_0000000000000001")
		wantCode(t, "an unknown job", err, client.ErrNotFound, http.StatusNotFound)
	})
}

func actions(h []state.Entry) []string {
	var a []string
	for _, e := range h {
		a = append(a, string(e.Action))
	}
	return a
}

// itemIDs is the ids of list among want.
func itemIDs(list ops.ListReply, want ...string) []string {
	var got []string
	for _, it := range list.Items {
		if slices.Contains(want, it.ID) {
			got = append(got, it.ID)
		}
	}
	return got
}
