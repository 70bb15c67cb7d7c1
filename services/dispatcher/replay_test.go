package dispatcher_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/queue"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
)

// A replay with an edited payload goes with the edited payload, whichever
// message of the event claims it. A new owner reads the account's
// messages still in EVENTS (its last owner stopped, or was killed, before
// trimming them), and the dead run's message, older than the replay's,
// is the first to find the event pending.
func TestAReplayedEventGoesWithItsEditedPayload(t *testing.T) {
	t.Parallel()
	yaml := strings.Replace(yamlFor(1, "attempts: 1"), "streams: {ack_wait: 1s}", "streams: {ack_wait: 1s, trim_after: 1h}", 1)
	h := setup(t, yaml, provider.Faults{}, provider.WithIdempotent())
	h.dispatcher("d1", nil)
	ids := h.Submit("acme", "order.create", []string{"edit-1"}, func(k string) string { return `{"order_id":"` + k + `","reject":true}` })
	h.waitAll(ids, state.Dead, servicetest.WaitFor)
	h.stops[0]()

	// The operator's replay, as the deadletter service makes it: the
	// record pending with the edited payload, then its message.
	rec, rev, err := h.St.Get(h.Ctx(), "acme", ids[0])
	if err != nil {
		t.Fatal(err)
	}
	edited := []byte(`{"order_id":"edit-1","reject":false}`)
	next, _, err := state.Apply(rec, state.Action{Name: state.Replay, Actor: "operator:test", Payload: edited}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.St.Write(h.Ctx(), next, rev); err != nil {
		t.Fatal(err)
	}
	env, err := h.St.Envelope(next)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := queue.New(h.JS, h.Subj).Enqueue(h.Ctx(), env, ids[0]+"/replay/test"); err != nil {
		t.Fatal(err)
	}

	h.dispatcher("d2", nil)
	h.waitAll(ids, state.Done, servicetest.WaitFor)
	calls := h.prov.Calls()
	if len(calls) != 2 || !bytes.Equal(calls[1].Body, edited) {
		t.Fatalf("want the replay's call with the edited payload %s, got %d calls, the last with %s", edited, len(calls), calls[len(calls)-1].Body)
	}
}
