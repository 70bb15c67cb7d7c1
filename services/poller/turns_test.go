package poller_test

import (
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/metrics"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/services/poller"
)

// slowWorld is a world where tardy's slow.fetch events are polled at
// bureau_slow (its own provider, slow) and acme's report.fetch at bureau
// B, both every second; acme's events are final at their second poll.
// tardy's timers are in acme's partition, so one consumer feeds both.
func slowWorld(t *testing.T, o worldOpts) (*world, *provider.Provider) {
	t.Helper()
	slow := provider.New(provider.Faults{PollAfter: 1000}, provider.WithIdempotent())
	srv := httptest.NewServer(slow)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { _ = slow.Close() })
	o.b = provider.Faults{PollAfter: 1}
	o.noPoller = true
	o.targets = `  bureau_slow:
    url: "` + srv.URL + `/evaluations"
    timeout: 5s
    poll: {url: "` + srv.URL + `/evaluations/{{.Reference}}", interval: 1s, done_when: {field: status, in: [approved, rejected]}}`
	o.extraConfig = "  report.fetch: {target: bureau_b, completion: poll, attempts: 3, poll_sla: 5m}\n" +
		"  slow.fetch: {target: bureau_slow, completion: poll, attempts: 3, poll_sla: 5m}\n" + o.extraConfig
	w := newWorld(t, "attempts: 3", o)
	if w.Subj.PartitionOf("tardy") != w.Subj.PartitionOf("acme") {
		t.Fatal("want tardy's timers in acme's partition, ahead of acme's in one consumer")
	}
	return w, slow
}

// submitSlow submits n of tardy's events, waits until each polls and
// then makes their provider take 2s to answer a poll.
func (w *world) submitSlow(slow *provider.Provider, n int) []string {
	w.t.Helper()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("s-%d", i)
	}
	ids := w.Submit("tardy", "slow.fetch", keys, approved)
	w.WaitAll(ids, state.Polling, time.Minute)
	slow.SetFaults(provider.Faults{PollAfter: 1000, Latency: 2 * time.Second})
	return ids
}

func approved(string) string { return `{"applicant":"a-1","decision":"approved"}` }

// acmeTakes submits acme's three events and returns how long they took
// to be polled to done.
func (w *world) acmeTakes() time.Duration {
	w.t.Helper()
	start := time.Now()
	w.WaitAll(w.Submit("acme", "report.fetch", []string{"a-1", "a-2", "a-3"}, approved), state.Done, time.Minute)
	return time.Since(start)
}

// One account's polls of a slow provider (2s an answer) leave the other
// accounts theirs, over two poller replicas, each its own process, one
// killed mid-run: acme's events complete within seconds while tardy's 60
// wait on their provider (old code, one worker pool fed in stream order:
// 30s and more).
func TestSlowAccountsPollsLeaveTheOthersTheirs(t *testing.T) {
	t.Parallel()
	w, slow := slowWorld(t, worldOpts{poller: ", concurrency: 8",
		extraConfig: "http: {addr: \"127.0.0.1:0\"}\nauth: {disabled: true}\n"})
	victim := w.twoPollers()

	w.submitSlow(slow, 60)
	polled := len(slow.PollCalls())
	natstest.Eventually(t, 30*time.Second, func() bool { return len(slow.PollCalls()) >= polled+16 }, "want tardy's slow polls under way")
	victim.Kill(t)

	took := w.acmeTakes()
	if took > 8*time.Second {
		t.Fatalf("want acme's events polled to done within 8s beside tardy's slow polls, took %s", took.Round(time.Millisecond))
	}
	t.Logf("acme's events done in %s; %d polls of tardy's", took.Round(time.Millisecond), len(slow.PollCalls()))
}

