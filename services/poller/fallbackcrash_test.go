package poller_test

import (
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/queue"
	"github.com/tenaz/tenaz/pkg/state"
)

// The callback deadline moves an event to its fallback stage (the record
// written: pending at the fallback stage), and nats-server goes down
// before the fallback's dispatch message is published. The timer comes
// back and finds the event pending: dropped as "moved on", it would leave
// the event with nothing on its way until the reconciler's sweep, so it
// publishes the fallback's message again, under the same message id
// (docs/chaos.md, bug 5).
func TestFallbackWrittenWithoutItsMessageIsSentAgain(t *testing.T) {
	w := newWorld(t, `attempts: 3, callback_sla: 2s, on_callback_timeout: fallback,
    fallback: {target: bureau_b, completion: poll, attempts: 3, poll_sla: 1m}`, worldOpts{b: provider.Faults{PollAfter: 1}, noPoller: true})
	id := w.submit("fb-1", `{"applicant":"a-1"}`)
	w.WaitStatus(id, state.AwaitingCallback, 10*time.Second)

	// What the poller's deadline did before it died: the fallback is
	// written, its message never published; the deadline's timer waits in
	// the poller's consumer.
	rec, rev, err := w.St.Get(w.Ctx(), "", id)
	if err != nil {
		t.Fatal(err)
	}
	next, _, err := state.Apply(rec, state.Action{Name: state.Fallback, Actor: "poller/p0", Detail: "no callback by the deadline"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.St.Write(w.Ctx(), next, rev); err != nil {
		t.Fatal(err)
	}

	w.poller(false)
	done := w.WaitStatus(id, state.Done, 20*time.Second)
	if done.Stage != state.StageFallback || count(done, state.Fallback) != 1 {
		t.Fatalf("want done at the fallback stage after one fallback, got %s %v", done.Stage, actions(done))
	}
	if w.b.Effects(id) != 1 {
		t.Fatalf("want the fallback's effect applied once, got %d", w.b.Effects(id))
	}
}

// The poller's half of the dispatcher's TestTimerReplacedByADispatchScheduleIsSetAgain:
// a timer (a loser's poll or deadline) that replaced an event's retry
// schedule fires; the poller finds the event retrying with no schedule and
// sets the retry schedule again from the record.
func TestScheduleReplacedByATimerIsSetAgain(t *testing.T) {
	w := newWorld(t, `attempts: 3, backoff: {initial: 1h, jitter: 0}, callback_sla: 1h`, worldOpts{a: provider.Faults{FailFirst: 1}})
	id := w.submit("sch-1", `{"applicant":"a-1"}`)
	rec := w.WaitStatus(id, state.Retrying, 10*time.Second)
	stream, err := w.JS.Stream(w.Ctx(), w.Subj.EventsStream("acme"))
	if err != nil {
		t.Fatal(err)
	}
	kind := func() string {
		m, err := stream.GetLastMsgForSubject(w.Ctx(), w.Subj.Schedule("acme", id))
		if err != nil {
			return "none"
		}
		if h := m.Header.Get(names.HeaderTimer); h != "" {
			return "timer " + h
		}
		return "dispatch"
	}
	if k := kind(); k != "dispatch" {
		t.Fatalf("want the retry's dispatch schedule on the event's subject, got %s", k)
	}
	env, err := w.St.Envelope(rec)
	if err != nil {
		t.Fatal(err)
	}
	if err := queue.New(w.JS, w.Subj).Timer(w.Ctx(), env, time.Now(), queue.TimerPoll, ""); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 10*time.Second, func() bool { return kind() == "dispatch" && w.Record(id).Status == state.Retrying },
		"want the retry schedule set again after the timer fired (now %s)", natstest.Lazy(func() any { return kind() }))
}
