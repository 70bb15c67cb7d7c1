package chaos

import (
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/state"
)

// The generated tenaz.yaml is a valid config with every kind the plan
// submits.
func TestConfigIsValid(t *testing.T) {
	for _, o := range []Options{Full(), Short()} {
		y := tenazYAML(configParams{providers: "http://127.0.0.1:1", cooldown: o.Cooldown, callbackSLA: o.CallbackSLA, pollSLA: o.PollSLA, logLevel: "info"})
		cfg, err := config.Parse([]byte(y), func(k string) (string, bool) { return "dispatcher-1#1", k == envInstance })
		if err != nil {
			t.Fatalf("%s: want a valid config, got %v\n%s", o.Name, err, y)
		}
		for k := range stageTargets {
			if _, ok := cfg.Kind(k); !ok {
				t.Errorf("%s: kind %s is not configured", o.Name, k)
			}
		}
		if err := o.validate(); err != nil {
			t.Errorf("%s: %v", o.Name, err)
		}
		run, err := runConfig(y)
		if err != nil {
			t.Fatal(err)
		}
		lim := accountLimits(run, []string{ratedAccount, narrowAccount, "acct-03"})
		want := map[string]limits{ratedAccount: {accountConcurrency, ratedPerSecond}, narrowAccount: {narrowConcurrency, 0}, "acct-03": {accountConcurrency, 0}}
		if !maps.Equal(lim, want) {
			t.Errorf("%s: want the limits %v, got %v", o.Name, want, lim)
		}
		if got, want := targetConcurrency(run), map[string]int{targetBureauB: bureauBConcurrency}; !maps.Equal(got, want) {
			t.Errorf("%s: want the target limits %v, got %v", o.Name, want, got)
		}
	}
}

// The plan submits at least the events asked for, every kind, lanes of
// four in one job, and ids derived from account and key.
func TestPlan(t *testing.T) {
	jobs := plan(2000, []string{"a", "b"}, rand.New(rand.NewPCG(1, 1)))
	n, kinds, delayed := 0, map[string]int{}, 0
	for _, j := range jobs {
		for _, e := range j {
			n++
			kinds[e.kind]++
			if e.delay > 0 {
				delayed++
			}
			if len(j) > 1 && (e.kind != kindLane && e.kind != kindLaneCallback || e.lane != j[0].lane) {
				t.Fatalf("a job of %d events must be one lane, got %+v", len(j), e)
			}
		}
	}
	if n < 2000 || n > 2003 {
		t.Fatalf("want 2000 events (a lane may add up to 3), got %d", n)
	}
	for k := range stageTargets {
		if kinds[k] == 0 {
			t.Errorf("kind %s never planned", k)
		}
	}
	if delayed == 0 {
		t.Error("want delayed events")
	}
}

