package dispatcher_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/effect"
	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/outcome"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/services/dispatcher"
)

// handlerYAML routes reward.credit to the Go handler "reward" (three
// attempts, one second apart) next to an ordinary HTTP kind.
// streams.ack_wait is 1s so that a message abandoned by a simulated crash
// comes back fast.
const handlerYAML = `
streams: {ack_wait: 1s}
accounts:
  "*": {concurrency: 8}
targets:
  erp: {url: "${TARGET}/api/{{.Kind}}", timeout: 5s}
kinds:
  order.create: {target: erp, entity: order_id}
  reward.credit: {handler: reward, entity: order_id, attempts: 3, backoff: {initial: 1s, multiplier: 1, jitter: 0}}
`

// handlerDispatcher starts a dispatcher with Go handlers, as h.dispatcher
// does for HTTP targets.
func (h *harness) handlerDispatcher(instance string, handlers map[string]dispatcher.Handler, hooks *dispatcher.Hooks) *dispatcher.Service {
	h.t.Helper()
	nc, _ := h.Srv.Conn(h.t)
	d, err := dispatcher.New(dispatcher.Options{Conn: nc, Config: h.cfg, Instance: instance, Hooks: hooks, Handlers: handlers,
		HTTPClient: &http.Client{Transport: &http.Transport{}}})
	if err != nil {
		h.t.Fatalf("dispatcher.New: %v", err)
	}
	servicetest.Run(h.t, h.Ctx(), d)
	return d
}

// submitReward publishes one reward.credit submission (account acme,
// Idempotency-Key key) and returns the event's id once INTAKE stored it.
func (h *harness) submitReward(key, payload string) string {
	h.t.Helper()
	return h.Submit("acme", "reward.credit", []string{key}, func(string) string { return payload })[0]
}

// calls records what a test handler was handed.
type calls struct {
	mu sync.Mutex
	ds []dispatcher.Delivery
}

func (c *calls) add(d dispatcher.Delivery) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ds = append(c.ds, d)
	return len(c.ds)
}

func (c *calls) all() []dispatcher.Delivery {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]dispatcher.Delivery(nil), c.ds...)
}

// want checks the handler saw n deliveries of event id, attempts 1..n.
func (c *calls) want(t *testing.T, id string, n int) []dispatcher.Delivery {
	t.Helper()
	ds := c.all()
	if len(ds) != n {
		t.Fatalf("handler: want %d deliveries, got %d", n, len(ds))
	}
	for i, d := range ds {
		if d.Event.ID != id || d.Attempt != i+1 || d.Stage != state.StagePrimary {
			t.Fatalf("delivery %d: want event %s attempt %d stage primary, got %s attempt %d stage %q", i, id, i+1, d.Event.ID, d.Attempt, d.Stage)
		}
	}
	return ds
}

// A kind routed to a registered handler reaches done; the handler is
// handed the envelope and the attempt, and its Result is kept.
func TestHandlerDelivers(t *testing.T) {
	t.Parallel()
	h := setup(t, handlerYAML, provider.Faults{})
	var seen calls
	h.handlerDispatcher("d1", map[string]dispatcher.Handler{
		"reward": dispatcher.HandlerFunc(func(ctx context.Context, d dispatcher.Delivery) (dispatcher.Result, error) {
			seen.add(d)
			return dispatcher.Result{Reference: "wal_1", Body: json.RawMessage(`{"credited":100}`)}, nil
		}),
	}, nil)
	id := h.submitReward("rw-1", `{"order_id":"o-1","customer":"c-7","points":100}`)
	r := h.waitAll([]string{id}, state.Done, servicetest.WaitFor)[id]

	d := seen.want(t, id, 1)[0]
	if d.Event.Account != "acme" || d.Event.Kind != "reward.credit" || d.Event.IdempotencyKey != "rw-1" ||
		d.Event.EntityID != "o-1" || string(d.Event.Payload) != `{"order_id":"o-1","customer":"c-7","points":100}` {
		t.Fatalf("handler: want the event's envelope, got %+v", d.Event)
	}
	wantHistory(t, r, state.Accept, state.Claim, state.Succeed)
	if string(r.Result) != `{"credited":100}` || r.Attempts != 1 || r.Reference != "wal_1" {
		t.Fatalf("want the handler's result and reference after 1 attempt, got result %s reference %q attempts %d", r.Result, r.Reference, r.Attempts)
	}
	if n := h.prov.CallCount(); n != 0 {
		t.Fatalf("a handler kind must make no HTTP call, the provider got %d", n)
	}
}

