package deadletter_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/auth"
	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/daemon"
	"github.com/tenaz/tenaz/pkg/dead"
	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/queue"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/store"
	"github.com/tenaz/tenaz/services/deadletter"
	"github.com/tenaz/tenaz/services/dispatcher"
)

// env is one test's tenaz: an embedded server, a fake provider behind a
// real HTTP server, and the deadletter service behind another (behind the
// Guard of every binary, requests without credentials signed in as
// alice).
type env struct {
	*servicetest.Env
	t    *testing.T
	p    *provider.Provider
	cfg  *config.Config
	auth *auth.Authenticator
	yaml string // cfg's source, for a replica run as a process
	dl   *deadletter.Service
	http *httptest.Server
}

// Operators of every test's config, each with a key: the history names
// whoever's key a request carries. acme-submit is an API key (submit only)
// of account acme; acme-read and globex-read (acmeReadKey, globexReadKey)
// are read-only keys of their accounts.
var (
	operatorKeys  = map[string]string{}
	acmeSubmitKey string
	authYAML      = func() string {
		y := "auth:\n  operators:\n"
		for _, name := range []string{"alice", "bob", "carol", "dave", "erin", "frank", "gina", "hana", "ivan", "judy"} {
			k, h, err := auth.NewKey()
			if err != nil {
				panic(err)
			}
			operatorKeys[name] = k
			y += fmt.Sprintf("    %s: {hash: %q}\n", name, h)
		}
		k, h, err := auth.NewKey()
		if err != nil {
			panic(err)
		}
		acmeSubmitKey = k
		y += fmt.Sprintf("  keys:\n    acme-submit: {account: acme, scopes: [submit], hash: %q}\n", h)
		for _, r := range []struct {
			id  string
			key *string
		}{{"acme-read", &acmeReadKey}, {"globex-read", &globexReadKey}} {
			k, h, err := auth.NewKey()
			if err != nil {
				panic(err)
			}
			*r.key = k
			y += fmt.Sprintf("    %s: {account: %s, scopes: [read], hash: %q}\n", r.id, strings.TrimSuffix(r.id, "-read"), h)
		}
		return y
	}()
)

var acmeReadKey, globexReadKey string

// baseYAML routes order.create and invoice.send to the provider (one
// attempt: a 422 is dead at once), credit.evaluate with a fallback,
// order.slow with an hour between attempts and credit.callback completed
// by a webhook signed with cbSecret, with the operators of authYAML.
const baseYAML = `
targets:
  erp: {url: "%[1]s/erp", timeout: 5s}
  bureau_b: {url: "%[1]s/bureau", timeout: 5s}
  bureau_cb: {url: "%[1]s/cb", timeout: 5s, callback_secret: "` + cbSecret + `"}
kinds:
  order.create: {target: erp, attempts: 1}
  invoice.send: {target: erp, attempts: 1, schema: '{"type": "object", "required": ["n"]}'}
  credit.evaluate: {target: erp, attempts: 1, fallback: {target: bureau_b, attempts: 1}}
  order.slow: {target: erp, attempts: 3, backoff: {initial: 1h, max: 1h, jitter: 0.01}}
  credit.callback: {target: bureau_cb, completion: callback, callback_sla: 1h}
%[3]s
%[2]s
`

// cbSecret signs the webhooks of bureau_cb.
const cbSecret = "whsec_dGVuYXotZGVhZGxldHRlci1jYWxsYmFjay1zZWNyZXQ="

func setup(t *testing.T, extraYAML string) *env {
	t.Helper()
	return setupWith(t, extraYAML)
}

// setupWith is setup on a nats-server started with server.
func setupWith(t *testing.T, extraYAML string, server ...natstest.Option) *env {
	t.Helper()
	e := &env{t: t, Env: servicetest.Start(t, servicetest.Options{Timeout: 10 * time.Minute, Server: server})}
	var target *httptest.Server
	e.p, target = servicetest.Provider(t, provider.Faults{})
	e.yaml = fmt.Sprintf(baseYAML, target.URL, extraYAML, authYAML)
	cfg := servicetest.Config(t, e.yaml, nil)
	e.cfg = cfg
	var err error
	if e.auth, err = auth.New(cfg); err != nil {
		t.Fatal(err)
	}
	e.dl = e.startDeadletter("")
	mux := http.NewServeMux()
	e.dl.Routes(mux)
	e.http = httptest.NewServer(signedIn("alice", daemon.Handler(cfg, e.auth, mux)))
	t.Cleanup(e.http.Close)
	return e
}

