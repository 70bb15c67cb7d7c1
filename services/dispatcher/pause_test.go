package dispatcher_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/accounts"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
)

// An operator's pause stops the account's calls as soon as the dispatcher
// knows it, not only its reads: with concurrency 2 and 300 ms calls, the
// reader has handed out up to twice the concurrency, claimed and waiting
// for a slot. Paused, only the calls already made finish; the runs that
// waited give their attempt back (yield) and wait, none with an attempt
// spent on a call not made (one attempt is all the kind has); resumed,
// every event ends done.
func TestPauseStopsWhatWasHandedOut(t *testing.T) {
	t.Parallel()
	h := setup(t, yamlFor(2, "attempts: 1"), provider.Faults{Latency: 300 * time.Millisecond})
	d := h.dispatcher("d1", nil)
	ids := h.Submit("acme", "order.create", keys("acme", 20), orderPayload)
	natstest.Eventually(t, servicetest.WaitFor, func() bool { return h.prov.CallCount() >= 3 }, "want acme's calls going")

	pauses, err := accounts.OpenPauses(h.Ctx(), h.JS, h.Subj)
	if err != nil {
		t.Fatal(err)
	}
	if err := pauses.Set(h.Ctx(), accounts.Pause{Account: "acme", Actor: "operator:test", Reason: "test", At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, servicetest.WaitFor, func() bool { return !d.PausedUntil("acme").IsZero() }, "want the pause known")
	known := time.Now()
	// Settled: nothing running any more (the calls in flight answered).
	natstest.Eventually(t, servicetest.WaitFor, func() bool {
		for _, id := range ids {
			if h.Record(id).Status == state.Running {
				return false
			}
		}
		return true
	}, "want acme's runs settled under the pause")
	// A call that passed its last check just before the pause was known
	// may arrive a moment later; the calls that waited behind the 300 ms
	// ones would come later still.
	var after []string
	for _, c := range h.prov.Calls() {
		if c.At.After(known.Add(100 * time.Millisecond)) {
			after = append(after, fmt.Sprintf("%s attempt %d at +%v", c.EventID, c.Attempt, c.At.Sub(known)))
		}
	}
	if len(after) > 0 {
		t.Fatalf("paused acme: want no call made after the pause was known, got %d: %v", len(after), after)
	}

	if err := pauses.Clear(h.Ctx(), "acme", 0); err != nil {
		t.Fatal(err)
	}
	recs := h.waitAll(ids, state.Done, time.Minute)
	calls := map[string]int{}
	for _, c := range h.prov.Calls() {
		calls[c.EventID]++
	}
	for _, id := range ids {
		if calls[id] != 1 || recs[id].Attempts != 1 {
			t.Fatalf("%s: want one call and one attempt, got %d calls and %d attempts", id, calls[id], recs[id].Attempts)
		}
	}
}
