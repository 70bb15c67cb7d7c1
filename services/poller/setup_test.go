package poller_test

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/metrics"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/webhook"
	"github.com/tenaz/tenaz/services/dispatcher"
	"github.com/tenaz/tenaz/services/ingest"
	"github.com/tenaz/tenaz/services/poller"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// cbSecret is bureau A's webhook secret in these tests.
const cbSecret = "whsec_dGVuYXotdGVzdC1jYWxsYmFjay1zZWNyZXQ="

// flowWith is the credit-evaluation config of these tests: bureau_a answers
// by callback, bureau_b must be polled. kind is the rest of the
// credit.evaluate mapping; bureauA and bureauB add more keys to bureau A's
// and bureau B's target mappings, and o's poller, accounts, targets and
// extraConfig more keys to the poller's, more accounts, more targets and
// more config.
func flowWith(kind string, o worldOpts) string {
	return `
streams: {ack_wait: 2s, trim_after: 100ms}
poller: {grace: 1s, reconcile_every: 1h` + o.poller + `}
accounts:
  "*": {concurrency: 4, breaker: {failures: 100}}
` + o.accounts + `
targets:
  bureau_a:
    url: "${A}/proposals"
    timeout: 3s
    callback_secret: "` + cbSecret + `"
` + o.bureauA + `
  bureau_b:
    url: "${B}/evaluations"
    timeout: 3s
    poll: {url: "${B}/evaluations/{{.Reference}}", interval: 1s, done_when: {field: status, in: [approved, rejected]}}
` + o.bureauB + `
` + o.targets + `
kinds:
  credit.evaluate: {target: bureau_a, completion: callback, ` + kind + `}
` + o.extraConfig
}

// world is one test's system: a real nats-server, real providers behind
// real HTTP servers, and ingest (with its HTTP API, where callbacks
// arrive), a dispatcher and a poller.
type world struct {
	*servicetest.Env
	t     *testing.T
	cfg   *config.Config
	yaml  string   // cfg's text, before ${A} and ${B} are put in
	urls  []string // A=… and B=…: the providers' addresses, for a process's environment
	a, b  *provider.Provider
	api   *httptest.Server
	ing   *ingest.Service
	poll  *poller.Service
	sweep chan poller.Report
	reg   *prometheus.Registry
	mx    *metrics.Set
	log   *zerolog.Logger // the services' (disabled when nil)
}

type worldOpts struct {
	a, b        provider.Faults
	aOpts       []provider.Option
	callbacks   *provider.CallbackFaults // bureau A calls back to the API, with these faults
	noDispatch  bool
	noPoller    bool
	reconciler  bool
	extraConfig string
	bureauA     string // more keys of bureau A's target, indented 4
	bureauB     string // more keys of bureau B's target, indented 4
	targets     string // more targets, indented 2
	accounts    string // more accounts, indented 2
	poller      string // more keys of the poller's mapping, each after ", "
	hooks       *dispatcher.Hooks
	log         *zerolog.Logger // the services log here
}

func newWorld(t *testing.T, kind string, o worldOpts) *world {
	t.Helper()
	w := &world{t: t, sweep: make(chan poller.Report, 16), reg: prometheus.NewRegistry(), log: o.log,
		Env: servicetest.Start(t, servicetest.Options{Timeout: 2 * time.Minute})}
	var err error
	if w.mx, err = metrics.New(w.reg); err != nil {
		t.Fatal(err)
	}

	// The API server exists before bureau A so that A can call back to it;
	// its handler is set once ingest is up.
	var mux http.Handler = http.NotFoundHandler()
	w.api = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) { mux.ServeHTTP(rw, r) }))
	t.Cleanup(w.api.Close)
	aOpts := append([]provider.Option{provider.WithIdempotent()}, o.aOpts...)
	if o.callbacks != nil {
		aOpts = append(aOpts, provider.WithCallbacks(w.api.URL+"/v1/callbacks/bureau_a", cbSecret, 0))
	}
	w.a = provider.New(o.a, aOpts...)
	if o.callbacks != nil {
		w.a.SetCallbackFaults(*o.callbacks)
	}
	w.b = provider.New(o.b, provider.WithIdempotent())
	sa, sb := httptest.NewServer(w.a), httptest.NewServer(w.b)
	t.Cleanup(sa.Close)
	t.Cleanup(sb.Close)
	t.Cleanup(func() { _ = w.a.Close(); _ = w.b.Close() })

	w.yaml, w.urls = flowWith(kind, o), []string{"A=" + sa.URL, "B=" + sb.URL}
	w.cfg = servicetest.Config(t, w.yaml, map[string]string{"A": sa.URL, "B": sb.URL})
	nc, _ := w.Srv.Conn(t)
	if w.ing, err = ingest.New(ingest.Options{Conn: nc, Config: w.cfg, Metrics: w.mx, Logger: w.log}); err != nil {
		t.Fatal(err)
	}
	servicetest.Run(w.t, w.Ctx(), w.ing)
	m := http.NewServeMux()
	w.ing.Routes(m)
	mux = m
	if !o.noDispatch {
		w.dispatcherWith(o.hooks)
	}
	if !o.noPoller {
		w.poller(o.reconciler)
	}
	return w
}

