package poller

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/accounts"
	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/live"
	"github.com/tenaz/tenaz/pkg/metrics"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/quota"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/target"
)

// A poll whose request cannot be made (its URL does not fit: the
// provider's reference, escaped and repeated, past 8 KiB) gives its
// target's token back: at 1/m, with one slot (bureau_a) or with the rate
// alone (bureau_b, whose token a poll takes without a slot), the next
// poll goes at once instead of being put off for a minute behind a token
// nothing used.
func TestAPollNotSentGivesItsTokenBack(t *testing.T) {
	t.Parallel()
	poll := `poll: {url: "http://127.0.0.1:1/jobs/` + strings.Repeat("{{.Reference}}", 12) + `", interval: 1s, done_when: {field: status, in: [done]}}`
	s, _ := startPoller(t, `
targets:
  bureau_a: {url: "http://127.0.0.1:1/x", rate: 1/m, concurrency: 1, `+poll+`}
  bureau_b: {url: "http://127.0.0.1:1/x", rate: 1/m, `+poll+`}
kinds:
  report.fetch: {target: bureau_a, completion: poll, poll_sla: 1h}
  report.other: {target: bureau_b, completion: poll, poll_sla: 1h}
`)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	env, err := event.New(event.Fields{Account: "acme", Kind: "report.fetch", IdempotencyKey: "k"}, []byte(`{}`), "", "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"bureau_a", "bureau_b"} {
		tgt, err := s.target(env.Account, name)
		if err != nil {
			t.Fatal(err)
		}
		var rec state.Record
		release, off, err := s.putOff(ctx, env, rec, name, time.Second)
		if off || err != nil {
			t.Fatalf("%s, the first poll: want it to go, got put off %v, %v", name, off, err)
		}
		_, perr := tgt.Poll(ctx, target.Request{Event: env, Reference: strings.Repeat("/", names.MaxKeyLen)})
		if !errors.Is(perr, target.ErrNotSent) {
			t.Fatalf("%s, a poll whose URL does not fit: want ErrNotSent, got %v", name, perr)
		}
		release(perr)
		release, off, err = s.putOff(ctx, env, rec, name, time.Second)
		if off || err != nil {
			t.Fatalf("%s, the poll after one that was not sent: want it to go at once, got put off %v, %v", name, off, err)
		}
		release(nil)
	}
}