// signedIn gives a request without credentials the operator name's, as a
// browser that has them cached sends them (HTTP Basic).
func signedIn(name string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "" {
			r.SetBasicAuth(name, operatorKeys[name])
		}
		h.ServeHTTP(w, r)
	})
}

// startDeadletter starts a deadletter replica on its own connection.
func (e *env) startDeadletter(instance string) *deadletter.Service {
	e.t.Helper()
	return e.startDeadletterWith(deadletter.Options{Instance: instance})
}

// startDeadletterWith starts a deadletter replica with o on its own
// connection, the env's config and authenticator.
func (e *env) startDeadletterWith(o deadletter.Options) *deadletter.Service {
	e.t.Helper()
	nc, _ := e.Srv.Conn(e.t)
	o.Conn, o.Config, o.Auth = nc, e.cfg, e.auth
	dl, err := deadletter.New(o)
	if err != nil {
		e.t.Fatal(err)
	}
	servicetest.Run(e.t, context.Background(), dl)
	return dl
}

// startDispatcher starts a dispatcher with the given hooks.
func (e *env) startDispatcher(h *dispatcher.Hooks) *dispatcher.Service {
	e.t.Helper()
	return e.startDispatcherWith(dispatcher.Options{Hooks: h})
}

// startDispatcherWith starts a dispatcher with o on its own connection
// (o.Conn and o.Config are the env's).
func (e *env) startDispatcherWith(o dispatcher.Options) *dispatcher.Service {
	e.t.Helper()
	o.Conn, _ = e.Srv.Conn(e.t)
	o.Config = e.cfg
	d, err := dispatcher.New(o)
	if err != nil {
		e.t.Fatal(err)
	}
	servicetest.Run(e.t, context.Background(), d)
	return d
}

// seed makes n events dead (or in manual review, with reason
// dead.ReasonReview) the way the dispatcher and the poller do: the record
// goes to its parked state and an entry with the envelope goes to DEAD.
// Writes are pipelined so that thousands take a moment. It returns the ids.
func (e *env) seed(n int, account, kind, reason, class string, payload func(i int) string) []string {
	e.t.Helper()
	c := servicetest.Context(e.t, 2*time.Minute)
	ids := make([]string, n)
	type pend struct {
		p   store.Pending
		rec state.Record
		env event.Envelope
	}
	pends := make([]pend, 0, n)
	now := time.Now().UTC()
	for i := range n {
		key := fmt.Sprintf("%s-%s-%s-%d-%d", account, kind, reason, i, now.UnixNano())
		ev, err := event.New(event.Fields{Account: account, Kind: kind, IdempotencyKey: key}, []byte(payload(i)), "", "", now)
		if err != nil {
			e.t.Fatal(err)
		}
		rec := queue.Initial(ev)
		must := func(r state.Record, _ []state.EffectKind, err error) state.Record {
			if err != nil {
				e.t.Fatal(err)
			}
			return r
		}
		rec = must(state.Apply(rec, state.Action{Name: state.Claim, Seq: 1, Actor: "dispatcher/test"}, now))
		info := &state.ErrorInfo{Class: class, Message: "target answered 422: rejected by rule", HTTPStatus: 422}
		if reason == dead.ReasonReview {
			rec = must(state.Apply(rec, state.Action{Name: state.AwaitCallback, Actor: "dispatcher/test", Reference: "ref_1"}, now))
			rec = must(state.Apply(rec, state.Action{Name: state.Escalate, Actor: "poller/test", Detail: "no callback within 30m"}, now))
			rec.LastError = info
		} else {
			rec = must(state.Apply(rec, state.Action{Name: state.Fail, Actor: "dispatcher/test", Error: info, Detail: reason + ": " + info.Message}, now))
		}
		p, err := e.St.CreateAsync(rec)
		for errors.Is(err, jetstream.ErrTooManyStalledMsgs) { // a slow disk: let the writes in flight land
			select {
			case <-e.JS.PublishAsyncComplete():
			case <-c.Done():
				e.t.Fatal("seeding records timed out")
			}
			p, err = e.St.CreateAsync(rec)
		}
		if err != nil {
			e.t.Fatal(err)
		}
		pends = append(pends, pend{p, rec, ev})
		ids[i] = ev.ID
	}
	var futs []jetstream.PubAckFuture
	for _, pd := range pends {
		if _, err := pd.p.Wait(c); err != nil {
			e.t.Fatal(err)
		}
		en := dead.Entry{ID: pd.env.ID, Account: account, Kind: kind, Reason: reason, Class: class, Error: pd.rec.LastError.Message,
			Status: 422, At: now, Event: &pd.env, Record: &pd.rec}
		b, _ := json.Marshal(en)
		m := nats.NewMsg(fmt.Sprintf("tenaz.dead.%s.%s", account, kind))
		m.Data = b
		f, err := e.JS.PublishMsgAsync(m)
		if err != nil {
			e.t.Fatal(err)
		}
		futs = append(futs, f)
	}
	for _, f := range futs {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			e.t.Fatal(err)
		case <-c.Done():
			e.t.Fatal("publishing DEAD entries timed out")
		}
	}
	return ids
}

