package dispatcher_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenaz/tenaz/pkg/metrics"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/services/dispatcher"
)

// capacityTarget is a provider with a hidden capacity: up to capacity
// calls in flight are answered 200 after latency; a call beyond it is
// answered 429 with Retry-After: 1 at once.
type capacityTarget struct {
	latency time.Duration

	mu       sync.Mutex
	capacity int
	inFlight int
	peak     int // the most admitted in flight since the last reset
	ok       int
	refused  int
}

func (c *capacityTarget) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	if c.inFlight >= c.capacity {
		c.refused++
		c.mu.Unlock()
		w.Header().Set("Retry-After", "1")
		http.Error(w, "over capacity", http.StatusTooManyRequests)
		return
	}
	c.inFlight++
	c.peak = max(c.peak, c.inFlight)
	c.mu.Unlock()
	select {
	case <-time.After(c.latency):
	case <-r.Context().Done():
	}
	c.mu.Lock()
	c.inFlight--
	c.ok++
	c.mu.Unlock()
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(`{"ok":true}`))
}

// counts returns the successes and refusals so far.
func (c *capacityTarget) counts() (ok, refused int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ok, c.refused
}

// setCapacity changes the capacity and starts a new peak.
func (c *capacityTarget) setCapacity(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.capacity, c.peak = n, 0
}

func (c *capacityTarget) peakInFlight() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.peak
}

func startCapacityTarget(t *testing.T, capacity int, latency time.Duration) (*capacityTarget, string) {
	c := &capacityTarget{capacity: capacity, latency: latency}
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	return c, srv.URL
}

// autoYAML is acme with "concurrency: auto" (it starts at 8) against url,
// and other with a fixed concurrency against the harness's provider.
func autoYAML(url string, max int) string {
	return fmt.Sprintf(`
streams: {ack_wait: 5s}
accounts:
  "*": {concurrency: 4, breaker: {failures: 1000}}
  acme: {concurrency: auto, concurrency_max: %d}
  other: {targets: {erp: {url: "${TARGET}/api/{{.Kind}}"}}}
targets:
  erp: {url: "%s/{{.Account}}", timeout: 5s}
kinds:
  order.create: {target: erp, entity: order_id, attempts: 100, backoff: {initial: 1s, multiplier: 1, jitter: 0}}
`, max, url)
}

// limitOf is acme's concurrency limit as its owner exports it.
func limitOf(t *testing.T, reg *prometheus.Registry) float64 {
	return series(t, reg)[`tenaz_account_concurrency_limit{account=acme}`]
}

// "concurrency: auto" learns a provider's capacity by counting, not by
// timing: against 6 calls in flight (429 beyond), an account that starts
// at 8 has its limit cut by the first 429s to at most 6; the provider then
// refuses next to nothing while it serves at its capacity; and once the
// capacity doubles the limit grows back past 6. Meanwhile another
// account's events do not wait behind acme's backlog.
func TestAutoConcurrencyLearnsCapacity(t *testing.T) {
	t.Parallel()
	prov, url := startCapacityTarget(t, 6, 100*time.Millisecond)
	h := setup(t, autoYAML(url, 40), provider.Faults{})
	reg := prometheus.NewRegistry()
	set, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	h.dispatcher("d1", nil, func(o *dispatcher.Options) { o.Metrics = set })
	ids := h.Submit("acme", "order.create", keys("a", 600), orderPayload)

	var limit float64
	natstest.Eventually(t, 20*time.Second, func() bool {
		limit = limitOf(t, reg)
		return limit > 0 && limit <= 6
	}, "want acme's learned limit cut to the provider's capacity (6) or under, got %v", limit)
	if _, refused := prov.counts(); refused == 0 {
		t.Fatalf("the limit went down to %v with no 429: it was not learned from the provider's answers", limit)
	}
	other := h.Submit("other", "order.create", keys("o", 40), orderPayload)
	h.waitAll(other, state.Done, 5*time.Second)
	if ok, _ := prov.counts(); ok >= len(ids) {
		t.Fatalf("acme's backlog was served (%d calls) before other's: no test of other waiting behind it", ok)
	}

	// Settled: the next 150 calls made at capacity are refused next to
	// never (a probe over the limit now and then, far from the one per
	// success a limit over the capacity costs).
	ok0, refused0 := prov.counts()
	natstest.Eventually(t, 30*time.Second, func() bool {
		ok, _ := prov.counts()
		return ok >= ok0+150
	}, "want 150 more calls served at the provider's capacity")
	ok1, refused1 := prov.counts()
	if r := refused1 - refused0; r > 6 {
		t.Errorf("settled at the capacity: want at most 6 calls refused for %d served, got %d", ok1-ok0, r)
	}

	// The capacity doubles: the limit grows back past the old one.
	prov.setCapacity(12)
	natstest.Eventually(t, 20*time.Second, func() bool {
		return prov.peakInFlight() > 6
	}, "want more than 6 calls in flight once the provider takes 12, saw at most %d", prov.peakInFlight())
	if limit = limitOf(t, reg); limit <= 6 || limit > 40 {
		t.Errorf("after the capacity doubled: want the limit above 6 and within concurrency_max 40, got %v", limit)
	}
	h.waitAll(ids, state.Done, 2*time.Minute)
}

// An account's next owner starts from the limit its last owner learned
// (stored in tenaz_owners when it hands the account over), not from the
// start: a provider taking 2 refuses at most one of its first calls (a
// fresh start at 8 has 6 of its first 8 refused).
func TestAutoConcurrencyStartsFromTheLastOwnersLimit(t *testing.T) {
	t.Parallel()
	prov, url := startCapacityTarget(t, 2, 50*time.Millisecond)
	h := setup(t, autoYAML(url, 40), provider.Faults{})
	d1 := h.dispatcher("d1", nil)
	first := h.Submit("acme", "order.create", keys("a", 120), orderPayload)
	h.waitAll(first, state.Done, time.Minute)
	if _, refused := prov.counts(); refused == 0 {
		t.Fatalf("want the first owner to have met the capacity (429s) while it learned it, got none")
	}
	servicetest.Stop(t, d1)
	kv, err := h.JS.KeyValue(h.Ctx(), names.BucketOwners)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(h.Ctx(), "l.acme")
	if err != nil {
		t.Fatalf("want the learned limit stored as l.acme in %s once d1 handed acme over: %v", names.BucketOwners, err)
	}
	// The learned limit may stand one over the capacity (a probe).
	if n, err := strconv.Atoi(string(e.Value())); err != nil || n < 1 || n > 3 {
		t.Fatalf("want a stored limit between 1 and the capacity 2 plus one, got %q", e.Value())
	}

	_, refused0 := prov.counts()
	h.dispatcher("d2", nil)
	second := h.Submit("acme", "order.create", keys("b", 12), orderPayload)
	h.waitAll(second, state.Done, time.Minute)
	if _, refused := prov.counts(); refused > refused0+1 {
		t.Errorf("d2 started from the stored limit: want at most 1 of its 12 calls refused, got %d 429s", refused-refused0)
	}
}
