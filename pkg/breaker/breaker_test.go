package breaker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/tenaz/tenaz/pkg/breaker"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const (
	account = "acme"
	target  = "erp"
	wait    = 10 * time.Second // bound of every wait on a condition
)

// clock is the injectable clock both replicas of a test share.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// replica is one registry, as one dispatcher replica would hold it, with
// what its OnChange received.
type replica struct {
	reg     *breaker.Registry
	mu      sync.Mutex
	changes []breaker.Change
}

func (r *replica) onChange(c breaker.Change) {
	r.mu.Lock()
	r.changes = append(r.changes, c)
	r.mu.Unlock()
}

func (r *replica) Changes() []breaker.Change {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.changes)
}

func (r *replica) String() string { return fmt.Sprint(r.States()) }

func (r *replica) States() []breaker.State {
	var out []breaker.State
	for _, c := range r.Changes() {
		out = append(out, c.State)
	}
	return out
}

type advisory struct {
	subject string
	data    []byte
}

// env is one embedded server with n replicas on their own connections.
type env struct {
	srv   *natstest.Server
	js    jetstream.JetStream
	clk   *clock
	reps  []*replica
	advMu sync.Mutex
	advs  []advisory
}

func setup(t *testing.T, n int) *env {
	t.Helper()
	e := &env{srv: natstest.Start(t), clk: &clock{t: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}}
	_, e.js = e.srv.Conn(t)
	for range n {
		e.add(t)
	}
	return e
}

// add starts one more replica.
func (e *env) add(t *testing.T) *replica {
	t.Helper()
	_, js := e.srv.Conn(t)
	rep := &replica{}
	reg, err := breaker.New(ctx(t), js, breaker.Options{
		Instance: fmt.Sprintf("r%d", len(e.reps)+1),
		Now:      e.clk.Now,
		OnChange: rep.onChange,
		Publish:  e.publish,
	})
	if err != nil {
		t.Fatalf("breaker.New: %v", err)
	}
	t.Cleanup(reg.Stop)
	rep.reg = reg
	e.reps = append(e.reps, rep)
	return rep
}

func (e *env) publish(subject string, data []byte) {
	e.advMu.Lock()
	e.advs = append(e.advs, advisory{subject, data})
	e.advMu.Unlock()
}

func (e *env) advisories() []advisory {
	e.advMu.Lock()
	defer e.advMu.Unlock()
	return slices.Clone(e.advs)
}

// writes is how many values were ever written to tenaz_breakers (the
// bucket stream's last sequence: every KV revision of every key).
func (e *env) writes(t *testing.T) uint64 {
	t.Helper()
	s, err := e.js.Stream(ctx(t), "KV_"+names.BucketBreakers)
	if err != nil {
		t.Fatalf("bucket stream: %v", err)
	}
	info, err := s.Info(ctx(t))
	if err != nil {
		t.Fatalf("bucket stream info: %v", err)
	}
	return info.State.LastSeq
}

// value reads the stored JSON of the breaker and its revision.
func (e *env) value(t *testing.T) (map[string]any, uint64) {
	t.Helper()
	kv, err := e.js.KeyValue(ctx(t), names.BucketBreakers)
	if err != nil {
		t.Fatal(err)
	}
	en, err := kv.Get(ctx(t), account+"."+target)
	if err != nil {
		t.Fatalf("get %s.%s: %v", account, target, err)
	}
	var v map[string]any
	if err := json.Unmarshal(en.Value(), &v); err != nil {
		t.Fatalf("stored value %s: %v", en.Value(), err)
	}
	return v, en.Revision()
}