// call requests a micro endpoint of the service as the operator alice.
func (e *env) call(name string, req, rep any) error {
	return e.callWith(operatorKeys["alice"], name, req, rep)
}

// callWith requests a micro endpoint with key as the credential ("": none).
func (e *env) callWith(key, name string, req, rep any) error {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		// Right after start the micro service's subscriptions may not have
		// reached the server yet: no responders is worth another try.
		err := ops.Call(c, e.NC, ops.Subject("tenaz", name), req, rep, ops.WithOperatorKey(key))
		if !errors.Is(err, ops.ErrNoService) {
			return err
		}
		select {
		case <-c.Done():
			return err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// get does a GET of the JSON API and decodes the answer.
func (e *env) get(path string, v any) int {
	e.t.Helper()
	r := servicetest.Send(e.t, e.Ctx(), http.DefaultClient, http.MethodGet, e.http.URL+path, "", "")
	if v != nil && r.Status < 300 {
		if err := json.Unmarshal(r.Body, v); err != nil {
			e.t.Fatalf("GET %s: %v in %s", path, err, r.Body)
		}
	}
	return r.Status
}

// post does a POST of the JSON API with body (as alice) and returns
// status and body.
func (e *env) post(path string, body any, v any) (int, string) {
	e.t.Helper()
	return e.postWith("", path, body, v)
}

// postWith is post with "Authorization: Bearer <key>" unless key is "".
func (e *env) postWith(key, path string, body any, v any) (int, string) {
	e.t.Helper()
	b, _ := json.Marshal(body)
	r := servicetest.Send(e.t, e.Ctx(), http.DefaultClient, http.MethodPost, e.http.URL+path, key, string(b))
	if v != nil && r.Status < 300 {
		if err := json.Unmarshal(r.Body, v); err != nil {
			e.t.Fatalf("POST %s: %v in %s", path, err, r.Body)
		}
	}
	return r.Status, string(r.Body)
}

// listed counts the items of a list for a filter (one request to
// whichever replica answers the micro endpoint).
func (e *env) listed(status state.State, q url.Values) int {
	e.t.Helper()
	ep := ops.DeadList
	if status == state.ManualReview {
		ep = ops.ReviewList
	}
	req := ops.ListRequest{Account: q.Get("account"), Kind: q.Get("kind"), Class: q.Get("class"), Reason: q.Get("reason"), Limit: 1}
	var rep ops.ListReply
	if err := e.call(ep, req, &rep); err != nil {
		e.t.Fatalf("%s: %v", ep, err)
	}
	return rep.Total
}

// waitListed waits until the list holds n items for the filter.
func (e *env) waitListed(status state.State, q url.Values, n int) {
	e.t.Helper()
	natstest.Eventually(e.t, 3*time.Minute, func() bool { return e.listed(status, q) == n }, "%d %s items for %v (have %v)", n, status, q, natstest.Lazy(func() any { return e.listed(status, q) }))
}
