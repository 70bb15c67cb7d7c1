package dispatcher_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/live"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/services/dispatcher"
	"github.com/tenaz/tenaz/services/ingest"
)

// TestMain checks that every test stopped what it started: dispatchers,
// ingest, connections, the embedded server and the HTTP servers.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// yamlFor is a config with one target (the provider, ${TARGET}) and the
// kind order.create as given by kind (a flow mapping without target).
// streams.ack_wait is 1s so that a message abandoned by a simulated crash
// comes back fast. The breaker's threshold is high: these tests are about
// other things, and 20% random failures can be 5 in a row (the breaker
// has its own tests).
func yamlFor(concurrency int, kind string) string {
	return fmt.Sprintf(`
streams: {ack_wait: 1s}
accounts:
  "*": {concurrency: %d, breaker: {failures: 100}}
targets:
  erp: {url: "${TARGET}/api/{{.Kind}}", timeout: 5s}
kinds:
  order.create: {target: erp, entity: order_id, %s}
`, concurrency, kind)
}

// harness is one test's world: a real nats-server, a real provider behind
// a real HTTP server, an ingest service, and the dispatchers the test
// starts.
type harness struct {
	*servicetest.Env
	t      *testing.T
	yaml   string // the config, as setup was given it
	cfg    *config.Config
	prov   *provider.Provider
	target *httptest.Server

	stops []func() // every dispatcher's Stop, in start order

	mu      sync.Mutex
	arrived int           // deliveries that reached the provider (answered or not)
	changed chan struct{} // closed and replaced when arrived changes
}

// setup starts the server, the provider (with faults f and opts) and an
// ingest service for config yaml. Everything stops when the test ends, in
// reverse order.
func setup(t *testing.T, yaml string, f provider.Faults, opts ...provider.Option) *harness {
	t.Helper()
	h := &harness{t: t, yaml: yaml, changed: make(chan struct{}), Env: servicetest.Start(t, servicetest.Options{})}
	h.prov = provider.New(f, opts...)
	h.target = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.arrived++
		close(h.changed)
		h.changed = make(chan struct{})
		h.mu.Unlock()
		h.prov.ServeHTTP(w, r)
	}))
	t.Cleanup(h.target.Close)
	t.Cleanup(func() { _ = h.prov.Close() })
	h.cfg = servicetest.Config(t, yaml, map[string]string{"TARGET": h.target.URL})
	nc, _ := h.Srv.Conn(t)
	ing, err := ingest.New(ingest.Options{Conn: nc, Config: h.cfg})
	if err != nil {
		t.Fatalf("ingest.New: %v", err)
	}
	servicetest.Run(t, h.Ctx(), ing)
	return h
}

// dispatcher starts a dispatcher named instance on its own connection, as
// a separate process would, with its own HTTP client; it is stopped when
// the test ends (again, if the test stopped it: Stop is idempotent).
func (h *harness) dispatcher(instance string, hooks *dispatcher.Hooks, opts ...func(*dispatcher.Options)) *dispatcher.Service {
	h.t.Helper()
	nc, _ := h.Srv.Conn(h.t)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	o := dispatcher.Options{Conn: nc, Config: h.cfg, Instance: instance, Hooks: hooks, HTTPClient: client}
	for _, opt := range opts {
		opt(&o)
	}
	d, err := dispatcher.New(o)
	if err != nil {
		h.t.Fatalf("dispatcher.New: %v", err)
	}
	if err := d.Start(h.Ctx()); err != nil {
		h.t.Fatalf("dispatcher.Start: %v", err)
	}
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := d.Stop(ctx); err != nil {
			h.t.Errorf("dispatcher %s Stop: %v", instance, err)
		}
		client.CloseIdleConnections()
	}
	h.stops = append(h.stops, stop)
	h.t.Cleanup(stop)
	return d
}

// reloadable starts a dispatcher named instance whose config is reloaded
// from a file, as SIGHUP does: format with value in its one %s (the
// config setup was given), ${TARGET} the provider's URL. set writes the
// file with another value and reloads it, returning once it is in force.
func (h *harness) reloadable(instance, format, value string) (set func(value string)) {
	h.t.Helper()
	path := filepath.Join(h.t.TempDir(), "tenaz.yaml")
	write := func(value string) {
		y := strings.ReplaceAll(fmt.Sprintf(format, value), "${TARGET}", h.target.URL)
		if err := os.WriteFile(path, []byte(y), 0o600); err != nil {
			h.t.Fatal(err)
		}
	}
	write(value)
	lc := live.New(h.cfg, live.Options{Path: path})
	h.dispatcher(instance, nil, func(o *dispatcher.Options) { o.Live = lc })
	return func(value string) {
		h.t.Helper()
		write(value)
		if err := lc.Reload(); err != nil {
			h.t.Fatal(err)
		}
	}
}

