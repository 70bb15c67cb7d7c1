package poller_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/metrics"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/store"
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
// credit.evaluate mapping; bureauA adds more keys to bureau A's target
// mapping.
func flowWith(kind, bureauA string) string {
	return `
streams: {ack_wait: 2s}
poller: {grace: 1s, reconcile_every: 1h}
accounts:
  "*": {concurrency: 4, breaker: {failures: 100}}
targets:
  bureau_a:
    url: "${A}/proposals"
    timeout: 3s
    callback_secret: "` + cbSecret + `"
` + bureauA + `
  bureau_b:
    url: "${B}/evaluations"
    timeout: 3s
    poll: {url: "${B}/evaluations/{{.Reference}}", interval: 1s, done_when: {field: status, in: [approved, rejected]}}
kinds:
  credit.evaluate: {target: bureau_a, completion: callback, ` + kind + `}
`
}

// world is one test's system: a real nats-server, real providers behind
// real HTTP servers, and ingest (with its HTTP API, where callbacks
// arrive), a dispatcher and a poller.
type world struct {
	t     *testing.T
	srv   *natstest.Server
	nc    *nats.Conn
	js    jetstream.JetStream
	cfg   *config.Config
	st    *store.Store
	subj  names.Subjects // the store's, default prefix
	a, b  *provider.Provider
	api   *httptest.Server
	ing   *ingest.Service
	poll  *poller.Service
	c     context.Context
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
	hooks       *dispatcher.Hooks
	log         *zerolog.Logger // the services log here
}

func newWorld(t *testing.T, kind string, o worldOpts) *world {
	t.Helper()
	w := &world{t: t, sweep: make(chan poller.Report, 16), reg: prometheus.NewRegistry(), log: o.log}
	var err error
	if w.mx, err = metrics.New(w.reg); err != nil {
		t.Fatal(err)
	}
	var cancel context.CancelFunc
	w.c, cancel = context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	w.srv = natstest.Start(t)
	w.nc, w.js = w.srv.Conn(t)

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

	var cfg *config.Config
	cfg, err = config.Parse([]byte(flowWith(kind, o.bureauA)+o.extraConfig), func(k string) (string, bool) {
		switch k {
		case "A":
			return sa.URL, true
		case "B":
			return sb.URL, true
		}
		return "", false
	})
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	w.cfg = cfg
	if w.st, err = store.Open(w.c, w.js, store.Options{}); err != nil {
		t.Fatal(err)
	}
	w.subj = names.NewSubjects("").WithPartitions(w.st.Partitions())
	nc, _ := w.srv.Conn(t)
	if w.ing, err = ingest.New(ingest.Options{Conn: nc, Config: cfg, Metrics: w.mx, Logger: w.log}); err != nil {
		t.Fatal(err)
	}
	w.start(w.ing)
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

type component interface {
	Start(context.Context) error
	Stop(context.Context) error
}

func (w *world) start(c component) {
	w.t.Helper()
	if err := c.Start(w.c); err != nil {
		w.t.Fatalf("start: %v", err)
	}
	w.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Stop(ctx); err != nil {
			w.t.Errorf("stop: %v", err)
		}
	})
}

func (w *world) dispatcher() { w.dispatcherWith(nil) }

func (w *world) dispatcherWith(hooks *dispatcher.Hooks) {
	w.t.Helper()
	nc, _ := w.srv.Conn(w.t)
	d, err := dispatcher.New(dispatcher.Options{Conn: nc, Config: w.cfg, Instance: "d1", Metrics: w.mx, Hooks: hooks, Logger: w.log})
	if err != nil {
		w.t.Fatal(err)
	}
	w.start(d)
}

func (w *world) poller(reconciler bool) *poller.Service {
	w.t.Helper()
	nc, _ := w.srv.Conn(w.t)
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
	w.start(p)
	w.poll = p
	return p
}

// submit posts a credit evaluation over HTTP and returns its id.
func (w *world) submit(key, payload string) string {
	w.t.Helper()
	body := `{"account":"acme","kind":"credit.evaluate","payload":` + payload + `}`
	req, _ := http.NewRequestWithContext(w.c, http.MethodPost, w.api.URL+"/v1/events", strings.NewReader(body))
	req.Header.Set("Idempotency-Key", key)
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

func (w *world) get(id string) state.Record {
	w.t.Helper()
	r, _, err := w.st.Get(w.c, "", id)
	if err != nil {
		w.t.Fatalf("get %s: %v", id, err)
	}
	return r
}

// waitStatus waits until the event is in want (and fails with its record).
func (w *world) waitStatus(id string, want state.State, within time.Duration) state.Record {
	w.t.Helper()
	var r state.Record
	natstest.Eventually(w.t, within, func() bool {
		var err error
		r, _, err = w.st.Get(w.c, "", id)
		return err == nil && r.Status == want
	}, "event %s: want status %s", id, want)
	_ = r
	return w.get(id)
}

// callback posts a webhook to /v1/callbacks/<target>, signed with secret
// at time ts, and returns the status and decoded answer.
func (w *world) callback(target, secret, webhookID string, ts time.Time, body string) (int, ingest.CallbackReply) {
	w.t.Helper()
	req, _ := http.NewRequestWithContext(w.c, http.MethodPost, w.api.URL+"/v1/callbacks/"+target, bytes.NewReader([]byte(body)))
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

var _ = fmt.Sprint

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

// metric is the value of the series of name with exactly these labels
// (0 when absent).
func (w *world) metric(name string, labels map[string]string) float64 {
	w.t.Helper()
	mfs, err := w.reg.Gather()
	if err != nil {
		w.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, l := range m.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					continue series
				}
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return 0
}

func (w *world) wantMetric(name string, labels map[string]string, want float64) {
	w.t.Helper()
	if got := w.metric(name, labels); got != want {
		w.t.Errorf("%s%v: want %v, got %v", name, labels, want, got)
	}
}
