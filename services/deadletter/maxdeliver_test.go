package deadletter_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/dead"
	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/services/deadletter"
	"github.com/tenaz/tenaz/services/dispatcher"
	"github.com/tenaz/tenaz/services/ingest"
)

// A message that kills its worker every time (the worker dies after the
// claim, before any outcome) is given up by the dispatcher at its 11th
// delivery (the server gives nothing up: the dispatcher counts the
// deliveries of what it reads from EVENTS itself): the event is dead with class "crash", DEAD keeps its
// payload, the dead advisory goes out, nothing stays running, and the
// message leaves EVENTS.
func TestPoisonMessageEndsDead(t *testing.T) {
	t.Parallel()
	e := servicetest.Start(t, servicetest.Options{})
	_, target := servicetest.Provider(t, provider.Faults{})
	cfg := servicetest.Config(t, `
streams: {ack_wait: 100ms, trim_after: 100ms}
targets: {erp: {url: "`+target.URL+`/x", timeout: 2s}}
kinds: {order.create: {target: erp, attempts: 50}}
`, nil)
	conn := func() *nats.Conn { nc, _ := e.Srv.Conn(t); return nc }
	ing, _ := ingest.New(ingest.Options{Conn: conn(), Config: cfg})
	servicetest.Run(t, context.Background(), ing)
	poison := event.ID("acme", "poison")
	disp, _ := dispatcher.New(dispatcher.Options{Conn: conn(), Config: cfg, Hooks: &dispatcher.Hooks{
		AfterClaim: func(id string, _ int) error {
			if id == poison {
				return errors.New("worker died")
			}
			return nil
		},
	}})
	servicetest.Run(t, context.Background(), disp)
	dl, _ := deadletter.New(deadletter.Options{Conn: conn(), Config: cfg})
	servicetest.Run(t, context.Background(), dl)

	nc, js := e.NC, e.JS
	advisories := make(chan dead.Advisory, 4)
	sub, _ := nc.Subscribe("tenaz.advisory.dead.acme.order.create", func(m *nats.Msg) {
		var a dead.Advisory
		_ = json.Unmarshal(m.Data, &a)
		advisories <- a
	})
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	e.Submit("acme", "order.create", []string{"poison", "fine"}, func(k string) string { return `{"order_id":"` + k + `"}` })
	r := e.WaitStatus(poison, state.Dead, 30*time.Second)
	if r.LastError == nil || r.LastError.Class != "crash" {
		t.Fatalf("want last_error class crash, got %+v", r.LastError)
	}
	fine, _, err := e.St.Get(context.Background(), "", event.ID("acme", "fine"))
	if err != nil || fine.Status != state.Done {
		t.Fatalf("the healthy event must be done, got %s (%v)", fine.Status, err)
	}
	s, _ := js.Stream(context.Background(), "DEAD")
	m, err := s.GetLastMsgForSubject(context.Background(), "tenaz.dead.acme.order.create")
	if err != nil {
		t.Fatalf("want a DEAD entry: %v", err)
	}
	var en dead.Entry
	if err := json.Unmarshal(m.Data, &en); err != nil || en.Reason != dead.ReasonCrash || en.Event == nil || string(en.Event.Payload) != `{"order_id":"poison"}` {
		t.Fatalf("want a crash DEAD entry with the payload, got %+v (%v)", en, err)
	}
	select {
	case a := <-advisories:
		if a.ID != poison || a.Class != "crash" {
			t.Fatalf("dead advisory: want the poison event with class crash, got %+v", a)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no dead advisory")
	}
	natstest.Eventually(t, servicetest.WaitFor, func() bool { return e.SubjectMsgs(e.Subj.EventsStream("acme"), e.Subj.EventsOf("acme")) == 0 },
		"the poison message to leave EVENTS")
}

// A consumer that lets the server give messages up (one made by an older
// version, during a rolling upgrade) is still covered: the server's
// max-deliveries advisory brings the event to DEAD, and its message is
// removed from EVENTS.
func TestMaxDeliveriesAdvisoryEndsDead(t *testing.T) {
	t.Parallel()
	e := servicetest.Start(t, servicetest.Options{})
	cfg := servicetest.Config(t, `
targets: {erp: {url: "http://127.0.0.1:1/x", timeout: 2s}}
kinds: {order.create: {target: erp}}
`, nil)
	conn := func() *nats.Conn { nc, _ := e.Srv.Conn(t); return nc }
	ing, _ := ingest.New(ingest.Options{Conn: conn(), Config: cfg})
	servicetest.Run(t, context.Background(), ing)
	dl, _ := deadletter.New(deadletter.Options{Conn: conn(), Config: cfg})
	servicetest.Run(t, context.Background(), dl)

	ids := e.Submit("legacy", "order.create", []string{"k"}, func(k string) string { return `{"order_id":"` + k + `"}` })
	stream := e.Subj.EventsStream("legacy")
	natstest.Eventually(t, servicetest.WaitFor, func() bool { return e.SubjectMsgs(stream, e.Subj.EventsOf("legacy")) == 1 }, "the event enqueued")
	cons, err := e.JS.CreateOrUpdateConsumer(e.Ctx(), stream, jetstream.ConsumerConfig{Durable: "legacy",
		FilterSubject: e.Subj.EventsOf("legacy"), AckPolicy: jetstream.AckExplicitPolicy, AckWait: 200 * time.Millisecond, MaxDeliver: 2})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // delivered twice, never acked: the server gives it up
		b, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for range b.Messages() {
			got++
		}
		if got != 1 {
			t.Fatalf("want the event's message delivered, got %d messages (%v)", got, b.Error())
		}
	}
	// The server gives it up when it would deliver it a third time, to a
	// pull waiting for it.
	if b, err := cons.Fetch(1, jetstream.FetchMaxWait(time.Second)); err == nil {
		for m := range b.Messages() {
			t.Fatalf("delivered beyond max_deliver: %s", m.Subject())
		}
	}
	r := e.WaitStatus(ids[0], state.Dead, 30*time.Second)
	if r.LastError == nil || r.LastError.Class != "crash" {
		t.Fatalf("want last_error class crash, got %+v", r.LastError)
	}
	natstest.Eventually(t, servicetest.WaitFor, func() bool { return e.SubjectMsgs(stream, e.Subj.EventsOf("legacy")) == 0 },
		"the given-up message to leave EVENTS")
}