func ctx(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func allow(t *testing.T, b *breaker.Breaker) breaker.Permit {
	t.Helper()
	p, err := b.Allow(ctx(t))
	if err != nil {
		t.Fatalf("Allow: %v", err)
	}
	return p
}

func record(t *testing.T, b *breaker.Breaker, p breaker.Permit, success bool) {
	t.Helper()
	if err := b.Record(ctx(t), p, success); err != nil {
		t.Fatalf("Record(%v): %v", success, err)
	}
}

// call makes one call through b with the given outcome; it must be allowed.
func call(t *testing.T, b *breaker.Breaker, success bool) {
	t.Helper()
	p := allow(t, b)
	if !p.OK || p.Probe {
		t.Fatalf("Allow: want an ordinary permit, got %+v", p)
	}
	record(t, b, p, success)
}

// probe takes the probe permit on b and claims it, as right before its
// call; both must be granted.
func probe(t *testing.T, b *breaker.Breaker) breaker.Permit {
	t.Helper()
	p := allow(t, b)
	if !p.OK || !p.Probe {
		t.Fatalf("Allow: want the probe permit, got %+v", p)
	}
	p, err := b.Claim(ctx(t), p)
	if err != nil || !p.OK || !p.Probe {
		t.Fatalf("Claim: want the probe claimed, got %+v, %v", p, err)
	}
	return p
}

// waitState waits until every breaker's local view is st (with openUntil,
// when not zero).
func waitState(t *testing.T, st breaker.State, openUntil time.Time, bs ...*breaker.Breaker) {
	t.Helper()
	for i, b := range bs {
		natstest.Eventually(t, wait, func() bool {
			got, until := b.State()
			return got == st && (openUntil.IsZero() || until.Equal(openUntil))
		}, "breaker %d: want state %s (open until %v)", i, st, openUntil)
	}
}

// waitChanges waits until the replica's OnChange has received n changes.
func waitChanges(t *testing.T, r *replica, n int) {
	t.Helper()
	natstest.Eventually(t, wait, func() bool { return len(r.Changes()) >= n },
		"replica: want %d changes, have %v", n, r)
}

// steady checks that the bucket is not written to over d.
func (e *env) steady(t *testing.T, d time.Duration) {
	t.Helper()
	before := e.writes(t)
	deadline := time.Now().Add(d)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		<-tick.C
		if now := e.writes(t); now != before {
			t.Fatalf("the bucket was written while nothing happened: %d writes, then %d", before, now)
		}
	}
}

func TestThresholdOpensAfterConsecutiveFailures(t *testing.T) {
	t.Parallel()
	e := setup(t, 1)
	b := e.reps[0].reg.For(account, target, breaker.Config{Failures: 3, Cooldown: time.Minute})

	call(t, b, true) // a success with no failure before: nothing to write
	if n := e.writes(t); n != 0 {
		t.Fatalf("a success with no failure counted: want 0 writes, got %d", n)
	}
	call(t, b, false)
	call(t, b, false)
	call(t, b, true) // a success in between resets the count
	call(t, b, false)
	call(t, b, false)
	if st, _ := b.State(); st != breaker.Closed {
		t.Fatalf("after 2 failures, a success, 2 failures (threshold 3): want closed, got %s", st)
	}
	if v, _ := e.value(t); v["state"] != "closed" || v["failures"] != float64(2) {
		t.Fatalf("stored value: want closed with the shared count at 2, got %v", v)
	}
	if n := e.writes(t); n != 5 {
		t.Fatalf("a closed breaker: want one write per failure and one for the reset, 5, got %d", n)
	}

	call(t, b, false) // the third in a row
	st, until := b.State()
	want := e.clk.Now().Add(time.Minute)
	if st != breaker.Open || !until.Equal(want) {
		t.Fatalf("after 3 failures in a row: want open until %v, got %s until %v", want, st, until)
	}
	if n := e.writes(t); n != 6 {
		t.Fatalf("opening: want exactly 1 write more (6), got %d", n)
	}
	v, _ := e.value(t)
	if v["state"] != "open" || v["failures"] != float64(3) || v["updated_by"] != "r1" ||
		v["open_until"] != want.Format(time.RFC3339Nano) || v["opened_at"] == nil || v["reason"] == "" {
		t.Fatalf("stored value: want state open, failures 3, updated_by r1, open_until %s, opened_at, reason; got %v",
			want.Format(time.RFC3339Nano), v)
	}
	if p := allow(t, b); p.OK || !p.RetryAt.Equal(want) {
		t.Fatalf("Allow while open: want refused until %v, got %+v", want, p)
	}
}