// A pause that comes while a poll waits for its target's slot holds the
// poll too, and the slot it then gets goes back: with bureau A's one slot
// held, acme's next poll waits for it; acme is paused meanwhile; once the
// slot is free the poll is put off (paused), not made, and globex's poll
// takes the slot at once.
func TestAPauseDuringTheWaitForASlotHoldsThePoll(t *testing.T) {
	t.Parallel()
	s, js := startPoller(t, `
targets:
  bureau_a:
    url: "http://127.0.0.1:1/x"
    concurrency: 1
    poll: {url: "http://127.0.0.1:1/jobs/{{.Reference}}", interval: 1s, done_when: {field: status, in: [done]}}
kinds: {report.fetch: {target: bureau_a, completion: poll, poll_sla: 1h}}
`)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	envOf := func(account string) event.Envelope {
		env, err := event.New(event.Fields{Account: account, Kind: "report.fetch", IdempotencyKey: "k"}, []byte(`{}`), "", "", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return env
	}
	acme, globex := envOf("acme"), envOf("globex")
	var rec state.Record
	held, off, err := s.putOff(ctx, acme, rec, "bureau_a", time.Second)
	if off || err != nil {
		t.Fatalf("acme's first poll: want it to go, got put off %v, %v", off, err)
	}
	type put struct {
		release func(error)
		off     bool
		err     error
	}
	second := make(chan put, 1)
	go func() {
		r, off, err := s.putOff(ctx, acme, rec, "bureau_a", time.Second)
		second <- put{r, off, err}
	}()
	natstest.Eventually(t, 5*time.Second, func() bool {
		s.pace.mu.Lock()
		defer s.pace.mu.Unlock()
		for _, n := range s.pace.waiting {
			if n > 0 {
				return true
			}
		}
		return false
	}, "want acme's second poll waiting for bureau A's slot")
	pauses, err := accounts.OpenPauses(ctx, js, names.NewSubjects(""))
	if err != nil {
		t.Fatal(err)
	}
	if err := pauses.Set(ctx, accounts.Pause{Account: "acme", Actor: "operator:test", Reason: "bureau A asked", At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 5*time.Second, func() bool { until, _ := s.heldUntil("acme", "bureau_a", time.Second); return !until.IsZero() }, "want the poller to hear acme's pause")
	held(nil)
	got := <-second
	if got.err != nil || !got.off {
		if got.release != nil {
			got.release(nil)
		}
		t.Fatalf("acme's poll that waited for the slot through its pause: want it put off, got put off %v, %v", got.off, got.err)
	}
	start := time.Now()
	release, off, err := s.putOff(ctx, globex, rec, "bureau_a", time.Second)
	if off || err != nil {
		t.Fatalf("globex's poll: want it to take the slot acme's put-off poll gave back, got put off %v, %v", off, err)
	}
	if waited := time.Since(start); waited > 500*time.Millisecond {
		t.Errorf("globex's poll waited %s for a slot nothing held", waited)
	}
	release(nil)
}

// A left-out account (its stored definition not in force) polls with
// nothing: "*"'s poll URL and credentials are not its own. acme's poll
// is put off, and globex's goes.
func TestALeftOutAccountsPollsWait(t *testing.T) {
	t.Parallel()
	cfg := servicetest.Config(t, `
targets:
  bureau_a:
    url: "http://127.0.0.1:1/x"
    poll: {url: "http://127.0.0.1:1/jobs/{{.Reference}}", interval: 1s, done_when: {field: status, in: [done]}}
kinds: {report.fetch: {target: bureau_a, completion: poll, poll_sla: 1h}}
`, nil)
	srv := natstest.Start(t)
	nc, _ := srv.Conn(t)
	s, err := New(Options{Conn: nc, Config: cfg, Instance: "p1", Live: live.Static(cfg.Leaving(map[string]error{"acme": errors.New("sealing_key: cannot open")}))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	servicetest.Run(t, ctx, s)
	for _, c := range []struct {
		account string
		off     bool
	}{{"acme", true}, {"globex", false}} {
		env, err := event.New(event.Fields{Account: c.account, Kind: "report.fetch", IdempotencyKey: "k"}, []byte(`{}`), "", "", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		release, off, err := s.putOff(ctx, env, state.Record{}, "bureau_a", time.Second)
		if err != nil || off != c.off {
			t.Fatalf("%s's poll: want put off %v, got %v, %v", c.account, c.off, off, err)
		}
		if !off {
			release(nil)
		}
	}
}

// A poller whose heartbeat is late holds no slot of a target's
// concurrency: the dispatchers stop counting the slots of a replica they
// have not heard from, and give them to other calls, so a poll made with
// one would be past the target's concurrency. The poll is put off
// (not_current), as a dispatcher makes no call unless current.
func TestAPollerWhoseHeartbeatIsLateHoldsNoSlot(t *testing.T) {
	t.Parallel()
	s, _ := startPoller(t, `
targets:
  bureau: {url: "http://127.0.0.1:1/x", concurrency: 1, poll: {url: "http://127.0.0.1:1/jobs/{{.Reference}}", interval: 1s, done_when: {field: status, in: [done]}}}
kinds:
  report.fetch: {target: bureau, completion: poll, poll_sla: 1h}
`)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := s.live.Load()
	key, lim := quota.KeyOf(cfg, "acme", "bureau"), quota.OfTarget(cfg.Targets["bureau"])
	g, err := s.pace.slot(ctx, key, lim, time.Second, func() {})
	if err != nil || g.release == nil {
		t.Fatalf("a current poller: want the slot, got %+v, %v", g, err)
	}
	g.release(nil)
	// Its heartbeats stop getting through: the owners' bucket takes no
	// writes.
	st, err := s.js.Stream(ctx, "KV_"+names.BucketOwners)
	if err != nil {
		t.Fatal(err)
	}
	sc := st.CachedInfo().Config
	sc.Sealed = true
	if _, err := s.js.UpdateStream(ctx, sc); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 20*time.Second, func() bool { return !s.pace.g.Current() }, "want the poller's heartbeat late")
	g, err = s.pace.slot(ctx, key, lim, time.Second, func() {})
	if err != nil || g.release != nil || g.why != metrics.PutOffNotCurrent {
		t.Fatalf("a poller whose heartbeat is late: want the poll put off (not_current), got %+v, %v", g, err)
	}
}