// checkBreakers: a call while open is counted, as are two probes within
// one cooldown; an outage with more failed calls before its opening than
// the bound (failures + concurrency - 1 + concurrency per stop of a
// dispatcher or nats-server), or with as many and no opening, is named.
func TestCheckBreakers(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	cooldown := 5 * time.Second
	outages := map[string]window{"a": {at(0), at(30)}, "b": {at(40), at(70)}, "c": {at(0), at(30)}, "d": {at(80), at(110)}}
	lim := map[string]limits{"a": {concurrency: 8}, "b": {concurrency: 8}, "c": {concurrency: 8}, "d": {concurrency: 2}}
	stops := []time.Time{at(1), at(5), at(9)} // three kills during a's and c's outages
	var calls []callRec
	down := func(acct, target string, s float64) {
		calls = append(calls, callRec{at: at(s), account: acct, target: target, down: true, sender: "dispatcher-1#1"})
	}
	for i := range 12 { // opening burst
		down("a", targetERP, 0.1*float64(i))
	}
	down("a", targetERP, 6.5)  // probe
	down("a", targetERP, 12.0) // probe, ≥ cooldown after
	down("a", targetERP, 14.0) // second call within a cooldown of the last probe (and while open)
	for i := range 18 {        // b never opens: 18 failures, 17 allowed with no stop
		down("b", targetERP, 40+0.5*float64(i))
	}
	for i := range 40 { // c never opens either, but its 40 failures come with three stops: 41 allowed
		down("c", targetERP, 0.5*float64(i))
	}
	for i := range 12 { // d opens after 12 failures; 11 allowed at concurrency 2
		down("d", targetBureauA, 80+0.1*float64(i))
	}
	opens := map[string][]breakerOpen{
		"a." + targetERP: {
			{openedAt: at(1.2), openUntil: at(6.2)},
			{openedAt: at(6.6), openUntil: at(11.6)},
			{openedAt: at(12.1), openUntil: at(17.1)},
		},
		"d." + targetBureauA: {{openedAt: at(81.1), openUntil: at(86.1)}},
	}
	r := checkBreakers(calls, opens, outages, cooldown, lim, stops)
	if r.callsWhileOpen != 1 || r.tooMany != 1 || r.probes != 3 || r.maxPerCooldown != 2 {
		t.Fatalf("want 1 call while open, 1 pair of probes too close, 3 probes, at most 2 per cooldown; got %+v", r)
	}
	if len(r.overFailures) != 2 || !strings.HasPrefix(r.overFailures[0], "b.erp: 18 ") && !strings.HasPrefix(r.overFailures[1], "b.erp: 18 ") ||
		!strings.HasPrefix(r.overFailures[0], "d.bureau_a: 12 ") && !strings.HasPrefix(r.overFailures[1], "d.bureau_a: 12 ") {
		t.Fatalf("want b.erp (18 failures, never opened) and d.bureau_a (12 before its opening) named, not a.erp or c.erp; got %q", r.overFailures)
	}
	if r.opens != 4 || r.opensInOutage != 4 || r.mostFailed != 40 || r.mostFailedMax != 41 {
		t.Fatalf("want 4 openings in outages and c.erp's 40 failed calls (bound 41) the most; got %+v", r)
	}
}

// checkLimits: calls in flight over the concurrency are counted (a call
// whose caller went away ends goneSlack early; one from another process
// while the first is in flight is an overlap), and so are calls in one
// second over the rate + rateJitter, from one process or several.
func TestCheckLimits(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	var calls []callRec
	call := func(acct, sender string, from, to float64, gone bool) {
		calls = append(calls, callRec{at: at(from), end: at(to), gone: gone, account: acct, target: targetERP, sender: sender})
	}
	// x, concurrency 2: two at once is fine; a third is over.
	call("x", "d1", 0, 1, false)
	call("x", "d1", 0.5, 1.5, false)
	call("x", "d1", 0.6, 0.9, false) // the third in flight
	call("x", "d1", 1.5, 2, false)   // starts as one ends: not over
	call("x", "d1", 1.6, 4, true)    // its caller gave up at 4
	call("x", "d1", 3.97, 5, false)  // the next call, seen before the first's end: within goneSlack
	// y, concurrency 8, rate 10/s: 12 calls in 0.88 s is one over (11
	// allowed), from one process or from two (a handover).
	for i := range 12 {
		call("y", "d1", 10+0.08*float64(i), 10+0.08*float64(i)+0.01, false)
	}
	for i := range 12 {
		s := "d1"
		if i >= 6 {
			s = "d2"
		}
		call("y", s, 20+0.08*float64(i), 20+0.08*float64(i)+0.01, false)
	}
	// z, concurrency 2: one call from another process while d1's is in flight.
	call("z", "d1", 30, 31, false)
	call("z", "d2", 30.5, 30.6, false)
	// w, concurrency 1: a killed dispatcher's call, gone within goneSlack,
	// is over before the next owner's calls, one after the other.
	call("w", "d1", 40, 40.01, true)
	call("w", "d2", 45, 45.5, false)
	call("w", "d2", 45.5, 46, false)
	r := checkLimits(calls, map[string]limits{"x": {concurrency: 2}, "y": {concurrency: 8, rate: 10}, "z": {concurrency: 2}, "w": {concurrency: 1}}, at(60))
	if r.overConcurrency != 1 || r.overRate != 2 || r.overlapping != 1 {
		t.Fatalf("want 1 call over the concurrency (x), 2 over the rate (y, from one process and from two), 1 overlap (z); got %+v", r)
	}
	want := map[string][3]int{"x": {3, 3, 6}, "y": {1, 12, 12}, "z": {2, 2, 2}, "w": {1, 2, 3}}
	for _, f := range r.accounts {
		if w := want[f.account]; f.peakFlight != w[0] || f.peakSecond != w[1] || f.peakTen != w[2] {
			t.Errorf("%s: want most in flight, in 1 s, in 10 s %v, got %d, %d, %d", f.account, w, f.peakFlight, f.peakSecond, f.peakTen)
		}
	}
}