func TestOpenRefusesOnEveryReplica(t *testing.T) {
	t.Parallel()
	e := setup(t, 2)
	cfg := breaker.Config{Failures: 2, Cooldown: 5 * time.Minute}
	b1 := e.reps[0].reg.For(account, target, cfg)
	b2 := e.reps[1].reg.For(account, target, cfg)

	// The count is shared: one failure on each replica is two, and opens
	// it (b2's write loses to b1's count if b2 has not seen it yet, and
	// counts again on top of it).
	call(t, b1, false)
	if st, _ := b1.State(); st != breaker.Closed {
		t.Fatalf("one failure (threshold 2): want closed, got %s", st)
	}
	openUntil := e.clk.Now().Add(cfg.Cooldown)
	call(t, b2, false)
	waitState(t, breaker.Open, openUntil, b1, b2) // b2 learns it through the watch

	for i, b := range []*breaker.Breaker{b1, b2} {
		p := allow(t, b)
		if p.OK || p.Probe || !p.RetryAt.Equal(openUntil) {
			t.Fatalf("replica %d Allow while open: want refused with RetryAt %v, got %+v", i+1, openUntil, p)
		}
	}
	// Still refused a moment before open_until, on both, with no write.
	e.clk.Advance(cfg.Cooldown - time.Millisecond)
	for i, b := range []*breaker.Breaker{b1, b2} {
		if p := allow(t, b); p.OK || !p.RetryAt.Equal(openUntil) {
			t.Fatalf("replica %d Allow 1ms before open_until: want refused until %v, got %+v", i+1, openUntil, p)
		}
	}
	if n := e.writes(t); n != 2 {
		t.Fatalf("refusals must not write: want 2 writes (the count, the open), got %d", n)
	}
}

