package dispatcher_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tenaz/tenaz/pkg/breaker"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
)

// breakerYAML opens the breaker after 3 failures for 2 s, its one
// account's calls one at a time, retried every %s.
const breakerYAML = `
streams: {ack_wait: 2s}
accounts:
  "*": {concurrency: 1, breaker: {failures: 3, cooldown: 2s}}
targets:
  erp: {url: "${TARGET}/api/{{.Kind}}", timeout: 5s}
kinds:
  order.create: {target: erp, entity: order_id, attempts: 20, backoff: {initial: %s, multiplier: 1, jitter: 0}}
`

// breakerAdvisory is an advisory of acme → erp's breaker, with the
// provider's call count when it came.
type breakerAdvisory struct {
	State     string    `json:"state"`
	OpenUntil time.Time `json:"open_until"`
	calls     int
}

// breakerAdvisories records acme → erp's breaker advisories; the
// function returns those so far.
func breakerAdvisories(t *testing.T, h *harness) func() []breakerAdvisory {
	t.Helper()
	var mu sync.Mutex
	var advs []breakerAdvisory
	sub, err := h.NC.Subscribe("tenaz.advisory.breaker.acme.erp", func(m *nats.Msg) {
		var a breakerAdvisory
		if json.Unmarshal(m.Data, &a) == nil {
			a.calls = h.prov.CallCount()
			mu.Lock()
			advs = append(advs, a)
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return func() []breakerAdvisory {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(advs)
	}
}

// A target down for everyone: the breaker opens after the threshold and is
// shared by both dispatchers; while open no call leaves and events wait
// without burning attempts; after each cooldown exactly one probe goes out;
// when the target is back the probe closes it and every event is done,
// each with attempts equal to the calls it really made.
func TestBreakerOutage(t *testing.T) {
	t.Parallel()
	h := setup(t, fmt.Sprintf(breakerYAML, "1s"), provider.Faults{Down: true})

	advisories := breakerAdvisories(t, h)
	h.dispatcher("d1", nil)
	h.dispatcher("d2", nil)
	ids := h.Submit("acme", "order.create", keys("b", 10), orderPayload)

	opens := func() []breakerAdvisory {
		var out []breakerAdvisory
		for _, a := range advisories() {
			if a.State == "open" {
				out = append(out, a)
			}
		}
		return out
	}
	waitOpens := func(n int) []breakerAdvisory {
		t.Helper()
		natstest.Eventually(t, 20*time.Second, func() bool { return len(opens()) >= n },
			"want %d breaker openings (advisories so far: %d)", n, len(opens()))
		return opens()
	}
	o := waitOpens(3) // opened, then re-opened by two failed probes
	if o[0].calls > 3 {
		t.Fatalf("want the breaker open after 3 failures over both replicas, it opened after %d calls", o[0].calls)
	}
	// Between one opening and the next, exactly one probe went out (the
	// account's one owner had concurrency 1: nothing else was in flight).
	for i := 1; i < len(o); i++ {
		if d := o[i].calls - o[i-1].calls; d != 1 {
			t.Fatalf("between openings %d and %d: want one probe, got %d calls", i, i+1, d)
		}
		if !o[i].OpenUntil.After(o[i-1].OpenUntil) {
			t.Fatalf("a failed probe must re-open with a later open_until: %s then %s", o[i-1].OpenUntil, o[i].OpenUntil)
		}
	}
	h.prov.SetDown(false)
	recs := h.waitAll(ids, state.Done, 30*time.Second)
	if advs := advisories(); advs[len(advs)-1].State != "closed" {
		t.Fatalf("want a closed advisory after recovery, got %+v", advs)
	}
	total := 0
	for i, id := range ids {
		k := keys("b", 10)[i]
		calls := len(h.calls(k))
		total += calls
		if recs[id].Attempts != calls {
			t.Fatalf("%s: attempts must count only real calls: attempts %d, calls %d", k, recs[id].Attempts, calls)
		}
	}
	if total != h.prov.CallCount() {
		t.Fatalf("calls by key %d != calls %d", total, h.prov.CallCount())
	}
	if d := h.prov.DuplicateEffects(); len(d) != 0 {
		t.Fatalf("effects applied more than once: %v", d)
	}
}

// A probe that waits for its account's pace longer than a probe's claim
// lasts (the target's timeout + 10 s) is still the only call while the
// breaker is half-open. It used to claim the probe when it was allowed:
// its claim expired while it waited, the account's next event took it
// over, and both called, the first one's outcome ignored.
func TestAProbeWaitingForItsPaceIsTheOnlyOne(t *testing.T) {
	t.Parallel()
	h := setup(t, `
streams: {ack_wait: 2s}
accounts:
  "*": {concurrency: 2, rate: 4/m, breaker: {failures: 1, cooldown: 1s}}
targets:
  erp: {url: "${TARGET}/api/{{.Kind}}", timeout: 1s}
kinds:
  order.create: {target: erp, entity: order_id, attempts: 20, backoff: {initial: 1s, multiplier: 1, jitter: 0}}
`, provider.Faults{Down: true})
	advisories := breakerAdvisories(t, h)
	h.dispatcher("d1", nil)
	h.dispatcher("d2", nil)
	h.Submit("acme", "order.create", keys("p", 3), orderPayload)
	natstest.Eventually(t, 10*time.Second, func() bool { return len(advisories()) > 0 },
		"want the breaker open after the first call failed")
	h.prov.SetDown(false) // the probe, 15 s after the failed call (4/m), succeeds
	opened, closed := -1, -1
	var advs []breakerAdvisory
	natstest.Eventually(t, 60*time.Second, func() bool {
		advs = advisories()
		for _, a := range advs {
			switch {
			case a.State == "open" && opened < 0:
				opened = a.calls
			case a.State == "closed" && closed < 0:
				closed = a.calls
			}
		}
		return closed >= 0
	}, "want the breaker closed by a probe")
	if opened != 1 {
		t.Fatalf("want open after the first call; advisories: %+v", advs)
	}
	if probes := closed - opened; probes != 1 {
		t.Fatalf("want one probe while the breaker was half-open, got %d calls (advisories: %+v)", probes, advs)
	}
}

// A breaker that trips while its bucket cannot be written refuses calls
// all the same: its open, not yet stored, is written when the bucket
// takes writes again, and meanwhile the target is not called. Calls used
// to go on at the account's full pace ("breaker unavailable; calling
// anyway"), each one uncounted.
func TestABreakerTrippedWithoutItsBucketRefuses(t *testing.T) {
	t.Parallel()
	h := setup(t, fmt.Sprintf(breakerYAML, "200ms"), provider.Faults{Down: true})
	h.dispatcher("d1", nil)
	// The breakers' bucket can be read, not written.
	st, err := h.JS.Stream(h.Ctx(), "KV_"+names.BucketBreakers)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.Sealed = true
	if _, err := h.JS.UpdateStream(h.Ctx(), cfg); err != nil {
		t.Fatal(err)
	}
	h.Submit("acme", "order.create", keys("s", 10), orderPayload)
	natstest.Eventually(t, 20*time.Second, func() bool { return h.prov.CallCount() >= 3 }, "want the breaker's 3 failures")
	// Nothing is awaited: at a retry every 200 ms, a breaker that lets
	// calls through makes ten more within these 3 s.
	natstest.Never(t, 3*time.Second, func() bool { return h.prov.CallCount() > 4 },
		"the breaker tripped after 3 failures, its bucket sealed: want no call past the one in flight, got %v calls", natstest.Lazy(func() any { return h.prov.CallCount() }))
}

// A breaker already open when a dispatcher starts pauses its account: the
// registry reports it while it loads, before the dispatcher holds the
// registry (under -race, a report acted on then is a data race, and it was
// a nil dereference in make chaos), and the account's event waits.
func TestBreakerOpenAtStartPausesTheAccount(t *testing.T) {
	t.Parallel()
	h := setup(t, yamlFor(4, "attempts: 3"), provider.Faults{})
	h.Submit("acme", "order.create", []string{"before"}, orderPayload) // a message that waits for acme's reader
	nc, js := h.Srv.Conn(t)
	defer nc.Close()
	reg, err := breaker.New(h.Ctx(), js, breaker.Options{Instance: "operator"})
	if err != nil {
		t.Fatal(err)
	}
	until := time.Now().Add(time.Minute)
	if err := reg.Open(h.Ctx(), "acme", "erp", until, "operator", "test"); err != nil {
		t.Fatal(err)
	}
	reg.Stop()
	d := h.dispatcher("d1", nil)
	natstest.Eventually(t, servicetest.WaitFor, func() bool {
		got := d.PausedUntil("acme")
		return got.After(until.Add(-time.Second)) && got.Before(until.Add(time.Second))
	}, "want acme paused by the breaker open at start")
	if n := h.prov.CallCount(); n != 0 {
		t.Fatalf("want no call while the breaker is open, got %d", n)
	}
}
