// Package servicetest is the test harness the services' tests share: a
// real embedded nats-server with the streams and the state store, and the
// reads and waits the tests make on them. Each service's tests add only
// the few lines that start their own services (this package cannot
// import them).
//
//	e := servicetest.Start(t, servicetest.Options{})
//	cfg := servicetest.Config(t, yaml, map[string]string{"TARGET": url})
//	nc, _ := e.Srv.Conn(t)
//	svc, err := ingest.New(ingest.Options{Conn: nc, Config: cfg})
//	…
//	servicetest.Run(t, e.Ctx(), svc)
//	rec := e.WaitStatus(id, state.Done, servicetest.WaitFor)
package servicetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/dead"
	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/metrics"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/store"
	"github.com/tenaz/tenaz/streams"
)

// WaitFor bounds a wait on an outcome that needs no retry.
const WaitFor = 10 * time.Second

// StopWithin bounds the Stop that Run does when the test ends.
const StopWithin = 10 * time.Second

// Env is one test's NATS: an embedded server, a connection to it, and the
// state store opened on it (which applies the streams).
type Env struct {
	T    testing.TB
	Srv  *natstest.Server
	NC   *nats.Conn
	JS   jetstream.JetStream
	St   *store.Store
	Subj names.Subjects // the store's, default prefix

	c context.Context
}

// Options are how Start differs between tests.
type Options struct {
	// Timeout bounds the test's context (Ctx); 0 is a minute.
	Timeout time.Duration
	// Server are the embedded server's options.
	Server []natstest.Option
}

// Start starts the server, connects and opens the store; everything stops
// when the test ends.
func Start(tb testing.TB, o Options) *Env {
	tb.Helper()
	if o.Timeout == 0 {
		o.Timeout = time.Minute
	}
	e := &Env{T: tb}
	var cancel context.CancelFunc
	e.c, cancel = context.WithTimeout(context.Background(), o.Timeout)
	tb.Cleanup(cancel)
	e.Srv = natstest.Start(tb, o.Server...)
	e.NC, e.JS = e.Srv.Conn(tb)
	var err error
	if e.St, err = store.Open(e.c, e.JS, store.Options{}); err != nil {
		tb.Fatalf("store: %v", err)
	}
	e.Subj = names.NewSubjects("").WithPartitions(e.St.Partitions())
	return e
}

// Attach is Start for a server the test did not start (the embedded one
// of a tenaz run, at url, its streams applied): it connects and opens the
// store there. Srv is nil.
func Attach(tb testing.TB, url string, o Options) *Env {
	tb.Helper()
	if o.Timeout == 0 {
		o.Timeout = time.Minute
	}
	e := &Env{T: tb}
	var cancel context.CancelFunc
	e.c, cancel = context.WithTimeout(context.Background(), o.Timeout)
	tb.Cleanup(cancel)
	nc, err := nats.Connect(url)
	if err != nil {
		tb.Fatalf("connect %s: %v", url, err)
	}
	tb.Cleanup(nc.Close)
	if e.JS, err = jetstream.New(nc); err != nil {
		tb.Fatalf("jetstream: %v", err)
	}
	e.NC = nc
	if e.St, err = store.Open(e.c, e.JS, store.Options{}); err != nil {
		tb.Fatalf("store: %v", err)
	}
	e.Subj = names.NewSubjects("").WithPartitions(e.St.Partitions())
	return e
}

// Ctx is the context of calls to NATS and HTTP: it ends with the test.
func (e *Env) Ctx() context.Context { return e.c }

// WaitCtx bounds one wait by WaitFor.
func (e *Env) WaitCtx() context.Context {
	ctx, cancel := context.WithTimeout(e.c, WaitFor)
	e.T.Cleanup(cancel)
	return ctx
}

// Context is a context that ends after d or with the test.
func Context(tb testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	tb.Cleanup(cancel)
	return ctx
}

// Config parses yaml with the variables vars (${NAME}); no other variable
// is set. It fails the test unless the config is valid.
func Config(tb testing.TB, yaml string, vars map[string]string) *config.Config {
	tb.Helper()
	cfg, err := config.Parse([]byte(yaml), func(k string) (string, bool) {
		v, ok := vars[k]
		return v, ok
	})
	if err != nil {
		tb.Fatalf("config: want a valid config, got %v", err)
	}
	return cfg
}