func TestExactlyOneProbeAcrossReplicas(t *testing.T) {
	t.Parallel()
	e := setup(t, 2)
	cfg := breaker.Config{Failures: 1, Cooldown: time.Minute, ProbeTimeout: 20 * time.Second}
	bs := []*breaker.Breaker{e.reps[0].reg.For(account, target, cfg), e.reps[1].reg.For(account, target, cfg)}

	call(t, bs[0], false)
	openUntil := e.clk.Now().Add(cfg.Cooldown)
	const rounds = 40
	for round := range rounds {
		waitState(t, breaker.Open, openUntil, bs...)
		e.clk.Advance(cfg.Cooldown)
		now := e.clk.Now()
		before := e.writes(t)

		callers := 2
		if round%2 == 1 {
			callers = 5
		}
		permits := make([]breaker.Permit, callers)
		owners := make([]*breaker.Breaker, callers)
		errs := make([]error, callers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range callers {
			owners[i] = bs[(i+round)%2]
			wg.Go(func() {
				<-start
				permits[i], errs[i] = owners[i].Allow(ctx(t))
			})
		}
		close(start)
		wg.Wait()

		var offered []int
		perReplica := map[*breaker.Breaker]int{}
		for i, p := range permits {
			if errs[i] != nil {
				t.Fatalf("round %d caller %d: Allow: %v", round, i, errs[i])
			}
			switch {
			case p.OK && p.Probe:
				offered = append(offered, i)
				perReplica[owners[i]]++
			case p.OK:
				t.Fatalf("round %d caller %d: an ordinary permit while half-open: %+v", round, i, p)
			case !p.RetryAt.After(now) || p.RetryAt.After(now.Add(cfg.ProbeTimeout)):
				t.Fatalf("round %d caller %d: refused with RetryAt %v, want in (%v, %v]", round, i, p.RetryAt, now, now.Add(cfg.ProbeTimeout))
			}
		}
		for b, n := range perReplica {
			if n != 1 {
				t.Fatalf("round %d: %d probe permits offered on %v at once, want 1", round, n, b)
			}
		}
		if n := e.writes(t); n != before {
			t.Fatalf("round %d: offering a probe permit wrote %d times", round, n-before)
		}

		// Each caller offered one claims it right before its call: one wins.
		start = make(chan struct{})
		for _, i := range offered {
			wg.Go(func() {
				<-start
				permits[i], errs[i] = owners[i].Claim(ctx(t), permits[i])
			})
		}
		close(start)
		wg.Wait()
		var probes []int
		for _, i := range offered {
			switch {
			case errs[i] == nil && permits[i].OK && permits[i].Probe:
				probes = append(probes, i)
			case !errors.Is(errs[i], breaker.ErrProbeLost) || permits[i].OK:
				t.Fatalf("round %d caller %d: a lost claim: want ErrProbeLost, got %+v, %v", round, i, permits[i], errs[i])
			}
		}
		if len(probes) != 1 {
			t.Fatalf("round %d, %d callers on 2 replicas: want exactly 1 probe claimed, got %d (%+v)", round, callers, len(probes), permits)
		}
		if n := e.writes(t); n != before+1 {
			t.Fatalf("round %d: the probe claim is one write: want %d writes, got %d", round, before+1, n)
		}
		v, _ := e.value(t)
		if v["state"] != "half_open" || v["prober"] == "" || v["probe_until"] != now.Add(cfg.ProbeTimeout).Format(time.RFC3339Nano) {
			t.Fatalf("round %d: stored value: want half_open with a prober until %v, got %v", round, now.Add(cfg.ProbeTimeout), v)
		}

		p, winner := permits[probes[0]], owners[probes[0]]
		if round == rounds-1 {
			record(t, winner, p, true)
			waitState(t, breaker.Closed, time.Time{}, bs...)
			break
		}
		record(t, winner, p, false)
		openUntil = e.clk.Now().Add(cfg.Cooldown)
	}
}

func TestProbeOutcome(t *testing.T) {
	t.Parallel()
	e := setup(t, 2)
	cfg := breaker.Config{Failures: 2, Cooldown: time.Minute}
	b1 := e.reps[0].reg.For(account, target, cfg)
	b2 := e.reps[1].reg.For(account, target, cfg)

	call(t, b1, false)
	call(t, b1, false)
	firstUntil := e.clk.Now().Add(cfg.Cooldown)
	waitState(t, breaker.Open, firstUntil, b1, b2)

	// Probe failure re-opens it, everywhere, with a new open_until.
	e.clk.Advance(cfg.Cooldown + time.Second)
	p := probe(t, b2)
	waitState(t, breaker.HalfOpen, time.Time{}, b1, b2)
	record(t, b2, p, false)
	secondUntil := e.clk.Now().Add(cfg.Cooldown)
	if !secondUntil.After(firstUntil) {
		t.Fatalf("test clock: %v must be after %v", secondUntil, firstUntil)
	}
	waitState(t, breaker.Open, secondUntil, b1, b2)
	for i, b := range []*breaker.Breaker{b1, b2} {
		if p := allow(t, b); p.OK || !p.RetryAt.Equal(secondUntil) {
			t.Fatalf("replica %d after a failed probe: want refused until %v, got %+v", i+1, secondUntil, p)
		}
	}
	if v, _ := e.value(t); v["failures"] != float64(3) || v["reason"] != "probe failed" {
		t.Fatalf("stored value after a failed probe: want failures 3, reason \"probe failed\"; got %v", v)
	}

	// Probe success closes it everywhere and resets the counts.
	e.clk.Advance(cfg.Cooldown)
	p = probe(t, b1)
	record(t, b1, p, true)
	waitState(t, breaker.Closed, time.Time{}, b1, b2)
	for i, b := range []*breaker.Breaker{b1, b2} {
		if p := allow(t, b); !p.OK || p.Probe {
			t.Fatalf("replica %d after a successful probe: want an ordinary permit, got %+v", i+1, p)
		}
	}
	if v, _ := e.value(t); v["state"] != "closed" || v["failures"] != float64(0) {
		t.Fatalf("stored value after a successful probe: want closed with failures 0, got %v", v)
	}
	call(t, b1, false) // one failure after the reset is not two
	if st, _ := b1.State(); st != breaker.Closed {
		t.Fatalf("one failure after a successful probe (threshold 2): want closed, got %s", st)
	}
	call(t, b1, false)
	waitState(t, breaker.Open, time.Time{}, b1, b2)
}

// cooledDown is a breaker of one failure on two replicas, opened by r1
// and its cooldown over: the probe is due.
func cooledDown(t *testing.T) (e *env, cfg breaker.Config, b1, b2 *breaker.Breaker) {
	t.Helper()
	e = setup(t, 2)
	cfg = breaker.Config{Failures: 1, Cooldown: time.Minute, ProbeTimeout: 45 * time.Second}
	b1 = e.reps[0].reg.For(account, target, cfg)
	b2 = e.reps[1].reg.For(account, target, cfg)
	call(t, b1, false)
	waitState(t, breaker.Open, time.Time{}, b1, b2)
	e.clk.Advance(cfg.Cooldown)
	return e, cfg, b1, b2
}

func TestCrashedProberExpires(t *testing.T) {
	t.Parallel()
	e, cfg, b1, b2 := cooledDown(t)
	crashed := probe(t, b1) // r1 takes the probe and never records it
	waitState(t, breaker.HalfOpen, time.Time{}, b1, b2)

	for i, b := range []*breaker.Breaker{b1, b2} {
		p := allow(t, b)
		now := e.clk.Now()
		if p.OK || !p.RetryAt.After(now) || p.RetryAt.After(now.Add(cfg.ProbeTimeout)) {
			t.Fatalf("replica %d while r1 probes: want refused with a RetryAt soon, got %+v", i+1, p)
		}
	}
	e.clk.Advance(cfg.ProbeTimeout - time.Millisecond)
	if p := allow(t, b2); p.OK {
		t.Fatalf("1ms before the claim expires: want refused, got %+v", p)
	}

	e.clk.Advance(time.Millisecond)
	before := e.writes(t)
	takeover := probe(t, b2)
	if n := e.writes(t); n != before+1 {
		t.Fatalf("taking over an expired claim: want 1 write, got %d", n-before)
	}
	if v, _ := e.value(t); v["prober"] != "r2" {
		t.Fatalf("after the takeover: want prober r2, got %v", v)
	}
	if p := allow(t, b1); p.OK {
		t.Fatalf("while r2 probes: want r1 refused, got %+v", p)
	}

	// The crashed probe's late outcome is ignored: nothing is written.
	before = e.writes(t)
	record(t, b1, crashed, true)
	if n := e.writes(t); n != before {
		t.Fatalf("a superseded probe's outcome must not be written: %d writes", n-before)
	}
	if v, _ := e.value(t); v["state"] != "half_open" {
		t.Fatalf("after the superseded outcome: want still half_open, got %v", v)
	}

	record(t, b2, takeover, true)
	waitState(t, breaker.Closed, time.Time{}, b1, b2)
	// A new prober is not a transition: each replica saw open, half_open, closed.
	for i, r := range e.reps {
		waitChanges(t, r, 3)
		if got, want := r.States(), []breaker.State{breaker.Open, breaker.HalfOpen, breaker.Closed}; !slices.Equal(got, want) {
			t.Fatalf("replica %d OnChange: want %v, got %v", i+1, want, got)
		}
	}
}

// A probe is claimed right before its call, not when it is allowed: a
// caller that waits for its turn (a target's slot, its account's pace)
// longer than a claim lasts still makes the only probe. Claimed when
// allowed, its claim expired while it waited, another caller took it
// over, and both called.
func TestAProbeIsClaimedRightBeforeItsCall(t *testing.T) {
	t.Parallel()
	e, cfg, b1, b2 := cooledDown(t)

	before := e.writes(t)
	waiting := allow(t, b1)
	if !waiting.OK || !waiting.Probe {
		t.Fatalf("after the cooldown: want a probe permit, got %+v", waiting)
	}
	if p := allow(t, b1); p.OK {
		t.Fatalf("a second caller here while the first waits: want refused, got %+v", p)
	}
	e.clk.Advance(cfg.ProbeTimeout + time.Second) // the first still waits for its turn
	later := allow(t, b1)
	other := allow(t, b2)
	if !later.Probe || !other.Probe {
		t.Fatalf("once a permit's time passed: want it offered again here and there, got %+v and %+v", later, other)
	}
	if n := e.writes(t); n != before {
		t.Fatalf("offering probe permits wrote %d times, want none", n-before)
	}

	claimed, err := b1.Claim(ctx(t), waiting)
	if err != nil || !claimed.OK || !claimed.Probe {
		t.Fatalf("the first to claim: want the probe, got %+v, %v", claimed, err)
	}
	for i, c := range []struct {
		b *breaker.Breaker
		p breaker.Permit
	}{{b1, later}, {b2, other}} {
		if p, err := c.b.Claim(ctx(t), c.p); !errors.Is(err, breaker.ErrProbeLost) || p.OK {
			t.Fatalf("caller %d claims after the probe went: want ErrProbeLost, got %+v, %v", i+1, p, err)
		}
	}
	if v, _ := e.value(t); v["prober"] != "r1" || v["state"] != "half_open" {
		t.Fatalf("after the claims: want half_open probed by r1, got %v", v)
	}
	// A permit never claimed records nothing; the claimed one decides.
	record(t, b2, other, true)
	if st, _ := b2.State(); st != breaker.HalfOpen {
		t.Fatalf("the outcome of an unclaimed permit: want still half_open, got %s", st)
	}
	record(t, b1, claimed, true)
	waitState(t, breaker.Closed, time.Time{}, b1, b2)
}

func TestNoWriteBackLoop(t *testing.T) {
	t.Parallel()
	e := setup(t, 2)
	cfg := breaker.Config{Failures: 1, Cooldown: time.Minute}
	b1 := e.reps[0].reg.For(account, target, cfg)
	b2 := e.reps[1].reg.For(account, target, cfg)
	const quiet = 300 * time.Millisecond

	step := func(name string, want breaker.State, changes int, writes uint64) {
		t.Helper()
		waitState(t, want, time.Time{}, b1, b2)
		for _, r := range e.reps {
			waitChanges(t, r, changes)
		}
		// Both watchers have applied the latest value; nothing may follow.
		e.steady(t, quiet)
		if n := e.writes(t); n != writes {
			t.Fatalf("%s: want exactly %d writes in all, got %d", name, writes, n)
		}
		if _, rev := e.value(t); rev != writes {
			t.Fatalf("%s: want the key at revision %d, got %d", name, writes, rev)
		}
	}

	call(t, b1, false)
	step("open", breaker.Open, 1, 1)
	e.clk.Advance(cfg.Cooldown)
	p := probe(t, b2)
	step("half_open", breaker.HalfOpen, 2, 2)
	record(t, b2, p, false)
	step("re-open", breaker.Open, 3, 3)
	e.clk.Advance(cfg.Cooldown)
	p = probe(t, b1)
	step("half_open again", breaker.HalfOpen, 4, 4)
	record(t, b1, p, true)
	step("closed", breaker.Closed, 5, 5)
	call(t, b2, false)
	step("open by r2", breaker.Open, 6, 6)
	if err := e.reps[0].reg.Close(ctx(t), account, target, "ops"); err != nil {
		t.Fatal(err)
	}
	step("operator close", breaker.Closed, 7, 7)
}

func TestOnChangeOncePerTransitionAndOperatorClose(t *testing.T) {
	t.Parallel()
	e := setup(t, 2)
	cfg := breaker.Config{Failures: 1, Cooldown: time.Minute}
	b1 := e.reps[0].reg.For(account, target, cfg)
	b2 := e.reps[1].reg.For(account, target, cfg)

	// Each step waits until both replicas have reported it before the next
	// write, so every value reaches both watchers (the bucket keeps only
	// the latest).
	n := 0
	step := func(st breaker.State) {
		t.Helper()
		n++
		waitState(t, st, time.Time{}, b1, b2)
		for _, r := range e.reps {
			waitChanges(t, r, n)
		}
	}
	call(t, b1, false)
	step(breaker.Open)
	e.clk.Advance(cfg.Cooldown)
	p := probe(t, b2)
	step(breaker.HalfOpen)
	record(t, b2, p, false)
	step(breaker.Open)
	if _, until := b1.State(); !until.Equal(e.clk.Now().Add(cfg.Cooldown)) {
		t.Fatalf("re-opened: want open until %v, got %v", e.clk.Now().Add(cfg.Cooldown), until)
	}
	e.clk.Advance(cfg.Cooldown)
	p = probe(t, b1)
	step(breaker.HalfOpen)
	record(t, b1, p, true)
	step(breaker.Closed)
	call(t, b2, false)
	step(breaker.Open)

	// An operator closes it from r2: closed everywhere, calls flow again.
	if err := e.reps[1].reg.Close(ctx(t), account, target, "alice"); err != nil {
		t.Fatalf("Close: %v", err)
	}
	step(breaker.Closed)
	for i, b := range []*breaker.Breaker{b1, b2} {
		if p := allow(t, b); !p.OK {
			t.Fatalf("replica %d after the operator's close: want a permit, got %+v", i+1, p)
		}
	}
	before := e.writes(t)
	if err := e.reps[0].reg.Close(ctx(t), account, target, "bob"); err != nil {
		t.Fatalf("Close of a closed breaker: %v", err)
	}
	if n := e.writes(t); n != before {
		t.Fatalf("closing a closed breaker must not write: %d writes", n-before)
	}

	want := []breaker.State{breaker.Open, breaker.HalfOpen, breaker.Open, breaker.HalfOpen, breaker.Closed, breaker.Open, breaker.Closed}
	for i, r := range e.reps {
		waitChanges(t, r, len(want))
		got := r.Changes()
		if states := r.States(); !slices.Equal(states, want) {
			t.Fatalf("replica %d OnChange: want %v (once each), got %v", i+1, want, states)
		}
		for j, c := range got {
			from := breaker.Closed
			if j > 0 {
				from = want[j-1]
			}
			if c.Account != account || c.Target != target || c.From != from || c.At.IsZero() || c.By == "" {
				t.Fatalf("replica %d change %d: want %s.%s from %s with At and By, got %+v", i+1, j, account, target, from, c)
			}
			if (c.State == breaker.Closed) != c.OpenUntil.IsZero() {
				t.Fatalf("replica %d change %d: OpenUntil must be set unless closed: %+v", i+1, j, c)
			}
		}
		if last := got[len(got)-1]; last.Reason != "closed by alice" || last.By != "r2" {
			t.Fatalf("replica %d: the operator's close: want reason \"closed by alice\" by r2, got %+v", i+1, last)
		}
	}

	// The writer of each transition published its advisory: one per
	// transition across both replicas.
	advs := e.advisories()
	if len(advs) != len(want) {
		t.Fatalf("advisories: want %d (one per transition), got %d", len(want), len(advs))
	}
	for j, a := range advs {
		if a.subject != "tenaz.advisory.breaker.acme.erp" {
			t.Fatalf("advisory %d subject: want tenaz.advisory.breaker.acme.erp, got %s", j, a.subject)
		}
		var v struct {
			Account, Target, State string
		}
		if err := json.Unmarshal(a.data, &v); err != nil || v.Account != account || v.Target != target || v.State != string(want[j]) {
			t.Fatalf("advisory %d: want %s for %s.%s, got %s (%v)", j, want[j], account, target, a.data, err)
		}
	}
}

func TestLateReplicaLearnsOpenBreaker(t *testing.T) {
	t.Parallel()
	e := setup(t, 1)
	b1 := e.reps[0].reg.For(account, target, breaker.Config{Failures: 1})
	call(t, b1, false)
	openUntil := e.clk.Now().Add(breaker.DefaultCooldown)

	late := e.add(t) // New returns once the current values are loaded
	if got := late.Changes(); len(got) != 1 || got[0].State != breaker.Open || !got[0].OpenUntil.Equal(openUntil) {
		t.Fatalf("a replica starting while the breaker is open: want one OnChange(open until %v) before New returns, got %+v", openUntil, got)
	}
	list := late.reg.List()
	if len(list) != 1 || list[0].Account != account || list[0].Target != target || list[0].State != breaker.Open || list[0].Reason == "" {
		t.Fatalf("List on the late replica: want the open %s.%s, got %+v", account, target, list)
	}
	b := late.reg.For(account, target, breaker.Config{})
	if p := allow(t, b); p.OK || !p.RetryAt.Equal(openUntil) {
		t.Fatalf("late replica Allow: want refused until %v, got %+v", openUntil, p)
	}
}

func TestRealClockCooldown(t *testing.T) {
	t.Parallel()
	s := natstest.Start(t)
	_, js := s.Conn(t)
	reg, err := breaker.New(ctx(t), js, breaker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Stop)
	b := reg.For(account, target, breaker.Config{Failures: 1, Cooldown: 300 * time.Millisecond})
	call(t, b, false)
	if p := allow(t, b); p.OK {
		t.Fatalf("just opened: want refused, got %+v", p)
	}
	var p breaker.Permit
	natstest.Eventually(t, wait, func() bool { p = allow(t, b); return p.OK },
		"after a 300ms cooldown: want the probe permit")
	if !p.Probe {
		t.Fatalf("after the cooldown: want the probe permit, got %+v", p)
	}
	p, err = b.Claim(ctx(t), p)
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	record(t, b, p, true)
	if st, _ := b.State(); st != breaker.Closed {
		t.Fatalf("after a successful probe: want closed, got %s", st)
	}
	if inst := reg.Instance(); inst == "" {
		t.Fatal("default Instance: want a name, got \"\"")
	}
}

func TestStalePermitsAreIgnored(t *testing.T) {
	t.Parallel()
	e := setup(t, 1)
	b := e.reps[0].reg.For(account, target, breaker.Config{Failures: 2})
	inflight := allow(t, b) // a call still running when the breaker opens
	call(t, b, false)
	call(t, b, false)
	before := e.writes(t)
	record(t, b, inflight, false)
	record(t, b, breaker.Permit{}, false) // not OK: ignored
	if n := e.writes(t); n != before {
		t.Fatalf("outcomes of calls allowed before the breaker opened: want no write, got %d", n-before)
	}
	if st, _ := b.State(); st != breaker.Open {
		t.Fatalf("want open, got %s", st)
	}
}

func TestForConfigAndNames(t *testing.T) {
	t.Parallel()
	e := setup(t, 1)
	reg := e.reps[0].reg
	b := reg.For(account, target, breaker.Config{Failures: 3})
	if again := reg.For(account, target, breaker.Config{Failures: 3}); again != b {
		t.Fatal("For: want the same breaker for the same account and target")
	}
	if b.Account() != account || b.Target() != target {
		t.Fatalf("want %s.%s, got %s.%s", account, target, b.Account(), b.Target())
	}
	call(t, b, false)
	call(t, b, false)
	reg.For(account, target, breaker.Config{Failures: 1}) // a new threshold
	call(t, b, false)
	if st, _ := b.State(); st != breaker.Open {
		t.Fatalf("threshold lowered to 1, then a failure: want open, got %s", st)
	}

	for _, bad := range [][2]string{{"acme.x", "erp"}, {"acme", "erp.v2"}, {"", "erp"}, {"acme", "*"}, {"acme", ">"}} {
		bb := reg.For(bad[0], bad[1], breaker.Config{})
		if _, err := bb.Allow(ctx(t)); !errors.Is(err, breaker.ErrInvalidName) || !errors.Is(err, names.ErrInvalidName) {
			t.Errorf("For(%q, %q).Allow: want ErrInvalidName, got %v", bad[0], bad[1], err)
		}
		if err := bb.Record(ctx(t), breaker.Permit{OK: true}, false); !errors.Is(err, breaker.ErrInvalidName) {
			t.Errorf("For(%q, %q).Record: want ErrInvalidName, got %v", bad[0], bad[1], err)
		}
		if err := reg.Close(ctx(t), bad[0], bad[1], "ops"); !errors.Is(err, breaker.ErrInvalidName) {
			t.Errorf("Close(%q, %q): want ErrInvalidName, got %v", bad[0], bad[1], err)
		}
	}
	if l := reg.List(); len(l) != 1 {
		t.Fatalf("List: want only the valid breaker, got %+v", l)
	}
}

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	got := breaker.Config{Failures: -1}.WithDefaults()
	want := breaker.Config{Failures: 5, Cooldown: 2 * time.Minute, ProbeTimeout: 30 * time.Second}
	if got != want {
		t.Fatalf("WithDefaults: want %+v, got %+v", want, got)
	}
}

