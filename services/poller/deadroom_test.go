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
// waits with its timer set again: it holds no slot of the poller's ack
// window, which every account's timers share, while it waits, and once an
// operator frees room it is kept for its own reason. NAKed, as it was,
// the timer held a slot for as long as that lasted and, after its 20
// deliveries, was given up as a crash.
func TestReviewDEADHasNoRoomForWaitsWithItsTimerSetAgain(t *testing.T) {
	w := newWorld(t, "attempts: 3, callback_sla: 1s", worldOpts{extraConfig: "deadletter: {max_per_account: 1}\n"})
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

	ds, err := w.JS.Stream(w.Ctx(), names.StreamDead)
	if err != nil {
		t.Fatal(err)
	}
	w.DiscardDead("acme")
	w.WaitStatus(second, state.ManualReview, 20*time.Second)
	dm, err := ds.GetLastMsgForSubject(w.Ctx(), "tenaz.dead.acme.credit.evaluate")
	if err != nil {
		t.Fatal(err)
	}
	var e dead.Entry
	if err := json.Unmarshal(dm.Data, &e); err != nil || e.ID != second || e.Reason != dead.ReasonReview {
		t.Fatalf("want the second's entry kept as %s, got %s (%v)", dead.ReasonReview, dm.Data, err)
	}
}