// orderPayload is a plain order for key.
func orderPayload(key string) string { return `{"order_id":"` + key + `","total":1990}` }

// keys returns n keys prefix-0 … prefix-(n-1).
func keys(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

// waitAll waits as servicetest.Env.WaitAll does, then until the provider
// has answered every delivery that reached it (quiesce).
func (h *harness) waitAll(ids []string, want state.State, timeout time.Duration) map[string]state.Record {
	h.t.Helper()
	recs := h.WaitAll(ids, want, timeout)
	h.quiesce()
	return recs
}

// quiesce waits until every delivery that reached the provider has been
// answered and logged: the provider logs a call just after writing its
// answer, so a dispatcher can store the outcome a moment before the call
// shows in Calls.
func (h *harness) quiesce() {
	h.t.Helper()
	deadline := time.Now().Add(servicetest.WaitFor)
	for h.arrivals() != h.prov.CallCount() {
		if time.Now().After(deadline) {
			h.t.Fatalf("provider: %d deliveries arrived but %d were answered within %s", h.arrivals(), h.prov.CallCount(), servicetest.WaitFor)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		_ = h.prov.WaitCalls(ctx, h.arrivals())
		cancel()
	}
}

// arrivals is how many deliveries reached the provider so far, including
// those still being answered.
func (h *harness) arrivals() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.arrived
}

// waitArrivals waits until at least n deliveries reached the provider.
func (h *harness) waitArrivals(n int, timeout time.Duration) {
	h.t.Helper()
	deadline := time.After(timeout)
	for {
		h.mu.Lock()
		got, ch := h.arrived, h.changed
		h.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			h.t.Fatalf("want %d deliveries to reach the provider within %s, got %d", n, timeout, got)
		}
	}
}

// failOnce returns a hook that fails (a simulated crash) the first time it
// runs for id at attempt 1, and counts its runs for id.
func failOnce(id string, runs *int, mu *sync.Mutex) func(string, int) error {
	return func(got string, attempt int) error {
		if got != id {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		*runs++
		if *runs == 1 && attempt == 1 {
			return errCrash
		}
		return nil
	}
}

var errCrash = errors.New("simulated crash")

// scheduled is the header of what waits on the event's schedule subject
// (a schedule or a timer), empty if nothing does.
func (h *harness) scheduled(id string) nats.Header {
	h.t.Helper()
	rec := h.Record(id)
	stream, err := h.JS.Stream(h.Ctx(), h.Subj.EventsStream(rec.Account))
	if err != nil {
		h.t.Fatal(err)
	}
	m, err := stream.GetLastMsgForSubject(h.Ctx(), h.Subj.Schedule(rec.Account, id))
	if err != nil {
		return nats.Header{}
	}
	return m.Header
}

// calls are the provider's calls for the event acme submitted with key.
// The target sees the event id as Idempotency-Key, not the submitter's key.
func (h *harness) calls(key string) []provider.Call {
	return h.prov.CallsFor(event.ID("acme", key))
}

// effects is how often the provider applied the effect of the event acme
// submitted with key.
func (h *harness) effects(key string) int {
	return h.prov.Effects(event.ID("acme", key))
}

// mustCalls checks the provider received exactly n calls for the event
// acme submitted with key.
func (h *harness) mustCalls(key string, n int) []provider.Call {
	h.t.Helper()
	calls := h.calls(key)
	if len(calls) != n {
		h.t.Fatalf("provider: want %d calls for %s, got %d: %s", n, key, len(calls), describeCalls(calls))
	}
	return calls
}

func describeCalls(calls []provider.Call) string {
	var parts []string
	for _, c := range calls {
		parts = append(parts, fmt.Sprintf("{attempt %d status %d at %s applied %v}", c.Attempt, c.Status, c.At.Format("15:04:05.000"), c.Applied))
	}
	return "[" + strings.Join(parts, " ") + "]"
}