// A handler's call is bounded by its stage's timeout, as a target's is
// by the target's: a handler that does not return before it is a timeout,
// its context cancelled.
func TestHandlerBoundedByItsTimeout(t *testing.T) {
	t.Parallel()
	h := setup(t, strings.Replace(handlerYAML, "reward.credit: {handler: reward,", "reward.credit: {handler: reward, timeout: 1s,", 1), provider.Faults{})
	cause := make(chan error, 3)
	h.handlerDispatcher("d1", map[string]dispatcher.Handler{
		"reward": dispatcher.HandlerFunc(func(ctx context.Context, d dispatcher.Delivery) (dispatcher.Result, error) {
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return dispatcher.Result{}, ctx.Err()
		}),
	}, nil)
	id := h.submitReward("slow-1", `{"order_id":"o-9","customer":"c-7","points":1}`)
	r := h.waitAll([]string{id}, state.Dead, 20*time.Second)[id]
	if err := <-cause; !errors.Is(err, outcome.ErrTimeout) || r.LastError == nil || r.LastError.Class != string(outcome.ClassTimeout) {
		t.Fatalf("want each call cut at its 1s timeout and the event dead on a timeout, got cause %v, last error %+v", err, r.LastError)
	}
}

// The handler's error is the outcome, as a target's answer is.
func TestHandlerOutcomes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		fail    func(attempt int) error // the error of attempt n (nil: success)
		want    state.State
		history []state.ActionName
		check   func(t *testing.T, r state.Record, ds []dispatcher.Delivery)
	}{
		{
			name: "permanent is dead with its message",
			fail: func(int) error { return outcome.Permanent(errors.New("customer c-7 unknown")) },
			want: state.Dead, history: []state.ActionName{state.Accept, state.Claim, state.Fail},
			check: func(t *testing.T, r state.Record, _ []dispatcher.Delivery) {
				if e := r.LastError; e == nil || e.Class != string(outcome.ClassPermanent) || e.Message != "customer c-7 unknown" {
					t.Fatalf("want last error {permanent, customer c-7 unknown}, got %+v", e)
				}
			},
		},
		{
			name: "plain error is retried, then done",
			fail: func(n int) error {
				if n == 1 {
					return errors.New("wallet unavailable")
				}
				return nil
			},
			want: state.Done, history: []state.ActionName{state.Accept, state.Claim, state.Retry, state.Claim, state.Succeed},
			check: func(t *testing.T, r state.Record, _ []dispatcher.Delivery) {
				if e := r.LastError; e == nil || e.Class != string(outcome.ClassTransient) || e.Message != "wallet unavailable" || r.History[2].Detail != e.Message {
					t.Fatalf("retry: want the error {transient, wallet unavailable} in the record and its history, got %+v, %q", e, r.History[2].Detail)
				}
			},
		},
		{
			name: "RetryAfter waits at least that long",
			fail: func(n int) error {
				if n == 1 {
					return outcome.RetryAfter(3*time.Second, errors.New("wallet rate limited"))
				}
				return nil
			},
			want: state.Done, history: []state.ActionName{state.Accept, state.Claim, state.Retry, state.Claim, state.Succeed},
			check: func(t *testing.T, r state.Record, _ []dispatcher.Delivery) {
				retry, claim := r.History[2], r.History[3]
				if !strings.Contains(retry.Detail, "wallet rate limited") {
					t.Fatalf("retry entry: want the handler's error, got %q", retry.Detail)
				}
				// The kind's backoff is 1s: only the handler's RetryAfter makes it 3s.
				if gap := claim.At.Sub(retry.At); gap < 2500*time.Millisecond {
					t.Fatalf("want the second attempt at least ~3s after the retry was decided, got %s", gap)
				}
			},
		},
		{
			name: "panic is a transient failure",
			fail: func(n int) error {
				if n == 1 {
					panic("nil wallet")
				}
				return nil
			},
			want: state.Done, history: []state.ActionName{state.Accept, state.Claim, state.Retry, state.Claim, state.Succeed},
			check: func(t *testing.T, r state.Record, _ []dispatcher.Delivery) {
				if e := r.LastError; e == nil || e.Class != string(outcome.ClassTransient) || !strings.Contains(e.Message, "handler panicked: nil wallet") {
					t.Fatalf("retry: want a transient error naming the panic, got %+v", e)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := setup(t, handlerYAML, provider.Faults{})
			var seen calls
			d := h.handlerDispatcher("d1", map[string]dispatcher.Handler{
				"reward": dispatcher.HandlerFunc(func(ctx context.Context, d dispatcher.Delivery) (dispatcher.Result, error) {
					return dispatcher.Result{}, tc.fail(seen.add(d))
				}),
			}, nil)
			id := h.submitReward("rw-1", `{"order_id":"o-1"}`)
			r := h.waitAll([]string{id}, tc.want, 2*servicetest.WaitFor)[id]
			wantHistory(t, r, tc.history...)
			ds := seen.want(t, id, r.Attempts)
			tc.check(t, r, ds)
			if err := d.Ready(); err != nil {
				t.Fatalf("want the dispatcher still running, got %v", err)
			}
		})
	}
}

