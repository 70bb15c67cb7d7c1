package poller

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/queue"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
)

// The poller's side of docs/chaos.md's bug 9: a run gets its 2xx and
// publishes the deadline's (or first poll's) timer while nats-server
// restarts; the timer arrives at its due time and fires at once, before
// the run stores awaiting_callback. Dropped as "moved on", the event would
// wait with no timer, so a timer newer than the run's message is handed
// back and looked at again once the record waits for it.
func TestTimerFiredBeforeItsRunStoredIsLookedAtAgain(t *testing.T) {
	s, env, next := timerHarness(t, `
targets: {bureau_a: {url: "http://127.0.0.1:1/x", callback_secret: "whsec_dGVuYXotdGVzdC1jYWxsYmFjay1zZWNyZXQ="}}
kinds: {credit.check: {target: bureau_a, completion: callback, callback_sla: 1s, on_callback_timeout: manual_review}}
`, "credit.check")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The run holds the event; its own message is older than the timer
	// (sequence 0 stands for it: the timer is sequence 1 of LOOK).
	rec, _, err := state.Apply(queue.Initial(env), state.Action{Name: state.Claim, Seq: 0, Actor: "dispatcher/d1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	rev, err := s.st.Create(ctx, rec)
	if err != nil {
		t.Fatal(err)
	}
	timer := next(5 * time.Second)
	s.handle(ctx, timer, env)
	// The run stores what the timer is for: the callback awaited until a
	// deadline that has passed by the time the timer is looked at again.
	deadline := time.Now()
	rec, _, err = state.Apply(rec, state.Action{Name: state.AwaitCallback, Actor: "dispatcher/d1", Reference: "ref_1", NextRunAt: &deadline, Deadline: &deadline}, deadline)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.st.Write(ctx, rec, rev); err != nil {
		t.Fatal(err)
	}
	again := next(5 * time.Second)
	if again == nil {
		t.Fatal("the timer was dropped while its run was storing its outcome: the event would wait with no timer")
	}
	if md, _ := again.Metadata(); md.NumDelivered != 2 {
		t.Fatalf("want the timer delivered a second time, got %d", md.NumDelivered)
	}
	s.handle(ctx, again, env)
	got, _, err := s.st.Get(ctx, "", env.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != state.ManualReview {
		t.Fatalf("the timer looked at again must pass the deadline: want manual_review, got %s", got.Status)
	}
}

// The outcome of a run another replica had taken over can publish its
// timer after the winner's, replacing it. A poll timer that fires before
// the event's next poll cannot be dropped as a stale copy on the belief
// that the newer poll's timer is pending: with that timer replaced, the
// event would be left polling with nothing to poll it. The early timer
// sets the event's own again (docs/chaos.md, bug 10).
func TestEarlyPollTimerSetsTheEventsOwnAgain(t *testing.T) {
	s, env, next := timerHarness(t, `
targets: {bureau_b: {url: "http://127.0.0.1:1/x", poll: {url: "http://127.0.0.1:1/x/{{.Reference}}", interval: 1m, done_when: {field: status, in: [approved]}}}}
kinds: {report.fetch: {target: bureau_b, completion: poll, poll_sla: 1h}}
`, "report.fetch")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The event polls; its next poll is a minute away, and nothing is on
	// its schedule subject (the early timer replaced it, then fired).
	now := time.Now()
	nextPoll, deadline := queue.DueTime(now.Add(time.Minute)), now.Add(time.Hour)
	rec, _, err := state.Apply(queue.Initial(env), state.Action{Name: state.Claim, Seq: 0, Actor: "dispatcher/d1"}, now)
	if err == nil {
		rec, _, err = state.Apply(rec, state.Action{Name: state.Poll, Actor: "dispatcher/d1", Reference: "ref_1", NextRunAt: &nextPoll, Deadline: &deadline}, now)
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.st.Create(ctx, rec); err != nil {
		t.Fatal(err)
	}
	s.handle(ctx, next(5*time.Second), env)
	stream, err := s.js.Stream(ctx, s.subj.EventsStream(env.Account))
	if err != nil {
		t.Fatal(err)
	}
	m, err := stream.GetLastMsgForSubject(ctx, s.subj.Schedule(env.Account, env.ID))
	if err != nil {
		t.Fatalf("the early timer was dropped and nothing polls the event: %v", err)
	}
	want := "@at " + nextPoll.UTC().Format(time.RFC3339)
	if got := m.Header.Get("Nats-Schedule"); got != want || m.Header.Get(names.HeaderTimer) != queue.TimerPoll {
		t.Fatalf("want the event's poll timer %q set again, got %q (%s)", want, got, m.Header.Get(names.HeaderTimer))
	}
	if got, _, _ := s.st.Get(ctx, "", env.ID); got.Status != state.Polling || got.Polls != rec.Polls {
		t.Fatalf("an early timer must not poll: got %s after %d polls", got.Status, got.Polls)
	}
}

// timerHarness is a poller started on a real server with config yaml, an
// event of kind, and a stream of the test's own holding one message with
// that event, which next fetches (nil if none came within wait) for the
// test to hand to handle as the consumer would: only the test takes it.
func timerHarness(t *testing.T, yaml, kind string) (*Service, event.Envelope, func(wait time.Duration) jetstream.Msg) {
	t.Helper()
	s, js := startPoller(t, yaml)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	next := natstest.Inbox(t, js, "LOOK", 30*time.Second, 20)
	env, err := event.New(event.Fields{Account: "acme", Kind: kind, IdempotencyKey: "k"}, []byte(`{}`), "", "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "look.timer", env.Marshal()); err != nil {
		t.Fatal(err)
	}
	return s, env, next
}

// startPoller runs a poller (p1) of yaml on a server of its own.
func startPoller(t *testing.T, yaml string) (*Service, jetstream.JetStream) {
	t.Helper()
	srv := natstest.Start(t)
	nc, js := srv.Conn(t)
	s, err := New(Options{Conn: nc, Config: servicetest.Config(t, yaml, nil), Instance: "p1"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	servicetest.Run(t, ctx, s)
	return s, js
}
