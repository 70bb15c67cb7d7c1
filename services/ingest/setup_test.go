package ingest_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/tenaz/tenaz/pkg/auth"
	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/metrics"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/services/dispatcher"
	"github.com/tenaz/tenaz/services/ingest"
)

// TestMain checks that every test stopped what it started: services,
// connections, consumers, the embedded server and the HTTP servers.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// baseYAML is the config most tests use: one target (the fault-injecting
// provider, its URL from ${TARGET}) and one kind. streams.ack_wait is 1s so
// that a dispatch message abandoned by a simulated crash comes back fast.
const baseYAML = `
http: {max_body_bytes: 4096}
streams: {ack_wait: 1s}
targets:
  erp: {url: "${TARGET}/api/{{.Kind}}", timeout: 5s}
kinds:
  order.create: {target: erp, attempts: 3, backoff: {initial: 1s, multiplier: 1, jitter: 0}, entity: order_id}
`

// harness is one test's world: a real nats-server, a real provider behind
// a real HTTP server, the ingest service and its HTTP API.
type harness struct {
	*servicetest.Env
	t      *testing.T
	cfg    *config.Config
	prov   *provider.Provider
	target *httptest.Server
	ing    *ingest.Service
	api    *httptest.Server

	arrived atomic.Int64 // deliveries that reached the provider, answered or not
	o       setupOptions
}

type setupOptions struct {
	hooks        *ingest.Hooks
	faults       provider.Faults
	provOpts     []provider.Option
	log          *zerolog.Logger // the ingest services' logger
	metrics      *metrics.Set    // the ingest services' metrics
	auth         bool            // the ingest services check the config's keys
	server       []natstest.Option
	replyTimeout time.Duration // the ingest services' ReplyTimeout
	early        int           // the ingest services' EarlyWebhooks
	batchers     int           // the ingest services' Batchers (and ordered loops)
	timeout      time.Duration // bounds the test's context; 0 is servicetest's minute
}

type option func(*setupOptions)

func withHooks(h *ingest.Hooks) option { return func(o *setupOptions) { o.hooks = h } }

// withServer starts the nats-server with opts.
func withServer(opts ...natstest.Option) option { return func(o *setupOptions) { o.server = opts } }

// withReplyTimeout sets the ingest services' ReplyTimeout.
func withReplyTimeout(d time.Duration) option { return func(o *setupOptions) { o.replyTimeout = d } }

// withEarlyWebhooks sets the ingest services' EarlyWebhooks.
func withEarlyWebhooks(n int) option { return func(o *setupOptions) { o.early = n } }

// withBatchers sets the ingest services' Batchers, which is also their
// count of ordered loops.
func withBatchers(n int) option { return func(o *setupOptions) { o.batchers = n } }

// withTimeout bounds the test's context (h.Ctx) by d.
func withTimeout(d time.Duration) option { return func(o *setupOptions) { o.timeout = d } }

// withLog sends the ingest services' logs to w.
func withLog(w io.Writer) option {
	return func(o *setupOptions) { l := zerolog.New(w); o.log = &l }
}

// withMetrics records the ingest services' metrics on set.
func withMetrics(set *metrics.Set) option { return func(o *setupOptions) { o.metrics = set } }

// withAuth gives the ingest services an Authenticator of the config's
// auth section, as the binaries do.
func withAuth() option { return func(o *setupOptions) { o.auth = true } }

// setup starts the server, the provider and the ingest service (with the
// HTTP API on an httptest server) for config yaml; everything stops when
// the test ends, in reverse order.
func setup(t *testing.T, yaml string, opts ...option) *harness {
	t.Helper()
	var o setupOptions
	for _, f := range opts {
		f(&o)
	}
	h := &harness{t: t, o: o, Env: servicetest.Start(t, servicetest.Options{Server: o.server, Timeout: o.timeout})}
	h.prov = provider.New(o.faults, o.provOpts...)
	h.target = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.arrived.Add(1)
		h.prov.ServeHTTP(w, r)
	}))
	t.Cleanup(h.target.Close)
	t.Cleanup(func() { _ = h.prov.Close() })
	h.cfg = h.config(yaml)
	h.ing = h.startIngest(o.hooks)
	mux := http.NewServeMux()
	h.ing.Routes(mux)
	h.api = httptest.NewServer(mux)
	t.Cleanup(h.api.Close)
	return h
}

// config parses yaml with ${TARGET} set to the provider's URL.
func (h *harness) config(yaml string) *config.Config {
	h.t.Helper()
	return servicetest.Config(h.t, yaml, map[string]string{"TARGET": h.target.URL})
}

// startIngest starts an ingest service on its own connection, as a
// separate process would; it is stopped when the test ends.
func (h *harness) startIngest(hooks *ingest.Hooks) *ingest.Service {
	h.t.Helper()
	return h.startIngestConfig(h.cfg, hooks)
}

