package deadletter_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/dead"
	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/store"
	"github.com/tenaz/tenaz/services/deadletter"
	"github.com/tenaz/tenaz/services/dispatcher"
	"github.com/tenaz/tenaz/services/ingest"
)

type component interface {
	Start(context.Context) error
	Stop(context.Context) error
}

func run(t *testing.T, c component) {
	t.Helper()
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Stop(ctx)
	})
}

// A message that kills its worker every time (the worker dies after the
// claim, before any outcome) is given up by the server after max_deliver;
// the max-deliveries advisory brings it to DEAD: the event is dead with
// class "crash", DEAD keeps its payload, and nothing stays running.
func TestPoisonMessageEndsDeadThroughAdvisory(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	p := provider.New(provider.Faults{})
	target := httptest.NewServer(p)
	t.Cleanup(target.Close)
	t.Cleanup(func() { _ = p.Close() })
	cfg, err := config.Parse([]byte(`
streams: {ack_wait: 100ms}
targets: {erp: {url: "`+target.URL+`/x", timeout: 2s}}
kinds: {order.create: {target: erp, attempts: 50}}
`), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	conn := func() *nats.Conn { nc, _ := srv.Conn(t); return nc }
	ing, _ := ingest.New(ingest.Options{Conn: conn(), Config: cfg})
	run(t, ing)
	poison := event.ID("acme", "poison")
	disp, _ := dispatcher.New(dispatcher.Options{Conn: conn(), Config: cfg, Hooks: &dispatcher.Hooks{
		AfterClaim: func(id string, _ int) error {
			if id == poison {
				return errors.New("worker died")
			}
			return nil
		},
	}})
	run(t, disp)
	dl, _ := deadletter.New(deadletter.Options{Conn: conn(), Config: cfg})
	run(t, dl)

	nc, js := srv.Conn(t)
	advisories := make(chan dead.Advisory, 4)
	sub, _ := nc.Subscribe("tenaz.advisory.dead.acme.order.create", func(m *nats.Msg) {
		var a dead.Advisory
		_ = json.Unmarshal(m.Data, &a)
		advisories <- a
	})
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	for _, k := range []string{"poison", "fine"} {
		m := nats.NewMsg("tenaz.intake.acme.order.create")
		m.Data = []byte(`{"order_id":"` + k + `"}`)
		m.Header.Set("Idempotency-Key", k)
		if _, err := js.PublishMsg(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	st, _ := store.Open(context.Background(), js, store.Options{})
	natstest.Eventually(t, 30*time.Second, func() bool {
		r, _, err := st.Get(context.Background(), "", poison)
		return err == nil && r.Status == state.Dead
	}, "poison event to be dead")
	r, _, _ := st.Get(context.Background(), "", poison)
	if r.LastError == nil || r.LastError.Class != "crash" {
		t.Fatalf("want last_error class crash, got %+v", r.LastError)
	}
	fine, _, err := st.Get(context.Background(), "", event.ID("acme", "fine"))
	if err != nil || fine.Status != state.Done {
		t.Fatalf("the healthy event must be done, got %s (%v)", fine.Status, err)
	}
	s, _ := js.Stream(context.Background(), "DEAD")
	m, err := s.GetLastMsgForSubject(context.Background(), "tenaz.dead.acme.order.create")
	if err != nil {
		t.Fatalf("want a DEAD entry: %v", err)
	}
	var e dead.Entry
	if err := json.Unmarshal(m.Data, &e); err != nil || e.Reason != dead.ReasonCrash || e.Event == nil || string(e.Event.Payload) != `{"order_id":"poison"}` {
		t.Fatalf("want a crash DEAD entry with the payload, got %+v (%v)", e, err)
	}
	select {
	case a := <-advisories:
		if a.ID != poison || a.Class != "crash" {
			t.Fatalf("dead advisory: want the poison event with class crash, got %+v", a)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no dead advisory")
	}
	subj := names.NewSubjects("").WithPartitions(st.Partitions())
	ev, _ := js.Stream(context.Background(), subj.EventsStream("acme"))
	info, _ := ev.Info(context.Background(), jetstream.WithSubjectFilter(subj.EventsOf("acme")))
	if n := len(info.State.Subjects); n != 0 {
		t.Fatalf("the poison message must be gone from EVENTS, subjects left: %v", info.State.Subjects)
	}
}
