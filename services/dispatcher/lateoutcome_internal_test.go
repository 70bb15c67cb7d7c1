package dispatcher

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/queue"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/target"
)

// A run's message waits past AckWait for a concurrency slot, the server
// redelivers it to another replica, which takes the run over. The first
// run, not knowing (its claim was recent, its connection had not
// reconnected), stores its outcome: the write loses and the outcome is
// noted as late. Acking the message then would settle it for the run that
// took it over too, and if that run died after its call the event would
// stay running with nothing to bring it back. So a late outcome found on a
// write conflict leaves the message to its new owner, as one found before
// the write does (docs/chaos.md, bug 10).
func TestLateOutcomeFoundOnAConflictLeavesTheMessageToTheNewRun(t *testing.T) {
	t.Parallel()
	// AckWait is short: a message left unacked is back within seconds.
	s, js, next := lookHarness(t, time.Second, true)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	env := lookEvent(t, js, "late-1", "look.run")
	m := next(5 * time.Second)
	if m == nil {
		t.Fatal("no message")
	}
	md, err := m.Metadata()
	if err != nil {
		t.Fatal(err)
	}
	seq := md.Sequence.Stream
	// This replica claimed the event for m; another took the run over on a
	// redelivery of the same message while this one called.
	mine, _, err := state.Apply(queue.Initial(env), state.Action{Name: state.Claim, Seq: seq, Actor: s.actor}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	rev, err := s.st.Create(ctx, mine)
	if err != nil {
		t.Fatal(err)
	}
	theirs, _, err := state.Apply(mine, state.Action{Name: state.Reclaim, Seq: seq, Actor: "dispatcher/d3", Detail: "message redelivered: the previous run was lost"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.st.Write(ctx, theirs, rev); err != nil {
		t.Fatal(err)
	}
	// The run here is fresh and its connection steady: not contested, so
	// its outcome (a retry) goes to the write, which conflicts.
	s.runs.add(env.ID, seq, s.nc.Stats().Reconnects)
	if s.contested(env.ID) {
		t.Fatal("the run must not look contested: the test is about the write conflict")
	}
	stage := config.Stage{Attempts: 3, Backoff: config.Backoff{Initial: config.Duration(time.Second), Max: config.Duration(time.Second), Multiplier: 1}}
	s.finish(ctx, &run{m: m, env: env, rec: mine, rev: rev, stage: stage}, errors.New("503 from the target"), target.Response{})
	s.runs.done(env.ID)

	r, _, err := s.st.Get(ctx, "", env.ID)
	if err != nil {
		t.Fatal(err)
	}
	last := r.History[len(r.History)-1]
	if r.Status != state.Running || r.Attempts != theirs.Attempts || last.Action != state.Note || !strings.Contains(last.Detail, "late outcome ignored: retry") {
		t.Fatalf("want the run that took over untouched and the late outcome noted, got %s attempt %d, last %s %q", r.Status, r.Attempts, last.Action, last.Detail)
	}
	// The message must still be pending for the run that took it over:
	// if that run dies, its redelivery is all that brings the event back.
	again := next(5 * time.Second)
	if again == nil {
		t.Fatal("the message was settled by the late outcome: the run that took it over has nothing left if it dies")
	}
	if md, _ := again.Metadata(); md.Sequence.Stream != seq {
		t.Fatalf("want the same message back, got sequence %d", md.Sequence.Stream)
	}
}