// Provider starts a fault-injecting provider (faults f, options opts)
// behind a real HTTP server; both stop when the test ends.
func Provider(tb testing.TB, f provider.Faults, opts ...provider.Option) (*provider.Provider, *httptest.Server) {
	p := provider.New(f, opts...)
	srv := httptest.NewServer(p)
	tb.Cleanup(srv.Close)
	tb.Cleanup(func() { _ = p.Close() })
	return p, srv
}

// Response is an HTTP answer, its body read.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// Send makes one request with client: a body that is not empty goes as
// JSON, key (unless "") as a Bearer credential, and headers alternate
// name, value. It fails the test if there is no answer.
func Send(tb testing.TB, ctx context.Context, client *http.Client, method, url, key, body string, headers ...string) Response {
	tb.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		tb.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatalf("%s %s: reading the answer: %v", method, url, err)
	}
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// LogBuffer is a log sink the services' goroutines write while the test
// reads it.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String is everything written so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Service is what every tenaz service is to its tests.
type Service interface {
	Start(context.Context) error
	Stop(context.Context) error
}

// Run starts svc with ctx and stops it, within StopWithin, when the test
// ends (again if the test stopped it: Stop is idempotent).
func Run(tb testing.TB, ctx context.Context, svc Service) {
	tb.Helper()
	if err := svc.Start(ctx); err != nil {
		tb.Fatalf("%T Start: %v", svc, err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), StopWithin)
		defer cancel()
		if err := svc.Stop(ctx); err != nil {
			tb.Errorf("%T Stop: %v", svc, err)
		}
	})
}

// Stop stops svc within StopWithin and fails the test if it cannot.
func Stop(tb testing.TB, svc Service) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), StopWithin)
	defer cancel()
	if err := svc.Stop(ctx); err != nil {
		tb.Fatalf("%T Stop: %v", svc, err)
	}
}

// Lookup reads an event's record (in any partition); ok is false if there
// is none.
func (e *Env) Lookup(id string) (rec state.Record, ok bool) {
	e.T.Helper()
	rec, _, err := e.St.Get(e.c, "", id)
	if errors.Is(err, store.ErrNotFound) {
		return rec, false
	}
	if err != nil {
		e.T.Fatalf("store get %s: %v", id, err)
	}
	return rec, true
}

// DeadKept is how many entries account keeps in DEAD.
func (e *Env) DeadKept(account string) int {
	e.T.Helper()
	st, err := e.JS.Stream(e.c, names.StreamDead)
	if err != nil {
		e.T.Fatal(err)
	}
	n, err := dead.Kept(e.c, st, e.Subj, account)
	if err != nil {
		e.T.Fatal(err)
	}
	return n
}

// DeadWaiting is how many of account's entries wait for room in DEAD
// (dead.Writer.Keep).
func (e *Env) DeadWaiting(account string) int {
	e.T.Helper()
	n, err := (&dead.Writer{JS: e.JS, Subj: e.Subj}).WaitingOf(e.c, account)
	if err != nil {
		e.T.Fatal(err)
	}
	return n
}

// DiscardDead purges account's entries from DEAD, as an operator's
// discards free its room.
func (e *Env) DiscardDead(account string) {
	e.T.Helper()
	st, err := e.JS.Stream(e.c, names.StreamDead)
	if err != nil {
		e.T.Fatal(err)
	}
	if err := st.Purge(e.c, jetstream.WithPurgeSubject(e.Subj.DeadOf(account))); err != nil {
		e.T.Fatal(err)
	}
}

// Record reads an event's record and fails the test if there is none.
func (e *Env) Record(id string) state.Record {
	e.T.Helper()
	rec, _, err := e.St.Get(e.c, "", id)
	if err != nil {
		e.T.Fatalf("record %s: %v", id, err)
	}
	return rec
}

// WaitStatus waits up to within until the event's record has status want.
func (e *Env) WaitStatus(id string, want state.State, within time.Duration) state.Record {
	e.T.Helper()
	var rec state.Record
	var ok bool
	natstest.Eventually(e.T, within, func() bool {
		rec, ok = e.Lookup(id)
		return ok && rec.Status == want
	}, "event %s: want status %s, got %v", id, want, natstest.Lazy(func() any {
		if !ok {
			return "no record"
		}
		return string(rec.Status)
	}))
	return rec
}