// checkTargets: a target's calls and polls count together, over every
// account and process, against its concurrency; an unlimited target is
// not checked.
func TestCheckTargets(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	rec := func(acct, target, sender string, from, to float64, poll bool) callRec {
		return callRec{at: at(from), end: at(to), account: acct, target: target, sender: sender, poll: poll}
	}
	calls := []callRec{
		rec("a", targetBureauB, "d1", 0, 1, false),
		rec("b", targetBureauB, "d2", 0.2, 1, false),
		rec("a", targetERP, "d1", 0.3, 1, false), // erp is not limited
		rec("a", targetBureauB, "d1", 5, 6, false),
	}
	polls := []callRec{
		rec("c", targetBureauB, "p1", 0.5, 0.6, true), // the third in flight: over
		rec("c", targetBureauB, "p1", 1, 1.5, true),   // starts as two end: not over
		rec("a", targetBureauB, "p2", 5.5, 7, true),
	}
	r := checkTargets(calls, polls, map[string]int{targetBureauB: 2}, at(60))
	if r.overConcurrency != 1 || len(r.details) != 1 || !strings.Contains(r.details[0], "target bureau_b: 3 calls in flight") {
		t.Fatalf("want 1 over bureau_b's concurrency, described; got %+v", r)
	}
	if want := []targetFigure{{target: targetBureauB, concurrency: 2, calls: 3, polls: 3, peakFlight: 3}}; !slices.Equal(r.targets, want) {
		t.Fatalf("want the figures %+v, got %+v", want, r.targets)
	}
}

// The settle bound moves only for events that wait for a timed step: a
// retry, a delay, a poll, a callback deadline, or a running call's end
// (its claim + callTimeout + ackWait, whatever its next_run_at says). An
// event pending at the bound, or one with no next step, moves nothing.
func TestLatestStep(t *testing.T) {
	at := func(s int) *time.Time { t := time.Date(2026, 11, 30, 8, 0, s, 0, time.UTC); return &t }
	if _, ok := latestStep(map[string]state.Head{
		"a": {Status: state.Pending},
		"c": {Status: state.Retrying},
	}); ok {
		t.Fatal("nothing waits for a timed step: the bound must not move")
	}
	got, ok := latestStep(map[string]state.Head{
		"a": {Status: state.Retrying, NextRunAt: at(10)},
		"b": {Status: state.Polling, NextRunAt: at(30)},
		"c": {Status: state.AwaitingCallback, NextRunAt: at(20)},
		"d": {Status: state.Running, UpdatedAt: *at(0), NextRunAt: at(59)},
	})
	if !ok || !got.Equal(*at(30)) {
		t.Fatalf("want the latest timed step (08:00:30), got %s %v", got, ok)
	}
	got, ok = latestStep(map[string]state.Head{
		"a": {Status: state.Retrying, NextRunAt: at(10)},
		"d": {Status: state.Running, UpdatedAt: *at(20), NextRunAt: at(59)},
	})
	if want := at(20).Add(callTimeout + ackWait); !ok || !got.Equal(want) {
		t.Fatalf("want the running call's end (%s), got %s %v", want.Format(time.TimeOnly), got, ok)
	}
}

