package dispatcher

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/queue"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
)

// A run publishes its retry schedule while nats-server restarts; the
// schedule arrives at its due time and fires at once, and another replica
// gets the fired message while the record still says running (the run has
// not stored "retrying" yet). Dropped as "another message owns the run",
// it would leave the event retrying with no message, so a message newer
// than the run's is handed back and looked at again; an older one is
// dropped (docs/chaos.md, bug 9).
func TestNewerMessageWhileAnotherOwnsTheRunIsLookedAtAgain(t *testing.T) {
	t.Parallel()
	// AckWait is short: a message not acked (dropped) is back within 2s.
	s, js, next := lookHarness(t, time.Second, true)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	env := lookEvent(t, js, "k", "look.older", "look.newer")
	// The run that holds the event was claimed for the message at
	// sequence 100 of EVENTS; the two messages stand for one stored before
	// it (99) and one after (101).
	const runSeq = 100
	rec, _, err := state.Apply(queue.Initial(env), state.Action{Name: state.Claim, Seq: runSeq, Actor: "dispatcher/d1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	rev, err := s.st.Create(ctx, rec)
	if err != nil {
		t.Fatal(err)
	}
	older := next(5 * time.Second)
	if _, ok := s.claim(ctx, older, env, runSeq-1); ok {
		t.Fatal("an older message must not claim a running event")
	}
	newer := next(5 * time.Second)
	if newer == nil || newer.Subject() != "look.newer" {
		t.Fatalf("want the newer message next, got %v", newer)
	}
	if _, ok := s.claim(ctx, newer, env, runSeq+1); ok {
		t.Fatal("a newer message must not claim an event another run holds")
	}
	// The run stores its outcome: retrying, due now.
	due := time.Now()
	rec, _, err = state.Apply(rec, state.Action{Name: state.Retry, Actor: "dispatcher/d1", NextRunAt: &due, Error: &state.ErrorInfo{Class: "transient", Message: "503"}}, due)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.st.Write(ctx, rec, rev); err != nil {
		t.Fatal(err)
	}
	again := next(5 * time.Second)
	if again == nil || again.Subject() != "look.newer" {
		t.Fatalf("want the newer message handed back (dropped, the event would wait retrying with no message), got %v", again)
	}
	if md, _ := again.Metadata(); md.NumDelivered != 2 {
		t.Fatalf("want the newer message delivered a second time, got %d", md.NumDelivered)
	}
	got, ok := recordOf(s.claim(ctx, again, env, runSeq+1))
	if !ok || got.Status != state.Running || got.RunSeq != runSeq+1 || got.Attempts != 2 {
		t.Fatalf("the message looked at again must claim the retry: ok=%v %s seq %d attempt %d", ok, got.Status, got.RunSeq, got.Attempts)
	}
	if err := again.Ack(); err != nil { // what the run would do once done
		t.Fatal(err)
	}
	// The older message was acked (dropped): with an AckWait of 1s it
	// would be back by now otherwise.
	if m := next(2 * time.Second); m != nil {
		t.Fatalf("the older message must have been dropped, got %s again", m.Subject())
	}
}

// The same race when the fired retry reaches the replica whose run is
// still in flight: it is looked at again within seconds, not left to
// AckWait, while a copy of the run's own message is left alone.
func TestNewerMessageWhileTheRunIsInFlightHereIsLookedAtAgain(t *testing.T) {
	t.Parallel()
	// AckWait is long: a message back within seconds was handed back.
	s, js, next := lookHarness(t, time.Minute, false)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	env := lookEvent(t, js, "k", "look.copy", "look.newer")
	const runSeq = 100
	s.runs.add(env.ID, runSeq, 0)
	defer s.runs.done(env.ID)
	if _, ok := s.claim(ctx, next(5*time.Second), env, runSeq); ok { // a copy of the run's own message
		t.Fatal("a copy of the message of a run in flight must not claim")
	}
	if _, ok := s.claim(ctx, next(5*time.Second), env, runSeq+1); ok {
		t.Fatal("a newer message must not claim while the run is in flight")
	}
	again := next(5 * time.Second)
	if again == nil || again.Subject() != "look.newer" {
		t.Fatalf("want the newer message handed back within seconds, got %v", again)
	}
	if m := next(2 * time.Second); m != nil {
		t.Fatalf("the copy of the run's own message must be left alone (to the run), got %s back", m.Subject())
	}
}

// lookHarness is a dispatcher on a real server (started when start is
// set: claim then needs its store and breakers), and a stream of the
// test's own whose messages only the test takes, to hand to claim as a
// reader would; next fetches the next one (nil if none came within wait).
func lookHarness(t *testing.T, ackWait time.Duration, start bool) (*Service, jetstream.JetStream, func(wait time.Duration) jetstream.Msg) {
	t.Helper()
	srv := natstest.Start(t)
	nc, js := srv.Conn(t)
	cfg := servicetest.Config(t, `
targets: {erp: {url: "http://127.0.0.1:1/x"}}
kinds: {order.create: {target: erp}}
`, nil)
	s, err := New(Options{Conn: nc, Config: cfg, Instance: "d2"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if start {
		servicetest.Run(t, ctx, s)
	}
	return s, js, natstest.Inbox(t, js, "LOOK", ackWait, 10)
}

// lookEvent is an order.create event of account acme with Idempotency-Key
// key, published once on each of subjects of the test's own stream (see
// lookHarness), in that order.
func lookEvent(t *testing.T, js jetstream.JetStream, key string, subjects ...string) event.Envelope {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	env, err := event.New(event.Fields{Account: "acme", Kind: "order.create", IdempotencyKey: key}, []byte(`{}`), "", "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, subj := range subjects {
		if _, err := js.Publish(ctx, subj, env.Marshal()); err != nil {
			t.Fatal(err)
		}
	}
	return env
}

// A copy of a run's own message (the server redelivered it while the run
// called the target) that reaches its slot after the run stored
// "retrying" and acked the message must not claim the retry: its run has
// ended, and a second run on an acked message would leave the event
// running if it died. The retry's own message (newer) still claims it.
func TestCopyOfAnEndedRunsMessageDoesNotClaim(t *testing.T) {
	t.Parallel()
	s, js, next := lookHarness(t, time.Second, true)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	env := lookEvent(t, js, "k", "look.own", "look.retry")
	const runSeq = 100
	claimed, _, err := state.Apply(queue.Initial(env), state.Action{Name: state.Claim, Seq: runSeq, Actor: "dispatcher/d1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	due := time.Now()
	rec, _, err := state.Apply(claimed, state.Action{Name: state.Retry, Actor: "dispatcher/d1", NextRunAt: &due, Error: &state.ErrorInfo{Class: "transient", Message: "503"}}, due)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.st.Create(ctx, rec); err != nil {
		t.Fatal(err)
	}
	own := next(5 * time.Second)
	if _, ok := s.claim(ctx, own, env, runSeq); ok {
		t.Fatal("a copy of the ended run's own message must not claim the retry")
	}
	if got, _, err := s.st.Get(ctx, "", env.ID); err != nil || got.Status != state.Retrying || got.Attempts != 1 {
		t.Fatalf("want the event still retrying after attempt 1, got %s attempt %d (%v)", got.Status, got.Attempts, err)
	}
	retry := next(5 * time.Second)
	if retry == nil || retry.Subject() != "look.retry" {
		t.Fatalf("want the retry's message next, got %v", retry)
	}
	got, ok := recordOf(s.claim(ctx, retry, env, runSeq+1))
	if !ok || got.Status != state.Running || got.RunSeq != runSeq+1 || got.Attempts != 2 {
		t.Fatalf("the retry's own message must claim it: ok=%v %s seq %d attempt %d", ok, got.Status, got.RunSeq, got.Attempts)
	}
}

// recordOf is the record a claim wrote (the zero record when it claimed
// nothing).
func recordOf(r *run, ok bool) (state.Record, bool) {
	if r == nil {
		return state.Record{}, ok
	}
	return r.rec, ok
}