// WaitAll watches the state buckets until every event of ids has status
// want, and returns their records. It fails at once if one ends parked or
// terminal in another status, or leaves want, and after timeout with the
// stragglers.
func (e *Env) WaitAll(ids []string, want state.State, timeout time.Duration) map[string]state.Record {
	e.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	updates := make(chan jetstream.KeyValueEntry)
	for _, kv := range e.St.KVs() { // every partition's records, merged
		w, err := kv.WatchAll(ctx)
		if err != nil {
			e.T.Fatalf("watch state: %v", err)
		}
		defer func() { _ = w.Stop() }()
		go func() {
			for u := range w.Updates() {
				if u == nil {
					continue
				}
				select {
				case updates <- u:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	wanted := make(map[string]bool, len(ids))
	for _, id := range ids {
		wanted[id] = true
	}
	recs := map[string]state.Record{}
	remaining := len(ids)
	for remaining > 0 {
		select {
		case u := <-updates:
			if u.Operation() != jetstream.KeyValuePut || !wanted[u.Key()] {
				continue
			}
			var r state.Record
			if err := json.Unmarshal(u.Value(), &r); err != nil {
				e.T.Fatalf("record %s: %v", u.Key(), err)
			}
			prev, seen := recs[r.ID]
			recs[r.ID] = r
			if r.Status == want && (!seen || prev.Status != want) {
				remaining--
			} else if r.Status != want && seen && prev.Status == want {
				e.T.Fatalf("event %s left %s for %s: %+v", r.ID, want, r.Status, r.History)
			}
			if r.Status != want && (r.Status.Terminal() || r.Status.Parked()) {
				e.T.Fatalf("event %s: want %s, got %s (last error %+v, history %s)", r.ID, want, r.Status, r.LastError, Actions(r))
			}
		case <-ctx.Done():
			var late []string
			n := 0
			for _, id := range ids {
				if r, ok := recs[id]; !ok || r.Status != want {
					late = append(late, fmt.Sprintf("%s=%s", id, r.Status))
					n++
				}
			}
			sort.Strings(late)
			if len(late) > 10 {
				late = append(late[:10], "…")
			}
			e.T.Fatalf("want %d events %s within %s, %d are not: %s", len(ids), want, timeout, n, strings.Join(late, " "))
		}
	}
	return recs
}

// Actions is a record's history as "accept>claim>…".
func Actions(r state.Record) string {
	var b strings.Builder
	for i, h := range r.History {
		if i > 0 {
			b.WriteByte('>')
		}
		b.WriteString(string(h.Action))
	}
	return b.String()
}

// Submit publishes one submission of kind per key to INTAKE for account
// (Idempotency-Key = key, payload(key) as the body, and headers, which
// alternate name, value), waits up to WaitFor for every publish to be
// stored, and returns the event ids in key order.
func (e *Env) Submit(account, kind string, keys []string, payload func(key string) string, headers ...string) []string {
	e.T.Helper()
	subject, err := e.Subj.Intake(account, kind)
	if err != nil {
		e.T.Fatalf("intake subject: %v", err)
	}
	ids := make([]string, len(keys))
	futs := make([]jetstream.PubAckFuture, len(keys))
	for i, k := range keys {
		m := nats.NewMsg(subject)
		m.Data = []byte(payload(k))
		m.Header.Set(names.HeaderIdempotencyKey, k)
		for i := 0; i+1 < len(headers); i += 2 {
			m.Header.Set(headers[i], headers[i+1])
		}
		f, err := e.JS.PublishMsgAsync(m)
		if err != nil {
			e.T.Fatalf("publish %s: %v", k, err)
		}
		futs[i] = f
		ids[i] = event.ID(account, k)
	}
	for i, f := range futs {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			e.T.Fatalf("publish %s: %v", keys[i], err)
		case <-time.After(WaitFor):
			e.T.Fatalf("publish %s: no answer within %s", keys[i], WaitFor)
		}
	}
	return ids
}

// StreamState is the current state of a stream.
func (e *Env) StreamState(name string) jetstream.StreamState {
	e.T.Helper()
	s, err := e.JS.Stream(e.c, name)
	if err != nil {
		e.T.Fatalf("stream %s: %v", name, err)
	}
	info, err := s.Info(e.c)
	if err != nil {
		e.T.Fatalf("stream %s info: %v", name, err)
	}
	return info.State
}

// ConsumerInfo is the current state of a consumer.
func (e *Env) ConsumerInfo(stream, name string) *jetstream.ConsumerInfo {
	e.T.Helper()
	c, err := e.JS.Consumer(e.c, stream, name)
	if err != nil {
		e.T.Fatalf("consumer %s/%s: %v", stream, name, err)
	}
	info, err := c.Info(e.c)
	if err != nil {
		e.T.Fatalf("consumer %s/%s info: %v", stream, name, err)
	}
	return info
}

// SubjectMsgs counts the messages stored in stream on subjects matching
// filter. (A whole-stream count would include messages that are not
// events, such as the keeper's.)
func (e *Env) SubjectMsgs(stream, filter string) uint64 {
	e.T.Helper()
	s, err := e.JS.Stream(e.c, stream)
	if err != nil {
		e.T.Fatalf("stream %s: %v", stream, err)
	}
	info, err := s.Info(e.c, jetstream.WithSubjectFilter(filter))
	if err != nil {
		e.T.Fatalf("stream %s info: %v", stream, err)
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n
}

// EventMsgs counts the dispatch messages stored over every partition, and
// SchedMsgs the schedules.
func (e *Env) EventMsgs() uint64 { return e.overPartitions(e.Subj.EventsIn) }

// SchedMsgs counts the schedules stored over every partition.
func (e *Env) SchedMsgs() uint64 { return e.overPartitions(e.Subj.SchedulesIn) }

func (e *Env) overPartitions(filter func(p int) string) uint64 {
	e.T.Helper()
	var n uint64
	for p := range e.Subj.Parts() {
		n += e.SubjectMsgs(streams.EventsStream("", p), filter(p))
	}
	return n
}

// StateMsgs counts the stored messages of every partition's state bucket.
func (e *Env) StateMsgs() uint64 {
	return e.stateSum(func(s jetstream.StreamState) uint64 { return s.Msgs })
}

// StateSeq adds up the last sequences of every partition's state bucket:
// a write to any moves it.
func (e *Env) StateSeq() uint64 {
	return e.stateSum(func(s jetstream.StreamState) uint64 { return s.LastSeq })
}

func (e *Env) stateSum(of func(jetstream.StreamState) uint64) uint64 {
	e.T.Helper()
	var n uint64
	for p := range e.Subj.Parts() {
		n += of(e.StreamState("KV_" + streams.StateBucket("", p)))
	}
	return n
}

// Metric is the value of the series of name whose labels are exactly
// labels (alternating name, value): a counter's or gauge's value, a
// histogram's count. It is NaN when there is no such series, so that it
// equals no wanted value.
func Metric(tb testing.TB, g prometheus.Gatherer, name string, labels ...string) float64 {
	tb.Helper()
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	mfs, err := g.Gather()
	if err != nil {
		tb.Fatalf("gather metrics: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != len(want) {
				continue
			}
			for _, l := range m.GetLabel() {
				if v, ok := want[l.GetName()]; !ok || v != l.GetValue() {
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
	return math.NaN()
}

// Lifecycled is a service with a readiness check.
type Lifecycled interface {
	Service
	Ready() error
}

// CheckLifecycle checks what every service promises, on the one newSvc
// makes with a connection to a new embedded server and an empty config:
// Stop before Start is no error, it is ready only between Start and Stop,
// it answers as the NATS micro service micro at the build's version (the
// one every tenaz service reports), and Stop twice is no error.
func CheckLifecycle[S Lifecycled](t *testing.T, micro string, newSvc func(*nats.Conn, *config.Config) (S, error)) {
	t.Helper()
	nc, _ := natstest.Start(t).Conn(t)
	svc, err := newSvc(nc, Config(t, "", nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Stop(context.Background()); err != nil {
		t.Fatalf("Stop before Start: %v", err)
	}
	if err := svc.Ready(); err == nil {
		t.Fatal("want not ready before Start")
	}
	if err := svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := svc.Ready(); err != nil {
		t.Fatalf("want ready after Start, got %v", err)
	}
	m, err := nc.Request("$SRV.PING."+micro, nil, 2*time.Second)
	if err != nil {
		t.Fatalf("micro ping: %v", err)
	}
	var ping struct{ Version string }
	if err := json.Unmarshal(m.Data, &ping); err != nil || ping.Version != metrics.Build().SemVer() {
		t.Fatalf("micro ping: want version %s (the build's), got %s (%v)", metrics.Build().SemVer(), m.Data, err)
	}
	for i := range 2 {
		if err := svc.Stop(context.Background()); err != nil {
			t.Fatalf("Stop #%d: %v", i+1, err)
		}
	}
	if err := svc.Ready(); err == nil {
		t.Fatal("want not ready after Stop")
	}
}
