package poller_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/accounts"
	"github.com/tenaz/tenaz/pkg/metrics"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/state"
)

// Polls keep to their target's provider-wide rate together with the
// dispatcher's calls, over two poller replicas, each its own process, one
// killed mid-run: bureau B (rate: 10/s), polled every second for 30
// events, sees at most 11 requests, calls and polls together, in any
// second (the quota's bound: rate × 1 s + 1 + rate × 20 ms), where its
// polls alone would come at about 30 a second. Every event completes.
func TestPollsKeepToTheTargetRateAcrossReplicas(t *testing.T) {
	t.Parallel()
	w, ids := pollsOfTwoReplicas(t, provider.Faults{PollAfter: 3}, "    rate: 10/s", 30)
	recs := w.WaitAll(ids, state.Done, 2*time.Minute)

	var at []time.Time
	for _, c := range w.b.Calls() {
		at = append(at, c.At)
	}
	polls := w.b.PollCalls()
	for _, c := range polls {
		at = append(at, c.At)
	}
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	most := 0
	for i := range at {
		n := 0
		for j := i; j < len(at) && at[j].Sub(at[i]) < time.Second; j++ {
			n++
		}
		most = max(most, n)
	}
	if most > 11 {
		t.Errorf("bureau B (rate 10/s): want at most 11 requests in any second, calls and polls together, got %d", most)
	}
	wantPolledToDone(t, recs, len(polls), 4)
	t.Logf("%d calls and %d polls; at most %d in one second", len(w.b.Calls()), len(polls), most)
}

// Polls keep to their target's provider-wide concurrency together with
// the dispatcher's calls, over two poller replicas, each its own process,
// one killed mid-run: bureau B (concurrency: 3, 300 ms an answer), polled
// every second for 20 events, never has more than 3 requests in flight,
// calls and polls together, where its polls alone would be 20 at once.
// Every event completes.
func TestPollsKeepToTheTargetConcurrencyAcrossReplicas(t *testing.T) {
	t.Parallel()
	w, ids := pollsOfTwoReplicas(t, provider.Faults{PollAfter: 2, Latency: 300 * time.Millisecond}, "    concurrency: 3", 20)
	recs := w.WaitAll(ids, state.Done, 2*time.Minute)

	all := append(w.b.Calls(), w.b.PollCalls()...)
	if most := provider.MostInFlight(all); most > 3 {
		t.Errorf("bureau B (concurrency 3): want at most 3 requests in flight, calls and polls together, got %d", most)
	}
	polls := w.b.PollCalls()
	if most := provider.MostInFlight(polls); most < 2 {
		t.Errorf("want polls to use the target's slots, got at most %d in flight", most)
	}
	wantPolledToDone(t, recs, len(polls), 3)
	t.Logf("%d calls and %d polls; at most %d in flight", len(w.b.Calls()), len(polls), provider.MostInFlight(all))
}

// pollsOfTwoReplicas runs two tenaz-poller processes against bureau B
// (faults b, more target keys limits), submits n of acme's report.fetch
// events, polled every second, and kills one poller once half of them
// were polled: the events are the world's to wait for.
func pollsOfTwoReplicas(t *testing.T, b provider.Faults, limits string, n int) (*world, []string) {
	t.Helper()
	w := newWorld(t, "attempts: 3", worldOpts{
		b: b, noPoller: true, bureauB: limits,
		extraConfig: "  report.fetch: {target: bureau_b, completion: poll, attempts: 3, poll_sla: 5m}\n" +
			"http: {addr: \"127.0.0.1:0\"}\nauth: {disabled: true}\n",
	})
	victim := w.twoPollers()

	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("r-%d", i)
	}
	ids := w.Submit("acme", "report.fetch", keys, func(string) string { return `{"applicant":"a-1","decision":"approved"}` })
	natstest.Eventually(t, 30*time.Second, func() bool { return len(w.b.PollCalls()) >= n/2 }, "want the events polled")
	victim.Kill(t)
	return w, ids
}