func TestAdvisoryJSON(t *testing.T) {
	t.Parallel()
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	got := string(breaker.Advisory(breaker.Change{
		Account: "acme", Target: "erp", State: breaker.Closed, From: breaker.HalfOpen,
		Reason: "probe succeeded", At: at, By: "r1",
	}))
	want := `{"account":"acme","target":"erp","state":"closed","from":"half_open","reason":"probe succeeded","failures":0,"by":"r1","at":"2030-01-02T03:04:05Z"}`
	if got != want {
		t.Fatalf("Advisory:\nwant %s\ngot  %s", want, got)
	}
}

// TestStopLeavesNoGoroutines is not parallel: goleak compares against the
// goroutines running before New, which parallel tests would disturb.
func TestStopLeavesNoGoroutines(t *testing.T) {
	s := natstest.Start(t)
	_, js := s.Conn(t)
	// A first JetStream request starts the connection's reply
	// subscription, which lives as long as the connection.
	if _, err := js.KeyValue(ctx(t), names.BucketBreakers); err != nil {
		t.Fatal(err)
	}
	ignore := goleak.IgnoreCurrent()

	reg, err := breaker.New(ctx(t), js, breaker.Options{Instance: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	b := reg.For(account, target, breaker.Config{Failures: 1})
	call(t, b, false)
	waitState(t, breaker.Open, time.Time{}, b)
	reg.Stop()
	reg.Stop() // idempotent
	goleak.VerifyNone(t, ignore)

	// A stopped registry's breakers still answer from what they knew.
	if p := allow(t, b); p.OK {
		t.Fatalf("after Stop: want the open breaker to refuse, got %+v", p)
	}
}
