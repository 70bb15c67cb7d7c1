package poller_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/dead"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
)

// A review DEAD has no room for (its account at deadletter.max_per_account)
// goes to manual review at once, its entry waiting for room in
// TENAZ_DEAD_WAITING, and is kept for its own reason once an operator
// frees room and ingest's mover takes it.
func TestReviewDEADHasNoRoomForWaitsForRoom(t *testing.T) {
	w := newWorld(t, "attempts: 3, callback_sla: 1s", worldOpts{extraConfig: "deadletter: {max_per_account: 1}\n"})
	first := w.submit("c-room-1", `{"applicant":"a-1"}`)
	w.WaitStatus(first, state.ManualReview, 15*time.Second)
	second := w.submit("c-room-2", `{"applicant":"a-2"}`)
	w.WaitStatus(second, state.ManualReview, 15*time.Second)
	if n := w.DeadWaiting("acme"); n != 1 {
		t.Fatalf("want the second review's entry waiting for room, got %d waiting", n)
	}
	w.DiscardDead("acme")
	natstest.Eventually(t, 10*time.Second, func() bool { return w.DeadWaiting("acme") == 0 },
		"want the waiting entry moved into DEAD by ingest")
	w.wantKeptAsReview(second)
}

// A review that neither DEAD nor its waiting room has room for (here
// the waiting room bounded, as the server's storage would be) waits with
// its timer set again: it holds no slot of the poller's ack window, which
// every account's timers share, while it waits, and once an operator
// frees room it is kept for its own reason. NAKed, as it was, the timer
// held a slot for as long as that lasted and, after its 20 deliveries,
// was given up as a crash.
func TestReviewNothingHasRoomForWaitsWithItsTimerSetAgain(t *testing.T) {
	w := newWorld(t, "attempts: 3, callback_sla: 1s", worldOpts{extraConfig: "deadletter: {max_per_account: 1}\n"})
	ws, err := w.JS.Stream(w.Ctx(), names.StreamDeadWaiting)
	if err != nil {
		t.Fatal(err)
	}
	c := ws.CachedInfo().Config
	c.MaxBytes = 64 // the services applied the layout at start: no entry fits now
	if _, err := w.JS.UpdateStream(w.Ctx(), c); err != nil {
		t.Fatal(err)
	}
	first := w.submit("c-room-1", `{"applicant":"a-1"}`)
	w.WaitStatus(first, state.ManualReview, 15*time.Second)
	second := w.submit("c-room-2", `{"applicant":"a-2"}`)
	w.WaitStatus(second, state.AwaitingCallback, 10*time.Second)
	natstest.Eventually(t, 30*time.Second, func() bool {
		return servicetest.Metric(t, w.reg, "tenaz_dead_full_total", "account", "acme") >= 2
	}, "want the second review refused for room twice")

	cons, err := w.JS.Consumer(w.Ctx(), w.Subj.EventsStream("acme"), names.ConsumerPoller)
	if err != nil {
		t.Fatal(err)
	}
	held := 0 // samples with the timer holding a slot of the window
	for range 10 {
		info, err := cons.Info(w.Ctx())
		if err != nil {
			t.Fatal(err)
		}
		if info.NumAckPending > 0 {
			held++
		}
		<-time.After(300 * time.Millisecond)
	}
	if held > 2 {
		t.Fatalf("want the waiting timer out of the poller's ack window, found it there in %d of 10 looks", held)
	}
	if s := w.Record(second).Status; s != state.AwaitingCallback {
		t.Fatalf("want the second event waiting, awaiting its callback, got %s", s)
	}

	w.DiscardDead("acme")
	w.WaitStatus(second, state.ManualReview, 20*time.Second)
	w.wantKeptAsReview(second)
}

// wantKeptAsReview fails the test unless the last entry DEAD keeps of
// acme is id's, kept as a manual review.
func (w *world) wantKeptAsReview(id string) {
	w.t.Helper()
	ds, err := w.JS.Stream(w.Ctx(), names.StreamDead)
	if err != nil {
		w.t.Fatal(err)
	}
	dm, err := ds.GetLastMsgForSubject(w.Ctx(), "tenaz.dead.acme.credit.evaluate")
	if err != nil {
		w.t.Fatal(err)
	}
	var e dead.Entry
	if err := json.Unmarshal(dm.Data, &e); err != nil || e.ID != id || e.Reason != dead.ReasonReview {
		w.t.Fatalf("want %s's entry kept as %s, got %s (%v)", id, dead.ReasonReview, dm.Data, err)
	}
}