// startIngestConfig is startIngest for a replica running config cfg.
func (h *harness) startIngestConfig(cfg *config.Config, hooks *ingest.Hooks) *ingest.Service {
	h.t.Helper()
	nc, _ := h.Srv.Conn(h.t)
	var a *auth.Authenticator
	if h.o.auth {
		var err error
		if a, err = auth.New(cfg); err != nil {
			h.t.Fatalf("auth.New: %v", err)
		}
	}
	svc, err := ingest.New(ingest.Options{Conn: nc, Config: cfg, Hooks: hooks, Logger: h.o.log, Metrics: h.o.metrics, Auth: a,
		ReplyTimeout: h.o.replyTimeout, EarlyWebhooks: h.o.early, Batchers: h.o.batchers})
	if err != nil {
		h.t.Fatalf("ingest.New: %v", err)
	}
	servicetest.Run(h.t, h.Ctx(), svc)
	return svc
}

// startDispatcher starts a dispatcher on its own connection; it is
// stopped when the test ends.
func (h *harness) startDispatcher(instance string) *dispatcher.Service {
	h.t.Helper()
	nc, _ := h.Srv.Conn(h.t)
	client := &http.Client{Transport: &http.Transport{}}
	d, err := dispatcher.New(dispatcher.Options{Conn: nc, Config: h.cfg, Instance: instance, HTTPClient: client})
	if err != nil {
		h.t.Fatalf("dispatcher.New: %v", err)
	}
	h.t.Cleanup(client.CloseIdleConnections) // after the Stop below
	servicetest.Run(h.t, h.Ctx(), d)
	return d
}

// response is an HTTP answer with its JSON body decoded loosely.
type response struct {
	Status int
	Body   []byte
}

func (r response) json(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("want a JSON body, got %q: %v", r.Body, err)
	}
}

// errorCode decodes {error: {code, message}} and fails unless message is set.
func (r response) errorCode(t *testing.T) string {
	t.Helper()
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	r.json(t, &e)
	if e.Error.Code == "" || e.Error.Message == "" {
		t.Fatalf("want an error body {error: {code, message}}, got %s", r.Body)
	}
	return e.Error.Code
}

// do sends one request to the ingest API; headers alternate name, value.
func (h *harness) do(method, path, body string, headers ...string) response {
	h.t.Helper()
	r, err := h.send(method, path, body, headers...)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

// send is do for a goroutine other than the test's: it returns the error.
func (h *harness) send(method, path, body string, headers ...string) (response, error) {
	req, err := http.NewRequestWithContext(h.Ctx(), method, h.api.URL+path, strings.NewReader(body))
	if err != nil {
		return response{}, fmt.Errorf("request: %w", err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := h.api.Client().Do(req)
	if err != nil {
		return response{}, fmt.Errorf("want an answer, got %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, fmt.Errorf("reading the body: %w", err)
	}
	return response{Status: resp.StatusCode, Body: b}, nil
}

// footprint is everything a submission can leave behind: INTAKE messages
// ingest has seen or has yet to see, event messages and schedules, DEAD
// entries and state records.
type footprint struct {
	IntakeSeen, Events, DeadSeq, StateSeq uint64
}

func (h *harness) footprint() footprint {
	h.t.Helper()
	in := h.ConsumerInfo(names.StreamIntake, "ingest")
	return footprint{
		IntakeSeen: in.Delivered.Consumer + in.NumPending,
		Events:     h.EventMsgs() + h.SchedMsgs(),
		DeadSeq:    h.StreamState(names.StreamDead).LastSeq,
		StateSeq:   h.StateSeq(),
	}
}

// publishIntake publishes a submission to INTAKE through JetStream;
// headers alternate name, value.
func (h *harness) publishIntake(subject string, body []byte, headers ...string) *jetstream.PubAck {
	h.t.Helper()
	m := nats.NewMsg(subject)
	m.Data = body
	for i := 0; i+1 < len(headers); i += 2 {
		m.Header.Set(headers[i], headers[i+1])
	}
	ack, err := h.JS.PublishMsg(h.Ctx(), m)
	if err != nil {
		h.t.Fatalf("publish %s: %v", subject, err)
	}
	return ack
}

// intakeSettled reports whether the ingest consumer has taken every INTAKE
// message up to seq and settled it (nothing pending, nothing unacked).
// intakeTrimmed reports whether INTAKE holds nothing up to seq: every
// submission up to it settled and purged.
func (h *harness) intakeTrimmed(seq uint64) bool {
	h.t.Helper()
	st, err := h.JS.Stream(h.Ctx(), names.StreamIntake)
	if err != nil {
		h.t.Fatal(err)
	}
	info, err := st.Info(h.Ctx())
	if err != nil {
		h.t.Fatal(err)
	}
	return info.State.FirstSeq > seq
}

// deadRaws are the bodies of the refused submissions account keeps in
// DEAD, in the order they were written.
func (h *harness) deadRaws(account string) []string {
	h.t.Helper()
	var out []string
	for _, e := range h.deadEntries() {
		if e.Account == account {
			out = append(out, string(e.Raw))
		}
	}
	return out
}

func (h *harness) intakeSettled(seq uint64) bool {
	info := h.ConsumerInfo(names.StreamIntake, "ingest")
	return info.Delivered.Stream >= seq && info.NumPending == 0 && info.NumAckPending == 0
}