// wantPolledToDone checks that every event is done, polled until its
// answer was final: perEvent polls each (the answers processing, then
// the final one), polls in all.
func wantPolledToDone(t *testing.T, recs map[string]state.Record, polls, perEvent int) {
	t.Helper()
	if polls < perEvent*len(recs) {
		t.Errorf("want each event polled until its answer is final (%d polls), got %d polls of %d events", perEvent, polls, len(recs))
	}
	for id, r := range recs {
		if r.Status != state.Done {
			t.Errorf("event %s: want done, got %s (%v)", id, r.Status, actions(r))
		}
	}
}

// A poll refused with Retry-After (a 503 while the bureau is down) waits
// that long for the next, not the target's poll interval (1s), and
// polling goes on to done once the bureau is back.
func TestPollWaitsTheRetryAfterItIsAsked(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "attempts: 3", worldOpts{
		extraConfig: "  report.fetch: {target: bureau_b, completion: poll, attempts: 3, poll_sla: 5m}\n",
	})
	down := provider.Faults{Down: true, PollRetryAfter: 4 * time.Second}
	id := w.Submit("acme", "report.fetch", []string{"r-1"}, func(string) string { return `{"applicant":"a-1","decision":"approved"}` })[0]
	w.WaitStatus(id, state.Polling, 10*time.Second)
	w.b.SetFaults(down) // the first poll comes a second after the call
	var refused state.Entry
	var next *time.Time
	natstest.Eventually(t, 20*time.Second, func() bool {
		r := w.Record(id)
		for _, e := range r.History {
			if e.Action == state.Repoll && strings.Contains(e.Detail, "503") {
				refused, next = e, r.NextRunAt
				return true
			}
		}
		return false
	}, "want a poll refused with 503")
	if next == nil || next.Sub(refused.At) < 3*time.Second {
		t.Fatalf("want the next poll at least the Retry-After (4s) after the refused one at %s, due %v (%s)", refused.At, next, refused.Detail)
	}
	w.b.SetFaults(provider.Faults{})
	if r := w.WaitStatus(id, state.Done, 30*time.Second); r.Status != state.Done {
		t.Fatalf("want done once the bureau is back, got %s", r.Status)
	}
}

