package poller_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/dead"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/state"
)

// A timer the poller fails on every time is given up by the poller at its
// 21st delivery, not by the server (its consumer never gives one up, since
// EVENTS is trimmed to the consumer's ack floor): the event ends dead,
// class crash, instead of waiting with a timer nobody settles. Here a
// callback deadline, handed back 20 times before the poller starts (a
// deadline handled would end in manual review).
func TestTimerFailedOnEveryTimeEndsDead(t *testing.T) {
	w := newWorld(t, "attempts: 1, callback_sla: 1s", worldOpts{noPoller: true})
	id := w.submit("c-giveup", `{"applicant":"a-giveup"}`)
	w.WaitStatus(id, state.AwaitingCallback, 20*time.Second)
	cons, err := w.JS.Consumer(w.Ctx(), w.Subj.EventsStream("acme"), names.ConsumerPoller)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for n := 0; n < 20; {
		if time.Now().After(deadline) {
			t.Fatalf("the deadline's timer: delivered %d times, want 20", n)
		}
		b, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range b.Messages() {
			if err := m.Nak(); err != nil {
				t.Fatal(err)
			}
			n++
		}
	}
	w.poller(false)
	r := w.WaitStatus(id, state.Dead, 20*time.Second)
	if r.LastError == nil || r.LastError.Class != "crash" {
		t.Fatalf("want last_error class crash, got %+v", r.LastError)
	}
}

// An event waiting for its callback whose stored record does not decode
// (put by hand, or by another version) ends dead when its deadline's
// timer fires, its record made again from the timer's envelope. Before,
// the timer was handed back every 2 s until its 21st delivery.
func TestUndecodableRecordEndsDeadAtItsTimer(t *testing.T) {
	w := newWorld(t, "attempts: 1, callback_sla: 1s", worldOpts{})
	id := w.submit("c-undecodable", `{"applicant":"a-undecodable"}`)
	w.WaitStatus(id, state.AwaitingCallback, 20*time.Second)
	kv, err := w.JS.KeyValue(w.Ctx(), w.St.Bucket("acme", id))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(w.Ctx(), id, []byte(`{"id": "`+id+`", "status": 17`)); err != nil {
		t.Fatal(err)
	}
	var rec state.Record
	natstest.Eventually(t, 10*time.Second, func() bool {
		r, _, err := w.St.Get(w.Ctx(), "acme", id)
		rec = r
		return err == nil && r.Status == state.Dead
	}, "want the event dead within a few seconds of its deadline, got %v", natstest.Lazy(func() any { return rec.Status }))
	last := rec.History[len(rec.History)-1]
	if !strings.HasPrefix(last.Detail, dead.ReasonUndecodable+": ") || string(rec.Payload) != `{"applicant":"a-undecodable"}` {
		t.Fatalf("want the record made again with its payload, dead with reason %s, got %s %+v", dead.ReasonUndecodable, rec.Payload, last)
	}
	if n := w.DeadKept("acme"); n != 1 {
		t.Fatalf("want its entry in DEAD, got %d", n)
	}
}
