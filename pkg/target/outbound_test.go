package target_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/outcome"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/target"
)

// accountEnvelope is an event of account with the caller's key.
func accountEnvelope(t *testing.T, account, key string) event.Envelope {
	t.Helper()
	env, err := event.New(event.Fields{Account: account, Kind: "order.create", IdempotencyKey: key},
		[]byte(`{"order_id":"`+account+`"}`), "", "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// Two accounts that chose the same Idempotency-Key reach a shared target
// that replays the stored answer to a repeated key (as Stripe does): by
// default each call carries its own event id, so each account gets its own
// effect and its own answer. With idempotency_key: caller they collide, as
// the docs warn.
func TestIdempotencyKeyIsPerAccount(t *testing.T) {
	t.Parallel()
	p := provider.New(provider.Faults{}, provider.WithIdempotent())
	srv := httptest.NewServer(p)
	t.Cleanup(func() { srv.Close(); _ = p.Close() })

	callBoth := func(cfg config.Target) (acme, globex target.Response) {
		t.Helper()
		cfg.URL = srv.URL + "/orders"
		tg, err := target.New("erp", cfg, srv.Client())
		if err != nil {
			t.Fatal(err)
		}
		var out [2]target.Response
		for i, account := range []string{"acme", "globex"} {
			resp, err := tg.Call(context.Background(), target.Request{Event: accountEnvelope(t, account, "order-42"), Attempt: 1})
			if err != nil {
				t.Fatalf("%s's call: %v", account, err)
			}
			out[i] = resp
		}
		return out[0], out[1]
	}

	acme, globex := callBoth(config.Target{})
	calls := p.Calls()
	if len(calls) != 2 {
		t.Fatalf("want two calls at the target, got %d", len(calls))
	}
	if calls[0].IdempotencyKey == calls[1].IdempotencyKey {
		t.Errorf("want two Idempotency-Keys, both calls carried %q", calls[0].IdempotencyKey)
	}
	for i, account := range []string{"acme", "globex"} {
		if want := event.ID(account, "order-42"); calls[i].IdempotencyKey != want {
			t.Errorf("%s: want the event id %s as Idempotency-Key, got %q", account, want, calls[i].IdempotencyKey)
		}
		if calls[i].Replayed || !calls[i].Applied {
			t.Errorf("%s: want its own effect, got a replayed answer", account)
		}
	}
	if acme.Reference == "" || acme.Reference == globex.Reference || string(acme.Body) == string(globex.Body) {
		t.Errorf("want each account's own answer, got %q / %s and %q / %s", acme.Reference, acme.Body, globex.Reference, globex.Body)
	}

	// The opt-in sends the caller's key: the second account gets the
	// first one's answer. The target relies on this only knowingly.
	acme, globex = callBoth(config.Target{IdempotencyKey: config.IdempotencyKeyCaller})
	calls = p.Calls()[2:]
	if calls[0].IdempotencyKey != "order-42" || calls[1].IdempotencyKey != "order-42" || !calls[1].Replayed {
		t.Fatalf("idempotency_key: caller: want both calls with order-42, the second replayed, got %+v", calls)
	}
	if acme.Reference != globex.Reference {
		t.Errorf("idempotency_key: caller: want the collision the docs warn of, got %q and %q", acme.Reference, globex.Reference)
	}
	if _, err := target.New("erp", config.Target{URL: srv.URL, IdempotencyKey: "account"}, nil); err == nil {
		t.Error(`idempotency_key "account": want an error, got nil`)
	}
}

// recorder is a server that counts what reaches it and keeps the last
// request's headers and body.
type recorder struct {
	srv    *httptest.Server
	n      atomic.Int64
	header atomic.Pointer[http.Header]
	body   atomic.Pointer[string]
}

func newRecorder(t *testing.T, tls bool, h http.HandlerFunc) *recorder {
	t.Helper()
	r := &recorder{}
	handler := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.n.Add(1)
		hd := req.Header.Clone()
		r.header.Store(&hd)
		b, _ := io.ReadAll(req.Body)
		s := string(b)
		r.body.Store(&s)
		h(w, req)
	})
	if tls {
		r.srv = httptest.NewTLSServer(handler)
	} else {
		r.srv = httptest.NewServer(handler)
	}
	t.Cleanup(r.srv.Close)
	return r
}

func redirectTo(url string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, url, http.StatusTemporaryRedirect)
	}
}

// secretTarget is a target config with a credential header and a
// signature, the things a redirect must not carry to another host.
func secretTarget(url string) config.Target {
	return config.Target{URL: url, Headers: map[string]config.Secret{
		"Authorization": "Bearer tok-redirect-secret", "X-Api-Key": "key-redirect-secret",
	}, SigningSecret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}
}

