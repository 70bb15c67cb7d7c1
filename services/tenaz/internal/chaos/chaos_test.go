package chaos

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/tenaz"
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
			if len(j) > 1 && (e.kind != kindLane || e.lane != j[0].lane) {
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
// one cooldown; an outage with enough failures and no opening is named.
func TestCheckBreakers(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	cooldown := 5 * time.Second
	outages := map[string]window{"a": {at(0), at(30)}, "b": {at(0), at(30)}, "c": {at(0), at(30)}}
	var calls []callRec
	down := func(acct, target string, s float64) {
		calls = append(calls, callRec{at: at(s), account: acct, target: target, down: true})
	}
	for i := range 12 { // opening burst
		down("a", targetERP, 0.1*float64(i))
	}
	down("a", targetERP, 6.5)  // probe
	down("a", targetERP, 12.0) // probe, ≥ cooldown after
	down("a", targetERP, 14.0) // second call within a cooldown of the last probe (and while open)
	for i := range 40 {        // b never opens: one dispatcher's 40 failures
		calls = append(calls, callRec{at: at(0.5 * float64(i)), account: "b", target: targetERP, down: true, sender: "dispatcher-1#1"})
	}
	for i := range 40 { // c never opens either, but its 40 failures come from five short lives of dispatchers
		calls = append(calls, callRec{at: at(0.5 * float64(i)), account: "c", target: targetERP, down: true, sender: fmt.Sprintf("dispatcher-%d#%d", i%2+1, i/16)})
	}
	opens := map[string][]breakerOpen{"a." + targetERP: {
		{openedAt: at(1.2), openUntil: at(6.2)},
		{openedAt: at(6.6), openUntil: at(11.6)},
		{openedAt: at(12.1), openUntil: at(17.1)},
	}}
	r := checkBreakers(calls, opens, outages, cooldown)
	if r.callsWhileOpen != 1 || r.tooMany != 1 || r.probes != 3 || r.maxPerCooldown != 2 {
		t.Fatalf("want 1 call while open, 1 pair of probes too close, 3 probes, at most 2 per cooldown; got %+v", r)
	}
	if len(r.neverOpened) != 1 || !strings.HasPrefix(r.neverOpened[0], "b.erp ") || r.opens != 3 || r.opensInOutage != 3 {
		t.Fatalf("want b.erp (and not c.erp) named as never opened and 3 openings in the outage, got %+v", r)
	}
}

// The settle bound moves only for events that wait for a timed step: a
// retry, a delay, a poll or a callback deadline. An event pending or
// running at the bound, or one with no next step, moves nothing.
func TestLatestStep(t *testing.T) {
	at := func(s int) *time.Time { t := time.Date(2026, 11, 30, 8, 0, s, 0, time.UTC); return &t }
	if _, ok := latestStep(map[string]head{
		"a": {Status: tenaz.StatePending},
		"b": {Status: tenaz.StateRunning, NextRunAt: at(50)},
		"c": {Status: tenaz.StateRetrying},
	}); ok {
		t.Fatal("nothing waits for a timed step: the bound must not move")
	}
	got, ok := latestStep(map[string]head{
		"a": {Status: tenaz.StateRetrying, NextRunAt: at(10)},
		"b": {Status: tenaz.StatePolling, NextRunAt: at(30)},
		"c": {Status: tenaz.StateAwaitingCallback, NextRunAt: at(20)},
		"d": {Status: tenaz.StateRunning, NextRunAt: at(59)},
	})
	if !ok || !got.Equal(*at(30)) {
		t.Fatalf("want the latest timed step (08:00:30), got %s %v", got, ok)
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
