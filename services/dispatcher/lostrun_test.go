package dispatcher_test

import (
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/services/dispatcher"
)

// A dispatcher dies with an event running; the message that owns the run
// comes back while the account's breaker refuses calls (another replica
// is probing), so it is put on the event's schedule and acked. The copy
// the schedule brings back has another stream sequence: taken for a stale
// message ("another message owns the run") and dropped, it would leave
// the event running with no message at all, and its ordered lane behind
// it. So the refused redelivery gives the lost run up first (running →
// retrying at the breaker's time), and the copy claims the event like any
// retry (docs/chaos.md, bug 1).
func TestLostRunRedeliveredWhileBreakerRefuses(t *testing.T) {
	t.Parallel()
	yaml := `
streams: {ack_wait: 1s}
accounts:
  "*": {concurrency: 4, breaker: {failures: 100, cooldown: 1s}}
targets:
  erp: {url: "${TARGET}/api/{{.Kind}}", timeout: 5s}
kinds:
  order.create: {target: erp, entity: order_id, attempts: 5, backoff: {initial: 1s, multiplier: 1, jitter: 0}}
`
	h := setup(t, yaml, provider.Faults{}, provider.WithIdempotent())
	id := event.ID("acme", "lost-1")
	kv, err := h.JS.KeyValue(h.Ctx(), names.BucketBreakers)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	runs := 0
	// The run dies after its claim; just before, another replica starts
	// probing the breaker (half open, its claim good for 3s), so the
	// redelivery a second later is refused.
	crash := failOnce(id, &runs, &mu)
	h.dispatcher("d1", &dispatcher.Hooks{AfterClaim: func(got string, attempt int) error {
		if got == id && attempt == 1 {
			now := time.Now().UTC()
			b, _ := json.Marshal(map[string]any{"state": "half_open", "opened_at": now.Add(-2 * time.Second),
				"open_until": now, "failures": 100, "prober": "another-replica", "probe_until": now.Add(3 * time.Second),
				"updated_by": "another-replica", "updated_at": now, "reason": "cooldown over; probing"})
			if _, err := kv.Put(h.Ctx(), "acme.erp", b); err != nil {
				t.Errorf("breaker: %v", err)
			}
		}
		return crash(got, attempt)
	}})
	ids := h.Submit("acme", "order.create", []string{"lost-1"}, orderPayload)
	r := h.waitAll(ids, state.Done, 20*time.Second)[id]

	wantHistory(t, r, state.Accept, state.Claim, state.Recover, state.Claim, state.Succeed)
	if rec := r.History[2]; rec.From != state.Running || rec.To != state.Retrying || rec.Actor != "dispatcher/d1" {
		t.Fatalf("want the lost run given up (running → retrying by dispatcher/d1), got %+v", rec)
	}
	if n := h.effects("lost-1"); n != 1 {
		t.Fatalf("want the effect applied once, got %d", n)
	}
}
