package dispatcher_test

import (
	"strings"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/queue"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/services/dispatcher"
)

// A provider that calls back before its 2xx reaches the dispatcher: the
// webhook completes the event while it is running (and purges a deadline
// not published yet). The run's await_callback then loses its write and
// is noted as late, and the deadline timer it published just before must
// go too: left, it would fire at callback_sla onto a done event, a write,
// two deletes and a poller's read for nothing.
func TestWebhookBeforeTheRunsOutcomeLeavesNoDeadline(t *testing.T) {
	t.Parallel()
	h := setup(t, `
streams: {ack_wait: 5s}
accounts:
  "*": {concurrency: 4, breaker: {failures: 100}}
targets:
  bureau: {url: "${TARGET}/proposals", timeout: 5s, callback_secret: "whsec_dGVuYXotdGVzdC1jYWxsYmFjay1zZWNyZXQ="}
kinds:
  order.create: {target: bureau, completion: callback, callback_sla: 1m}
`, provider.Faults{})
	q := queue.New(h.JS, h.Subj)
	webhook := func(id string, _ int) error {
		// What ingest's ApplyCallback does for a webhook that finds the
		// event running: complete it, then purge its schedule.
		if _, _, _, err := h.St.Transition(h.Ctx(), "acme", id, state.Action{Name: state.Complete, Actor: "callback:bureau", Detail: "callback msg_1 applied"}); err != nil {
			t.Errorf("complete %s: %v", id, err)
		}
		if err := q.CancelSchedule(h.Ctx(), "acme", id); err != nil {
			t.Errorf("purge %s: %v", id, err)
		}
		return nil
	}
	h.dispatcher("d1", &dispatcher.Hooks{AfterCall: webhook})
	id := h.Submit("acme", "order.create", []string{"race-1"}, orderPayload)[0]

	var rec state.Record
	natstest.Eventually(t, servicetest.WaitFor, func() bool {
		var ok bool
		if rec, ok = h.Lookup(id); !ok {
			return false
		}
		last := rec.History[len(rec.History)-1]
		return rec.Status == state.Done && last.Action == state.Note && strings.Contains(last.Detail, "late outcome ignored: await_callback")
	}, "event %s done by the webhook and the run's outcome noted as late, got %v", id, natstest.Lazy(func() any { return servicetest.Actions(rec) }))
	natstest.Eventually(t, 5*time.Second, func() bool { return len(h.scheduled(id)) == 0 },
		"no deadline left for the done event %s, got a schedule %v", id, natstest.Lazy(func() any { return h.scheduled(id).Get("Nats-Schedule") }))
}
