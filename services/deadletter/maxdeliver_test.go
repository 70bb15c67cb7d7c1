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
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/services/deadletter"
	"github.com/tenaz/tenaz/services/dispatcher"
	"github.com/tenaz/tenaz/services/ingest"
)

// A message that kills its worker every time (the worker dies after the
// claim, before any outcome) is given up by the server after max_deliver;
// the max-deliveries advisory brings it to DEAD: the event is dead with
// class "crash", DEAD keeps its payload, and nothing stays running.
func TestPoisonMessageEndsDeadThroughAdvisory(t *testing.T) {
	t.Parallel()
	e := servicetest.Start(t, servicetest.Options{})
	_, target := servicetest.Provider(t, provider.Faults{})
	cfg := servicetest.Config(t, `
streams: {ack_wait: 100ms}
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
	ev, _ := js.Stream(context.Background(), e.Subj.EventsStream("acme"))
	info, _ := ev.Info(context.Background(), jetstream.WithSubjectFilter(e.Subj.EventsOf("acme")))
	if n := len(info.State.Subjects); n != 0 {
		t.Fatalf("the poison message must be gone from EVENTS, subjects left: %v", info.State.Subjects)
	}
}