// Start refuses a config that routes a kind to a handler nobody registered
// (a nil entry counts as missing), naming the config key.
func TestStartFailsForUnregisteredHandler(t *testing.T) {
	t.Parallel()
	h := setup(t, handlerYAML, provider.Faults{})
	for _, handlers := range []map[string]dispatcher.Handler{
		nil,
		{"rewards": dispatcher.HandlerFunc(func(context.Context, dispatcher.Delivery) (dispatcher.Result, error) { return dispatcher.Result{}, nil })},
		{"reward": nil},
	} {
		nc, _ := h.Srv.Conn(t)
		d, err := dispatcher.New(dispatcher.Options{Conn: nc, Config: h.cfg, Instance: "d1", Handlers: handlers})
		if err != nil {
			t.Fatalf("dispatcher.New: %v", err)
		}
		err = d.Start(h.Ctx())
		if !errors.Is(err, dispatcher.ErrHandlerNotRegistered) || !strings.Contains(err.Error(), "kinds.reward.credit.handler") {
			t.Fatalf("handlers %v: want ErrHandlerNotRegistered naming kinds.reward.credit.handler, got %v", handlers, err)
		}
		if err := d.Stop(h.Ctx()); err != nil {
			t.Fatalf("Stop after a failed Start: %v", err)
		}
	}
}

// wallet stands in for the service that holds customers' points.
type wallet struct {
	mu      sync.Mutex
	points  map[string]int
	credits int
}

func (w *wallet) credit(customer string, points int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.points[customer] += points
	w.credits++
}

func (w *wallet) balance(customer string) (points, credits int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.points[customer], w.credits
}

// rewardHandler credits an order's points once per order, whatever runs
// the job or how often: the effect's key is the business key, not the
// event.
func rewardHandler(led *effect.Ledger, w *wallet, runs *calls) dispatcher.Handler {
	return dispatcher.HandlerFunc(func(ctx context.Context, d dispatcher.Delivery) (dispatcher.Result, error) {
		runs.add(d)
		var order struct {
			OrderID  string `json:"order_id"`
			Customer string `json:"customer"`
			Points   int    `json:"points"`
		}
		if err := json.Unmarshal(d.Event.Payload, &order); err != nil {
			return dispatcher.Result{}, outcome.Permanent(err)
		}
		out, err := led.Do(ctx, d.Event.Account, "reward:"+order.OrderID, func(ctx context.Context) ([]byte, error) {
			w.credit(order.Customer, order.Points)
			return json.Marshal(map[string]any{"customer": order.Customer, "credited": order.Points})
		})
		if err != nil {
			return dispatcher.Result{}, err // ErrInProgress: transient, retried
		}
		return dispatcher.Result{Body: out.Result}, nil
	})
}

