package ingest_test

import (
	"context"
	"encoding/json"
	"errors"
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
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/store"
	"github.com/tenaz/tenaz/services/dispatcher"
	"github.com/tenaz/tenaz/services/ingest"
	"github.com/tenaz/tenaz/streams"
)

// TestMain checks that every test stopped what it started: services,
// connections, consumers, the embedded server and the HTTP servers.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitFor bounds every wait on an outcome in this package.
const waitFor = 10 * time.Second

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
	t      *testing.T
	srv    *natstest.Server
	nc     *nats.Conn
	js     jetstream.JetStream
	cfg    *config.Config
	prov   *provider.Provider
	target *httptest.Server
	ing    *ingest.Service
	api    *httptest.Server
	st     *store.Store
	subj   names.Subjects // the store's, default prefix

	arrived atomic.Int64    // deliveries that reached the provider, answered or not
	c       context.Context // ends with the test
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
}

type option func(*setupOptions)

func withHooks(h *ingest.Hooks) option { return func(o *setupOptions) { o.hooks = h } }

// withServer starts the nats-server with opts.
func withServer(opts ...natstest.Option) option { return func(o *setupOptions) { o.server = opts } }

// withReplyTimeout sets the ingest services' ReplyTimeout.
func withReplyTimeout(d time.Duration) option { return func(o *setupOptions) { o.replyTimeout = d } }

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
	h := &harness{t: t, o: o}
	var cancel context.CancelFunc
	h.c, cancel = context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	h.srv = natstest.Start(t, o.server...)
	h.prov = provider.New(o.faults, o.provOpts...)
	h.target = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.arrived.Add(1)
		h.prov.ServeHTTP(w, r)
	}))
	t.Cleanup(h.target.Close)
	t.Cleanup(func() { _ = h.prov.Close() })
	h.cfg = h.config(yaml)
	h.nc, h.js = h.srv.Conn(t)
	ctx := h.ctx()
	var err error
	if h.st, err = store.Open(ctx, h.js, store.Options{}); err != nil {
		t.Fatalf("store: %v", err)
	}
	h.subj = names.NewSubjects("").WithPartitions(h.st.Partitions())
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
	cfg, err := config.Parse([]byte(yaml), func(k string) (string, bool) {
		if k == "TARGET" {
			return h.target.URL, true
		}
		return "", false
	})
	if err != nil {
		h.t.Fatalf("config: want a valid config, got %v", err)
	}
	return cfg
}

// ctx is the context of calls to NATS and HTTP: it ends with the test.
func (h *harness) ctx() context.Context { return h.c }

// waitCtx bounds one wait by waitFor.
func (h *harness) waitCtx() context.Context {
	ctx, cancel := context.WithTimeout(h.c, waitFor)
	h.t.Cleanup(cancel)
	return ctx
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
	nc, _ := h.srv.Conn(h.t)
	var a *auth.Authenticator
	if h.o.auth {
		var err error
		if a, err = auth.New(cfg); err != nil {
			h.t.Fatalf("auth.New: %v", err)
		}
	}
	svc, err := ingest.New(ingest.Options{Conn: nc, Config: cfg, Hooks: hooks, Logger: h.o.log, Metrics: h.o.metrics, Auth: a,
		ReplyTimeout: h.o.replyTimeout})
	if err != nil {
		h.t.Fatalf("ingest.New: %v", err)
	}
	if err := svc.Start(h.ctx()); err != nil {
		h.t.Fatalf("ingest.Start: %v", err)
	}
	h.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := svc.Stop(ctx); err != nil {
			h.t.Errorf("ingest.Stop: %v", err)
		}
	})
	return svc
}

// startDispatcher starts a dispatcher on its own connection; it is
// stopped when the test ends.
func (h *harness) startDispatcher(instance string) *dispatcher.Service {
	h.t.Helper()
	nc, _ := h.srv.Conn(h.t)
	client := &http.Client{Transport: &http.Transport{}}
	d, err := dispatcher.New(dispatcher.Options{Conn: nc, Config: h.cfg, Instance: instance, HTTPClient: client})
	if err != nil {
		h.t.Fatalf("dispatcher.New: %v", err)
	}
	if err := d.Start(h.ctx()); err != nil {
		h.t.Fatalf("dispatcher.Start: %v", err)
	}
	h.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := d.Stop(ctx); err != nil {
			h.t.Errorf("dispatcher.Stop: %v", err)
		}
		client.CloseIdleConnections()
	})
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
	req, err := http.NewRequestWithContext(h.ctx(), method, h.api.URL+path, strings.NewReader(body))
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

// record reads an event's record; ok is false if there is none.
func (h *harness) record(id string) (state.Record, bool) {
	h.t.Helper()
	rec, _, err := h.st.Get(h.ctx(), "", id)
	if errors.Is(err, store.ErrNotFound) {
		return rec, false
	}
	if err != nil {
		h.t.Fatalf("store get %s: %v", id, err)
	}
	return rec, true
}