// An account with more timers due than a replica's workers can take
// holds at most its share of the consumer's ack window (8 per worker)
// and has the rest put off, so the ack window, which every account of the
// partition shares, keeps room for the others: with a window of 24 and 2
// workers, tardy's 80 slow events hold 16, and acme's events complete
// within seconds (old code: tardy's timers fill the window and acme's
// wait behind them). tardy's events go on being polled, and its crowd
// comes back at most 16 a poll interval (1s), not all 64 (a write each)
// every interval.
func TestCrowdedAccountLeavesTheAckWindowToOthers(t *testing.T) {
	t.Parallel()
	w, slow := slowWorld(t, worldOpts{poller: ", concurrency: 2"})
	// The window as an operator would set it on the consumer, kept by a
	// poller that does not apply the layout.
	cons, err := w.JS.Consumer(w.Ctx(), w.Subj.EventsStream("acme"), names.ConsumerPoller)
	if err != nil {
		t.Fatal(err)
	}
	cfg := cons.CachedInfo().Config
	cfg.MaxAckPending = 24
	if _, err := w.JS.UpdateConsumer(w.Ctx(), w.Subj.EventsStream("acme"), cfg); err != nil {
		t.Fatal(err)
	}
	nc, _ := w.Srv.Conn(t)
	p, err := poller.New(poller.Options{Conn: nc, Config: w.cfg, Instance: "p1", NoReconciler: true, SkipStreams: true, Metrics: w.mx})
	if err != nil {
		t.Fatal(err)
	}
	servicetest.Run(t, w.Ctx(), p)

	tardy := w.submitSlow(slow, 80)
	polled := len(slow.PollCalls())
	natstest.Eventually(t, 30*time.Second, func() bool {
		info, err := cons.Info(w.Ctx())
		return err == nil && info.NumAckPending >= 16 && len(slow.PollCalls()) > polled
	}, "want tardy's slow polls under way, its timers held")

	took := w.acmeTakes()
	if took > 8*time.Second {
		t.Fatalf("want acme's events polled to done within 8s beside tardy's crowd, took %s", took.Round(time.Millisecond))
	}
	if info, err := cons.Info(w.Ctx()); err != nil || info.Config.MaxAckPending != 24 {
		t.Fatalf("want the window of 24 kept throughout, got %+v (%v)", info, err)
	}
	polled = len(slow.PollCalls())
	offBefore, since := w.putOff("tardy", metrics.PutOffCrowded), time.Now()
	natstest.Eventually(t, 30*time.Second, func() bool { return len(slow.PollCalls()) >= polled+4 }, "want tardy's events still polled")
	for _, id := range tardy {
		if st := w.Record(id).Status; st != state.Polling {
			t.Fatalf("tardy's event %s: want it polling still, got %s", id, st)
		}
	}
	// 16 back an interval, two intervals' worth more for the window's
	// ends and for timers fired late into it (a loaded server), and one
	// for each poll that ended and set its next timer.
	off, secs := w.putOff("tardy", metrics.PutOffCrowded)-offBefore, time.Since(since).Seconds()
	if bound := 16*(secs+2) + secs; off > bound {
		t.Fatalf("want tardy's crowd back at most 16 a second, got %.0f put off in %.1fs (bound %.0f)", off, secs, bound)
	}
	if acme := w.putOff("acme", metrics.PutOffCrowded); off < 1 || acme != 0 {
		t.Fatalf("want tardy's timers counted as put off for its crowd, acme's not: got %v and %v", off, acme)
	}
	t.Logf("acme's events done in %s; tardy's crowd: %.0f put off in %.1fs", took.Round(time.Millisecond), off, secs)
}

// A killed poller replica's timers, waiting in its lines or running, come
// back to the others within the consumer's ack wait (15 s): they are kept
// alive while held, so the ack wait need not cover the longest wait or
// poll. Two poller processes share tardy's 30 slow events (1 s an
// answer, more than their workers take); once p1 is killed, every one
// of the events is polled again within 35 s (old code: an ack wait of
// 60 s, and the killed replica's timers waited all of it).
func TestKilledPollersTimersComeBackSoon(t *testing.T) {
	t.Parallel()
	w, slow := slowWorld(t, worldOpts{poller: ", concurrency: 4",
		extraConfig: "http: {addr: \"127.0.0.1:0\"}\nauth: {disabled: true}\n"})
	victim := w.twoPollers()

	keys := make([]string, 30)
	for i := range keys {
		keys[i] = fmt.Sprintf("k-%d", i)
	}
	w.WaitAll(w.Submit("tardy", "slow.fetch", keys, approved), state.Polling, time.Minute)
	slow.SetFaults(provider.Faults{PollAfter: 1000, Latency: time.Second})
	polled := len(slow.PollCalls())
	natstest.Eventually(t, 30*time.Second, func() bool { return len(slow.PollCalls()) >= polled+12 }, "want both replicas polling")
	victim.Kill(t)
	killed := time.Now()

	again := func() int {
		paths := map[string]bool{}
		for _, c := range slow.PollCalls() {
			if c.At.After(killed) {
				paths[c.Path] = true
			}
		}
		return len(paths)
	}
	natstest.Eventually(t, 35*time.Second, func() bool { return again() == len(keys) },
		"want each of tardy's %d events polled again within 35 s of the kill, got %v", len(keys), natstest.Lazy(func() any { return again() }))
	t.Logf("every event polled again %s after the kill", time.Since(killed).Round(time.Second))
}
