package breaker_test

import (
	"errors"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/breaker"
	"github.com/tenaz/tenaz/pkg/natstest"
)

// An operator opens a closed breaker by hand until a time: every replica
// refuses calls until then, OpenUntil of the account says so (another
// account's says nothing), a probe in flight is superseded, and once the
// time has passed exactly one probe decides, as after any cooldown.
func TestOperatorOpenUntilATime(t *testing.T) {
	t.Parallel()
	e := setup(t, 2)
	cfg := breaker.Config{Failures: 3, Cooldown: time.Minute}
	b1 := e.reps[0].reg.For(account, target, cfg)
	b2 := e.reps[1].reg.For(account, target, cfg)
	other := e.reps[0].reg.For("globex", target, cfg)
	call(t, b1, false) // one failure counted: kept by the manual open

	until := e.clk.Now().Add(time.Hour)
	if err := e.reps[1].reg.Open(ctx(t), account, target, until, "operator:alice", "provider maintenance"); err != nil {
		t.Fatalf("Open: %v", err)
	}
	waitState(t, breaker.Open, until, b1, b2)
	for i, b := range []*breaker.Breaker{b1, b2} {
		if p := allow(t, b); p.OK || !p.RetryAt.Equal(until) {
			t.Fatalf("replica %d: want a refusal until %v, got %+v", i+1, until, p)
		}
	}
	if p := allow(t, other); !p.OK {
		t.Fatalf("globex's breaker: want it untouched, got %+v", p)
	}
	for i, r := range e.reps {
		if got := r.reg.OpenUntil(account); !got.Equal(until) {
			t.Fatalf("replica %d OpenUntil(acme): want %v, got %v", i+1, until, got)
		}
		if got := r.reg.OpenUntil("globex"); !got.IsZero() {
			t.Fatalf("replica %d OpenUntil(globex): want zero, got %v", i+1, got)
		}
	}
	v, _ := e.value(t)
	if v["reason"] != "opened by operator:alice: provider maintenance" || v["failures"] != float64(1) || v["updated_by"] != "r2" {
		t.Fatalf("stored value: want the operator and the reason, the failure kept, by r2, got %v", v)
	}
	advs := e.advisories()
	if len(advs) != 1 || advs[0].subject != "tenaz.advisory.breaker.acme.erp" {
		t.Fatalf("advisories: want one on tenaz.advisory.breaker.acme.erp, got %+v", advs)
	}

	// Within the hour nothing passes, not even after the configured cooldown.
	e.clk.Advance(cfg.Cooldown + time.Second)
	if p := allow(t, b1); p.OK {
		t.Fatalf("after the configured cooldown, before the operator's time: want a refusal, got %+v", p)
	}
	// After it, one probe; an operator opening again meanwhile supersedes it.
	e.clk.Advance(time.Hour)
	p := probe(t, b2)
	waitState(t, breaker.HalfOpen, time.Time{}, b1)
	again := e.clk.Now().Add(10 * time.Minute)
	if err := e.reps[0].reg.Open(ctx(t), account, target, again, "operator:bob", "not yet"); err != nil {
		t.Fatalf("Open while probing: %v", err)
	}
	waitState(t, breaker.Open, again, b1, b2)
	record(t, b2, p, true) // the superseded probe's success is ignored
	if st, u := b1.State(); st != breaker.Open || !u.Equal(again) {
		t.Fatalf("after the superseded probe: want open until %v, got %s %v", again, st, u)
	}
	e.clk.Advance(10 * time.Minute)
	record(t, b1, probe(t, b1), true)
	waitState(t, breaker.Closed, time.Time{}, b1, b2)

	if err := e.reps[0].reg.Open(ctx(t), account, target, e.clk.Now(), "operator:bob", "now"); !errors.Is(err, breaker.ErrPast) {
		t.Fatalf("Open until now: want ErrPast, got %v", err)
	}
	if err := e.reps[0].reg.Open(ctx(t), "ac.me", target, until, "operator:bob", "x"); !errors.Is(err, breaker.ErrInvalidName) {
		t.Fatalf("Open of a bad account: want ErrInvalidName, got %v", err)
	}
}

// A replica that only reads the breakers (the poller) learns from its
// watch how long an account's breaker for a target holds it, without
// making or writing one: until the cooldown's end while it is open, and
// nothing for another account or target, nor once the time has passed.
func TestReaderHeldUntil(t *testing.T) {
	t.Parallel()
	e := setup(t, 2)
	reader := e.reps[1].reg
	if got := reader.HeldUntil(account, target); !got.IsZero() {
		t.Fatalf("before any breaker: want zero, got %v", got)
	}
	until := e.clk.Now().Add(time.Hour)
	if err := e.reps[0].reg.Open(ctx(t), account, target, until, "operator:alice", "provider maintenance"); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 10*time.Second, func() bool { return reader.HeldUntil(account, target).Equal(until) },
		"want the reader to hold acme's calls to erp until the operator's time")
	if got := reader.HeldUntil("globex", target); !got.IsZero() {
		t.Fatalf("globex: want zero, got %v", got)
	}
	if got := reader.HeldUntil(account, "crm"); !got.IsZero() {
		t.Fatalf("another target: want zero, got %v", got)
	}
	e.clk.Advance(time.Hour)
	if got := reader.HeldUntil(account, target); !got.IsZero() {
		t.Fatalf("after the time: want zero (one probe decides, a call's), got %v", got)
	}
	if n := e.writes(t); n != 1 {
		t.Fatalf("want the operator's one write, got %d", n)
	}
}
