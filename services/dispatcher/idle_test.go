package dispatcher_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/services/dispatcher"
)

// An idle account's reader and consumer are retired (so many quiet accounts
// cost nothing), its settled messages trimmed first, and its next event
// still gets delivered: ingest is told
// and provisions the consumer again. An event that lands while no consumer
// exists is adopted by the sweep.
func TestIdleAccountRetiredAndRevived(t *testing.T) {
	t.Parallel()
	h := setup(t, yamlFor(4, `attempts: 3`), provider.Faults{})
	nc, _ := h.Srv.Conn(t)
	d, err := dispatcher.New(dispatcher.Options{Conn: nc, Config: h.cfg, Instance: "d1", IdleAfter: 500 * time.Millisecond, Relist: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(h.Ctx()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Stop(h.Ctx()) })

	consumerGone := func() bool {
		_, err := h.JS.Consumer(h.Ctx(), h.Subj.EventsStream("acme"), "acct_acme")
		return errors.Is(err, jetstream.ErrConsumerNotFound)
	}
	ids := h.Submit("acme", "order.create", []string{"i-1"}, orderPayload)
	h.waitAll(ids, state.Done, servicetest.WaitFor)
	natstest.Eventually(t, servicetest.WaitFor, consumerGone, "idle consumer to be deleted")
	natstest.Eventually(t, servicetest.WaitFor, func() bool { return len(d.Accounts()) == 0 }, "idle reader to stop")
	// Trimmed before its consumer went: the next consumer does not get it again.
	if n := h.SubjectMsgs(h.Subj.EventsStream("acme"), h.Subj.EventsOf("acme")); n != 0 {
		t.Fatalf("a retired account's settled messages: want none left in EVENTS, got %d", n)
	}

	ids = h.Submit("acme", "order.create", []string{"i-2"}, orderPayload)
	h.waitAll(ids, state.Done, servicetest.WaitFor)

	// A consumer lost without ingest hearing of it: the event waits in
	// EVENTS with no consumer until the sweep adopts the account.
	natstest.Eventually(t, servicetest.WaitFor, consumerGone, "idle consumer to be deleted again")
	if err := h.JS.DeleteConsumer(h.Ctx(), h.Subj.EventsStream("acme"), "acct_acme"); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Fatal(err)
	}
	ids = h.Submit("acme", "order.create", []string{"i-3"}, orderPayload)
	h.waitAll(ids, state.Done, servicetest.WaitFor)
	if d := h.prov.DuplicateEffects(); len(d) != 0 {
		t.Fatalf("effects applied more than once: %v", d)
	}
}