// The seed scenario: the dispatcher "crashes" after the reward handler
// credited the points and before the outcome was stored, so the job runs
// twice; the event ends done and the wallet was credited once.
func TestRewardCreditedOnceAcrossACrash(t *testing.T) {
	t.Parallel()
	h := setup(t, handlerYAML, provider.Faults{})
	led, err := effect.Open(h.Ctx(), h.JS, effect.Options{Owner: "d1"})
	if err != nil {
		t.Fatalf("effect.Open: %v", err)
	}
	w := &wallet{points: map[string]int{}}
	var runs calls
	id := event.ID("acme", "rw-o-1")
	var mu sync.Mutex
	crashes := 0
	h.handlerDispatcher("d1", map[string]dispatcher.Handler{"reward": rewardHandler(led, w, &runs)},
		&dispatcher.Hooks{AfterCall: failOnce(id, &crashes, &mu)})
	h.submitReward("rw-o-1", `{"order_id":"o-1","customer":"c-7","points":100}`)
	r := h.waitAll([]string{id}, state.Done, servicetest.WaitFor)[id]

	wantHistory(t, r, state.Accept, state.Claim, state.Reclaim, state.Succeed)
	runs.want(t, id, 2)
	if points, credits := w.balance("c-7"); points != 100 || credits != 1 {
		t.Fatalf("want the wallet credited once with 100 points, got %d points in %d credits", points, credits)
	}
	if string(r.Result) != `{"credited":100,"customer":"c-7"}` {
		t.Fatalf("want the event's result to be the recorded effect, got %s", r.Result)
	}
	rec, err := led.Get(h.Ctx(), "acme", "reward:o-1")
	if err != nil || rec.Status != effect.StatusDone || rec.Runs != 1 {
		t.Fatalf("want the effect done in one run, got %+v, %v", rec, err)
	}
}

// The worker is idempotent towards the reward, not only the job: two
// distinct events (different idempotency keys) for one order, running on
// two dispatchers at once, credit it once.
func TestRewardCreditedOnceForTwoEvents(t *testing.T) {
	t.Parallel()
	h := setup(t, handlerYAML, provider.Faults{})
	w := &wallet{points: map[string]int{}}
	var runs calls
	for _, inst := range []string{"d1", "d2"} {
		led, err := effect.Open(h.Ctx(), h.JS, effect.Options{Owner: inst})
		if err != nil {
			t.Fatalf("effect.Open: %v", err)
		}
		h.handlerDispatcher(inst, map[string]dispatcher.Handler{"reward": rewardHandler(led, w, &runs)}, nil)
	}
	ids := []string{
		h.submitReward("checkout-o-2", `{"order_id":"o-2","customer":"c-8","points":40}`),
		h.submitReward("backfill-o-2", `{"order_id":"o-2","customer":"c-8","points":40}`),
	}
	recs := h.waitAll(ids, state.Done, 2*servicetest.WaitFor)
	if points, credits := w.balance("c-8"); points != 40 || credits != 1 {
		t.Fatalf("want the wallet credited once with 40 points, got %d points in %d credits", points, credits)
	}
	for _, id := range ids {
		if string(recs[id].Result) != `{"credited":40,"customer":"c-8"}` {
			t.Fatalf("event %s: want the recorded effect as its result, got %s", id, recs[id].Result)
		}
	}
	if n := len(runs.all()); n < 2 {
		t.Fatalf("want the handler to run for both events, ran %d times", n)
	}
}