// A reclaim counts as a live run taken over only when the run before it
// noted its late outcome afterwards; a late outcome without a reclaim (a
// callback that beat the call's answer) is no takeover.
func TestTakeovers(t *testing.T) {
	h := func(a state.ActionName, actor, detail string) state.Entry {
		return state.Entry{Action: a, Actor: actor, Detail: detail}
	}
	rec := state.Record{History: []state.Entry{
		h(state.Accept, "ingest", ""),
		h(state.Claim, "dispatcher/d1", ""),
		h(state.Reclaim, "dispatcher/d2", "message redelivered"), // d1 killed: no note follows
		h(state.Retry, "dispatcher/d2", ""),
		h(state.Claim, "dispatcher/d3", ""),
		h(state.Reclaim, "dispatcher/d2", "message redelivered"), // d3 alive: it notes its late outcome
		h(state.Note, "dispatcher/d3", "late outcome ignored: retry (the run was taken over)"),
		h(state.Succeed, "dispatcher/d2", ""),
		h(state.Note, "dispatcher/d2", "late outcome ignored: retry"),
	}}
	if r, l := takeovers(rec); r != 2 || l != 1 {
		t.Fatalf("want 2 reclaims, 1 of a live run; got %d, %d", r, l)
	}
}

// unexplainedWakes: a lost wake is explained by a stop of its
// predecessor's finisher (named by its history's actor) or of
// nats-server within finisherStopSlack after the finish, not by a stop
// of another process, nor by one long after.
func TestUnexplainedWakes(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	c := &cluster{nats: &proc{name: "nats-server", stops: []time.Time{at(100)}}}
	for _, n := range []string{"ingest", "dispatcher-1", "dispatcher-2", "poller-1", "poller-2", "deadletter"} {
		c.svcs = append(c.svcs, &proc{name: n})
	}
	c.svcs[1].stops = []time.Time{at(10.5)} // dispatcher-1
	c.svcs[1].pids = []int{101, 102}
	c.svcs[2].pids = []int{201}
	c.svcs[0].stops = []time.Time{at(20.1)} // ingest
	c.svcs[3].stops = []time.Time{at(31)}   // poller-1
	finished := func(actor string, s float64) state.Record {
		return state.Record{History: []state.Entry{{Action: state.Claim, To: state.Running, At: at(s - 1)}, {Action: state.Succeed, To: state.Done, Actor: actor, At: at(s)}}}
	}
	recs := map[string]state.Record{
		"a1": finished("dispatcher/vm-1-102-ab12", 10), // its finisher (dispatcher-1) killed 0.5 s later: explained
		"a2": finished("dispatcher/vm-1-201-cd34", 10), // another dispatcher was: not
		"a3": finished("callback:bureau_a", 20),        // ingest killed 0.1 s later: explained
		"a4": finished("reconciler", 30),               // a poller killed 1 s later: explained
		"a5": finished("dispatcher/vm-1-101-ef56", 5),  // its finisher killed 5.5 s later: not
		"a6": finished("operator:alice", 99.5),         // nats-server restarted 0.5 s later: explained
		"a7": {},                                       // not finished: not
	}
	var lost []lostWake
	for _, a := range slices.Sorted(maps.Keys(recs)) {
		lost = append(lost, lostWake{event: "b-" + a, finished: a, log: "dispatcher-1"})
	}
	unexplained, stopped := c.unexplainedWakes(lost, recs)
	if stopped != 4 || len(unexplained) != 3 {
		t.Fatalf("want 4 explained (a1, a3, a4, a6) and 3 not (a2, a5, a7), got %d and %q", stopped, unexplained)
	}
	for i, a := range []string{"a2", "a5", "a7"} {
		if !strings.Contains(unexplained[i], " "+a+" ") {
			t.Errorf("unexplained[%d] = %q, want it about %s", i, unexplained[i], a)
		}
	}
}