// An operator's pause holds an account's polls too, as it holds its
// calls: while acme is paused bureau B is not polled for it; once it is
// resumed its events are polled to done.
func TestPauseHoldsPolls(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "attempts: 3", worldOpts{
		b:           provider.Faults{PollAfter: 1000},
		extraConfig: "  report.fetch: {target: bureau_b, completion: poll, attempts: 3, poll_sla: 5m}\n",
	})
	pauses, err := accounts.OpenPauses(w.Ctx(), w.JS, w.Subj)
	if err != nil {
		t.Fatal(err)
	}
	ids := w.Submit("acme", "report.fetch", []string{"r-1", "r-2"}, func(string) string { return `{"applicant":"a-1","decision":"approved"}` })
	natstest.Eventually(t, 20*time.Second, func() bool { return len(w.b.PollCalls()) >= 4 }, "want acme's events polled")
	if err := pauses.Set(w.Ctx(), accounts.Pause{Account: "acme", Actor: "operator:test", Reason: "bureau B asked us to stop", At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	// The poller hears the pause within milliseconds; a poll already
	// under way when it did may still arrive.
	heard := time.Now().Add(500 * time.Millisecond)
	<-time.After(4 * time.Second) // the window the pause must hold polls in: several poll intervals (1s)
	for _, c := range w.b.PollCalls() {
		if c.At.After(heard) {
			t.Fatalf("want no poll of a paused account, got one at %s (paused at %s)", c.At.Format("15:04:05.000"), heard.Add(-500*time.Millisecond).Format("15:04:05.000"))
		}
	}
	for _, id := range ids {
		if st := w.Record(id).Status; st != state.Polling {
			t.Fatalf("event %s: want it still polling while paused, got %s", id, st)
		}
	}
	if n := w.putOff("acme", metrics.PutOffPaused); n < 2 {
		t.Fatalf("want acme's polls counted as put off for its pause, got %v", n)
	}
	w.b.SetFaults(provider.Faults{})
	if err := pauses.Clear(w.Ctx(), "acme", 0); err != nil {
		t.Fatal(err)
	}
	w.WaitAll(ids, state.Done, 30*time.Second)
}

// An account's open breaker for a target holds its polls of that target,
// as it holds its calls, and no other account's: acme's calls to bureau
// B fail until its breaker opens (2 failures, 6s of cooldown); while it
// is open bureau B is not polled for acme's events, and globex's events
// go on being polled. After the cooldown acme's events are polled to
// done.
func TestOpenBreakerHoldsPolls(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "attempts: 3", worldOpts{
		b:           provider.Faults{PollAfter: 1000},
		accounts:    "  acme: {breaker: {failures: 2, cooldown: 6s}}",
		extraConfig: "  report.fetch: {target: bureau_b, completion: poll, attempts: 5, poll_sla: 5m}\n",
	})
	acme := w.Submit("acme", "report.fetch", []string{"r-1", "r-2"}, approved)
	globex := w.Submit("globex", "report.fetch", []string{"g-1"}, approved)
	w.WaitAll(append(slices.Clone(acme), globex...), state.Polling, 20*time.Second)
	pathOf := func(id string) string { return "/evaluations/" + w.Record(id).Reference }
	acmePaths := map[string]bool{pathOf(acme[0]): true, pathOf(acme[1]): true}
	globexPath := pathOf(globex[0])

	// bureau B refuses calls (polls still answer), and acme's next calls
	// open its breaker.
	w.b.SetFaults(provider.Faults{PollAfter: 1000, ErrorRate: 1})
	w.Submit("acme", "report.fetch", []string{"r-3", "r-4"}, approved)
	kv, err := w.JS.KeyValue(w.Ctx(), w.Subj.Bucket(names.BucketBreakers))
	if err != nil {
		t.Fatal(err)
	}
	var open struct {
		State     string    `json:"state"`
		OpenUntil time.Time `json:"open_until"`
	}
	natstest.Eventually(t, 20*time.Second, func() bool {
		e, err := kv.Get(w.Ctx(), "acme.bureau_b")
		return err == nil && json.Unmarshal(e.Value(), &open) == nil && open.State == "open"
	}, "want acme's breaker for bureau B open")
	// The poller hears the breaker within milliseconds; a poll already
	// under way when it did may still arrive.
	heard := time.Now().Add(500 * time.Millisecond)
	if time.Until(open.OpenUntil) < 3*time.Second {
		t.Fatalf("want most of the 6s cooldown ahead, open until %s", open.OpenUntil)
	}
	<-time.After(time.Until(open.OpenUntil)) // the window the open breaker must hold acme's polls in
	globexPolls := 0
	for _, c := range w.b.PollCalls() {
		if c.At.After(heard) && c.At.Before(open.OpenUntil) {
			if acmePaths[c.Path] {
				t.Fatalf("want no poll of acme's events while its breaker is open (until %s), got one at %s", open.OpenUntil.Format("15:04:05.000"), c.At.Format("15:04:05.000"))
			}
			if c.Path == globexPath {
				globexPolls++
			}
		}
	}
	if globexPolls < 2 {
		t.Fatalf("want globex's event polled on while acme's breaker is open (a poll a second), got %d polls", globexPolls)
	}
	if acme, globex := w.putOff("acme", metrics.PutOffBreaker), w.putOff("globex", metrics.PutOffBreaker); acme < 2 || globex != 0 {
		t.Fatalf("want acme's polls counted as put off for its breaker, globex's not: got %v and %v", acme, globex)
	}
	w.b.SetFaults(provider.Faults{PollAfter: 1})
	w.WaitAll(acme, state.Done, 30*time.Second)
}