func (w *world) dispatcher() { w.dispatcherWith(nil) }

func (w *world) dispatcherWith(hooks *dispatcher.Hooks) {
	w.t.Helper()
	nc, _ := w.Srv.Conn(w.t)
	d, err := dispatcher.New(dispatcher.Options{Conn: nc, Config: w.cfg, Instance: "d1", Metrics: w.mx, Hooks: hooks, Logger: w.log})
	if err != nil {
		w.t.Fatal(err)
	}
	servicetest.Run(w.t, w.Ctx(), d)
}

func (w *world) poller(reconciler bool) *poller.Service {
	w.t.Helper()
	nc, _ := w.Srv.Conn(w.t)
	p, err := poller.New(poller.Options{Conn: nc, Config: w.cfg, Instance: "p1", NoReconciler: !reconciler, Metrics: w.mx, Logger: w.log,
		OnSweep: func(r poller.Report) {
			select {
			case w.sweep <- r:
			default:
			}
		}})
	if err != nil {
		w.t.Fatal(err)
	}
	servicetest.Run(w.t, w.Ctx(), p)
	w.poll = p
	return p
}

// submit posts a credit evaluation over HTTP and returns its id; headers
// alternate name, value.
func (w *world) submit(key, payload string, headers ...string) string {
	w.t.Helper()
	body := `{"account":"acme","kind":"credit.evaluate","payload":` + payload + `}`
	req, _ := http.NewRequestWithContext(w.Ctx(), http.MethodPost, w.api.URL+"/v1/events", strings.NewReader(body))
	req.Header.Set("Idempotency-Key", key)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusAccepted {
		w.t.Fatalf("submit: want 202, got %d %s", resp.StatusCode, b)
	}
	var v struct{ ID string }
	_ = json.Unmarshal(b, &v)
	return v.ID
}

// callback posts a webhook to /v1/callbacks/<target>, signed with secret
// at time ts, and returns the status and decoded answer.
func (w *world) callback(target, secret, webhookID string, ts time.Time, body string) (int, ingest.CallbackReply) {
	w.t.Helper()
	req, _ := http.NewRequestWithContext(w.Ctx(), http.MethodPost, w.api.URL+"/v1/callbacks/"+target, bytes.NewReader([]byte(body)))
	for k, v := range webhook.Headers(secret, webhookID, ts, []byte(body)) {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	var rep ingest.CallbackReply
	b, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(b, &rep)
	return resp.StatusCode, rep
}

// actions lists the history's actions in order, as "action[:actor]".
func actions(r state.Record) []string {
	var out []string
	for _, e := range r.History {
		out = append(out, string(e.Action))
	}
	return out
}

func count(r state.Record, a state.ActionName) int {
	n := 0
	for _, e := range r.History {
		if e.Action == a {
			n++
		}
	}
	return n
}

func detailOf(r state.Record, a state.ActionName) string {
	for i := len(r.History) - 1; i >= 0; i-- {
		if r.History[i].Action == a {
			return r.History[i].Detail
		}
	}
	return ""
}

func webhookHeaders(secret, id, body string) http.Header {
	return webhook.Headers(secret, id, time.Now(), []byte(body))
}

func jetstreamPurgeSubject(s string) jetstream.StreamPurgeOpt { return jetstream.WithPurgeSubject(s) }

// notes counts the recorded no-ops whose detail contains s.
func notes(r state.Record, s string) int {
	n := 0
	for _, e := range r.History {
		if e.Action == state.Note && strings.Contains(e.Detail, s) {
			n++
		}
	}
	return n
}

// putOff is how many of account's timers this world's poller put off
// for reason (tenaz_poller_put_off_total; 0 when it has no series).
func (w *world) putOff(account, reason string) float64 {
	w.t.Helper()
	if n := servicetest.Metric(w.t, w.reg, metrics.NamePutOff, "account", account, "reason", reason); !math.IsNaN(n) {
		return n
	}
	return 0
}

func (w *world) wantMetric(name string, labels map[string]string, want float64) {
	w.t.Helper()
	var pairs []string
	for k, v := range labels {
		pairs = append(pairs, k, v)
	}
	if got := servicetest.Metric(w.t, w.reg, name, pairs...); got != want {
		w.t.Errorf("%s%v: want %v, got %v", name, labels, want, got)
	}
}

// twoPollers starts two tenaz-poller processes on the world's config (p1
// and p2) and returns p1, the one a test kills.
func (w *world) twoPollers() *natstest.Proc {
	w.t.Helper()
	bin := natstest.Binary(w.t, "./cmd/tenaz-poller")
	env := append([]string{"NATS_URL=" + w.Srv.ClientURL(), "LOG_LEVEL=warn", "LOG_FORMAT=json"}, w.urls...)
	victim := natstest.StartProc(w.t, "p1", bin, w.yaml, env...)
	natstest.StartProc(w.t, "p2", bin, w.yaml, env...)
	return victim
}