// waitStatus waits until the event's record has status want.
func (h *harness) waitStatus(id string, want state.State) state.Record {
	h.t.Helper()
	var rec state.Record
	var ok bool
	natstest.Eventually(h.t, waitFor, func() bool {
		rec, ok = h.record(id)
		return ok && rec.Status == want
	}, "event %s: want status %s, got %v", id, want, lazy(func() string {
		if !ok {
			return "no record"
		}
		return string(rec.Status)
	}))
	return rec
}

// streamState is the current state of a stream.
func (h *harness) streamState(name string) jetstream.StreamState {
	h.t.Helper()
	s, err := h.js.Stream(h.ctx(), name)
	if err != nil {
		h.t.Fatalf("stream %s: %v", name, err)
	}
	info, err := s.Info(h.ctx())
	if err != nil {
		h.t.Fatalf("stream %s info: %v", name, err)
	}
	return info.State
}

// subjectMsgs counts the messages stored in stream on subjects matching
// filter. (A whole-stream count would include messages that are not
// events, such as the keeper's.)
func (h *harness) subjectMsgs(stream, filter string) uint64 {
	h.t.Helper()
	s, err := h.js.Stream(h.ctx(), stream)
	if err != nil {
		h.t.Fatalf("stream %s: %v", stream, err)
	}
	info, err := s.Info(h.ctx(), jetstream.WithSubjectFilter(filter))
	if err != nil {
		h.t.Fatalf("stream %s info: %v", stream, err)
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n
}

// footprint is everything a submission can leave behind: INTAKE messages
// ingest has seen or has yet to see, event messages and schedules, DEAD
// entries and state records.
type footprint struct {
	IntakeSeen, Events, DeadSeq, StateSeq uint64
}

func (h *harness) footprint() footprint {
	h.t.Helper()
	in := h.consumerInfo(names.StreamIntake, "ingest")
	return footprint{
		IntakeSeen: in.Delivered.Consumer + in.NumPending,
		Events:     h.eventMsgs() + h.schedMsgs(),
		DeadSeq:    h.streamState(names.StreamDead).LastSeq,
		StateSeq:   h.stateSeq(),
	}
}

// consumerInfo is the current state of a consumer.
func (h *harness) consumerInfo(stream, name string) *jetstream.ConsumerInfo {
	h.t.Helper()
	c, err := h.js.Consumer(h.ctx(), stream, name)
	if err != nil {
		h.t.Fatalf("consumer %s/%s: %v", stream, name, err)
	}
	info, err := c.Info(h.ctx())
	if err != nil {
		h.t.Fatalf("consumer %s/%s info: %v", stream, name, err)
	}
	return info
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
	ack, err := h.js.PublishMsg(h.ctx(), m)
	if err != nil {
		h.t.Fatalf("publish %s: %v", subject, err)
	}
	return ack
}

// intakeSettled reports whether the ingest consumer has taken every INTAKE
// message up to seq and settled it (nothing pending, nothing unacked).
func (h *harness) intakeSettled(seq uint64) bool {
	info := h.consumerInfo(names.StreamIntake, "ingest")
	return info.Delivered.Stream >= seq && info.NumPending == 0 && info.NumAckPending == 0
}

// lazy formats as the result of calling it, so that a failure message
// given to natstest.Eventually shows the value at the time of the failure.
type lazy func() string

func (l lazy) String() string { return l() }

// eventMsgs counts the dispatch messages stored over every partition, and
// schedMsgs the schedules.
func (h *harness) eventMsgs() uint64 { return h.overPartitions(h.subj.EventsIn) }

func (h *harness) schedMsgs() uint64 { return h.overPartitions(h.subj.SchedulesIn) }

func (h *harness) overPartitions(filter func(p int) string) uint64 {
	h.t.Helper()
	var n uint64
	for p := range h.subj.Parts() {
		n += h.subjectMsgs(streams.EventsStream("", p), filter(p))
	}
	return n
}

// stateMsgs counts the stored messages of every partition's state
// bucket, and stateSeq adds up their last sequences (a write to any
// moves it).
func (h *harness) stateMsgs() uint64 {
	return h.stateSum(func(s jetstream.StreamState) uint64 { return s.Msgs })
}

func (h *harness) stateSeq() uint64 {
	return h.stateSum(func(s jetstream.StreamState) uint64 { return s.LastSeq })
}

func (h *harness) stateSum(of func(jetstream.StreamState) uint64) uint64 {
	h.t.Helper()
	var n uint64
	for p := range h.subj.Parts() {
		n += of(h.streamState("KV_" + streams.StateBucket("", p)))
	}
	return n
}