// A target's 307 to another host is not followed: that host gets nothing
// (no payload, no credential), and the call's outcome is a permanent 307
// that says why.
func TestCallFollowsNoRedirect(t *testing.T) {
	t.Parallel()
	other := newRecorder(t, false, answer(200, `{"id":"stolen"}`))
	tgt := newRecorder(t, false, redirectTo(other.srv.URL+"/collect"))
	tg, err := target.New("erp", secretTarget(tgt.srv.URL+"/orders"), tgt.srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	resp, err := call(t, tg, 1)
	if n := other.n.Load(); n != 0 {
		t.Fatalf("want no request at the host the redirect named, got %d (headers %v, body %q)", n, *other.header.Load(), *other.body.Load())
	}
	if tgt.n.Load() != 1 {
		t.Fatalf("want one call at the target, got %d", tgt.n.Load())
	}
	if !outcome.IsPermanent(err) || outcome.StatusOf(err) != http.StatusTemporaryRedirect || resp.Status != http.StatusTemporaryRedirect {
		t.Fatalf("want a permanent 307 outcome, got %v (status %d)", err, resp.Status)
	}
	if !strings.Contains(err.Error(), "redirect not followed") || strings.Contains(err.Error(), other.srv.URL) {
		t.Errorf("want the error to say the redirect was not followed, without its location, got %q", err)
	}
	if _, err := target.New("erp", config.Target{URL: tgt.srv.URL, Redirects: "all"}, nil); err == nil {
		t.Error(`redirects "all": want an error, got nil`)
	}
}

// With redirects: same_host a call follows an https redirect on its own
// host and port, not one to another host, nor one to http.
func TestSameHostRedirects(t *testing.T) {
	t.Parallel()
	other := newRecorder(t, true, answer(200, `{"id":"stolen"}`))
	var self string
	tgt := newRecorder(t, true, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/moved":
			redirectTo("/orders")(w, r)
		case "/orders":
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte(`{"id":"ref-same-host"}`))
		case "/away":
			redirectTo(other.srv.URL+"/collect")(w, r)
		case "/plain":
			redirectTo("http://"+strings.TrimPrefix(self, "https://")+"/orders")(w, r)
		}
	})
	self = tgt.srv.URL
	client := tgt.srv.Client() // trusts httptest's certificate, which both servers use
	newTarget := func(path string) *target.Target {
		t.Helper()
		c := secretTarget(tgt.srv.URL + path)
		c.Redirects = config.RedirectsSameHost
		tg, err := target.New("erp", c, client)
		if err != nil {
			t.Fatal(err)
		}
		return tg
	}

	resp, err := call(t, newTarget("/moved"), 1)
	if err != nil || resp.Reference != "ref-same-host" {
		t.Fatalf("same-host https redirect: want it followed to success, got %v, %q", err, resp.Reference)
	}
	if h := *tgt.header.Load(); h.Get("X-Api-Key") != "key-redirect-secret" || *tgt.body.Load() == "" {
		t.Errorf("same-host redirect: want the 307 to resend the payload and headers to the same host, got %v, %q", h, *tgt.body.Load())
	}
	for _, path := range []string{"/away", "/plain"} {
		before := tgt.n.Load()
		_, err := call(t, newTarget(path), 1)
		if !outcome.IsPermanent(err) || outcome.StatusOf(err) != http.StatusTemporaryRedirect {
			t.Errorf("%s: want a permanent 307 outcome, got %v", path, err)
		}
		if got := tgt.n.Load() - before; got != 1 {
			t.Errorf("%s: want only the first request at the target, got %d", path, got)
		}
	}
	if n := other.n.Load(); n != 0 {
		t.Errorf("want no request at the other host, got %d (headers %v)", n, *other.header.Load())
	}
}

// A failed call's error names the target, never its URL (a query token),
// its host (an internal name) or a header value: it goes to logs,
// last_error and the screen. Both the transport error and the timeout.
func TestCallErrorsQuoteNoURL(t *testing.T) {
	t.Parallel()
	const (
		token = "tok_q8W2mZ7secret"
		host  = "billing.internal.corp.example"
	)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close() // nothing listens there now
	_, port, _ := net.SplitHostPort(closed)
	// Every dial goes to the closed port: the internal name need not resolve.
	tr := &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, closed)
	}}
	t.Cleanup(tr.CloseIdleConnections)
	tg, err := target.New("erp", config.Target{URL: "http://" + host + ":" + port + "/v1/orders?token=" + token,
		Headers: map[string]config.Secret{"X-Api-Key": "hdr-secret-value"}}, &http.Client{Transport: tr})
	if err != nil {
		t.Fatal(err)
	}
	_, refused := tg.Call(context.Background(), target.Request{Event: envelope(t), Attempt: 1})

	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // so that the server notices the client leave
		<-r.Context().Done()
	}))
	t.Cleanup(hang.Close)
	slow, err := target.New("erp", config.Target{URL: hang.URL + "/v1/orders?token=" + token, Timeout: config.Duration(100 * time.Millisecond),
		Poll: &config.Poll{URL: hang.URL + "/jobs/{{.Reference}}?token=" + token, DoneWhen: config.DoneWhen{Field: "status", In: []string{"done"}}}}, hang.Client())
	if err != nil {
		t.Fatal(err)
	}
	_, timedOut := slow.Call(context.Background(), target.Request{Event: envelope(t), Attempt: 1})
	_, pollTimedOut := slow.Poll(context.Background(), target.Request{Event: envelope(t), Attempt: 1, Reference: "ref-1"})

	for name, err := range map[string]error{"connection refused": refused, "timeout": timedOut, "poll timeout": pollTimedOut} {
		if err == nil {
			t.Fatalf("%s: want an error, got nil", name)
		}
		msg := err.Error()
		for _, secret := range []string{token, host, "hdr-secret-value", hang.Listener.Addr().String(), closed} {
			if strings.Contains(msg, secret) {
				t.Errorf("%s: the error quotes %q: %s", name, secret, msg)
			}
		}
		if !strings.Contains(msg, "erp") && !strings.Contains(msg, "did not answer") {
			t.Errorf("%s: want the error to say which target or what failed, got %s", name, msg)
		}
	}
	if !strings.Contains(refused.Error(), "connection refused") || outcome.ClassOf(refused) != outcome.ClassTransient {
		t.Errorf("want a transient error that still says the connection was refused, got %v", refused)
	}
	if outcome.ClassOf(timedOut) != outcome.ClassTimeout {
		t.Errorf("want a timeout, got %v", timedOut)
	}
}
