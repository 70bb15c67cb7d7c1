package target_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"go.uber.org/goleak"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/outcome"
	"github.com/tenaz/tenaz/pkg/target"
	"github.com/tenaz/tenaz/pkg/webhook"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// seen is one request as the server got it.
type seen struct {
	method, path string
	header       http.Header
	body         []byte
}

// setup starts a server answering with h and returns a target for cfg
// pointed at it ({{.URL}} in cfg.URL and cfg.Poll.URL is the server's
// address) and the requests the server received.
func setup(t *testing.T, cfg config.Target, h http.HandlerFunc) (*target.Target, <-chan seen) {
	t.Helper()
	got := make(chan seen, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Method, r.URL.RequestURI(), r.Header.Clone(), b}
		r.Body = io.NopCloser(bytes.NewReader(b)) // h may read it again
		h(w, r)
	}))
	t.Cleanup(srv.Close)
	cfg.URL = strings.ReplaceAll(cfg.URL, "{{.URL}}", srv.URL)
	if cfg.Poll != nil {
		p := *cfg.Poll
		p.URL = strings.ReplaceAll(p.URL, "{{.URL}}", srv.URL)
		cfg.Poll = &p
	}
	if cfg.URL == "" {
		cfg.URL = srv.URL + "/"
	}
	tg, err := target.New("erp", cfg, srv.Client())
	if err != nil {
		t.Fatalf("target.New: %v", err)
	}
	return tg, got
}

func answer(status int, body string, header ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

func envelope(t *testing.T) event.Envelope {
	t.Helper()
	env, err := event.New(event.Fields{Account: "acme", Kind: "order.create", EntityID: "o-1", IdempotencyKey: "order-42"},
		[]byte(`{"order_id":"o-1","total":10}`), "", "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return env
}

func call(t *testing.T, tg *target.Target, attempt int) (target.Response, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return tg.Call(ctx, target.Request{Event: envelope(t), Attempt: attempt})
}

func received(t *testing.T, ch <-chan seen) seen {
	t.Helper()
	select {
	case s := <-ch:
		return s
	default:
		t.Fatal("want the server to have received a request, got none")
	}
	return seen{}
}

func TestCallSendsRequest(t *testing.T) {
	t.Parallel()
	tg, got := setup(t, config.Target{
		URL:    "{{.URL}}/v1/{{.Account}}/{{.Kind}}/{{.ID}}",
		Method: http.MethodPut,
		Headers: map[string]config.Secret{
			"Authorization": config.Secret("Bearer s3cret"),
			"X-Tenant":      config.Secret("acme-eu"),
		},
	}, answer(200, `{}`))
	env := envelope(t)
	if _, err := call(t, tg, 3); err != nil {
		t.Fatalf("want success, got %v", err)
	}
	r := received(t, got)
	if r.method != http.MethodPut {
		t.Errorf("method: want PUT, got %s", r.method)
	}
	if want := "/v1/acme/order.create/" + env.ID; r.path != want {
		t.Errorf("path: want %s, got %s", want, r.path)
	}
	for name, want := range map[string]string{
		"Idempotency-Key": env.ID, // the event id, unique across accounts
		"Tenaz-Event-Id":  env.ID,
		"Tenaz-Attempt":   "3",
		"Tenaz-Replay":    "0", // no replay yet
		"Content-Type":    "application/json",
		"Authorization":   "Bearer s3cret",
		"X-Tenant":        "acme-eu",
	} {
		if v := r.header.Values(name); len(v) != 1 || v[0] != want {
			t.Errorf("header %s: want [%s], got %v", name, want, v)
		}
	}
	if r.header.Get(webhook.HeaderSignature) != "" {
		t.Errorf("want no signature without a signing secret, got %q", r.header.Get(webhook.HeaderSignature))
	}
	if string(r.body) != string(env.Payload) {
		t.Errorf("body: want the payload %s, got %s", env.Payload, r.body)
	}
}

func TestCallDefaultsToPost(t *testing.T) {
	t.Parallel()
	tg, got := setup(t, config.Target{}, answer(204, ``))
	if _, err := call(t, tg, 1); err != nil {
		t.Fatalf("want success, got %v", err)
	}
	if r := received(t, got); r.method != http.MethodPost {
		t.Errorf("want POST by default, got %s", r.method)
	}
}

func TestConfiguredHeadersCannotReplaceTenazHeaders(t *testing.T) {
	t.Parallel()
	tg, got := setup(t, config.Target{Headers: map[string]config.Secret{
		"Idempotency-Key": "forged", "Content-Type": "text/plain", "Tenaz-Attempt": "99", "Tenaz-Replay": "7",
	}}, answer(200, `{}`))
	if _, err := call(t, tg, 1); err != nil {
		t.Fatal(err)
	}
	r := received(t, got)
	for name, want := range map[string]string{"Idempotency-Key": envelope(t).ID, "Content-Type": "application/json", "Tenaz-Attempt": "1", "Tenaz-Replay": "0"} {
		if v := r.header.Values(name); len(v) != 1 || v[0] != want {
			t.Errorf("header %s: want [%s], got %v", name, want, v)
		}
	}
}

func TestURLTemplate(t *testing.T) {
	t.Parallel()
	env := envelope(t)
	tests := []struct {
		tpl, want string
	}{
		{"https://erp.example.com/{{.Kind}}", "https://erp.example.com/order.create"},
		{"https://erp.example.com/accounts/{{.Account}}/events/{{.ID}}", "https://erp.example.com/accounts/acme/events/" + env.ID},
		{"https://erp.example.com/orders/{{.EntityID}}?ref={{.Reference}}", "https://erp.example.com/orders/o-1?ref=ref_7"},
		{"https://erp.example.com/q?k={{.Kind | urlquery}}", "https://erp.example.com/q?k=order.create"},
		{"https://erp.example.com/static", "https://erp.example.com/static"},
		{"https://erp.example.com/checks?client_ref={{.ID}}&client_tag={{.Replay}}", "https://erp.example.com/checks?client_ref=" + env.ID + "&client_tag=2"},
	}
	for _, tt := range tests {
		tg, err := target.New("erp", config.Target{URL: tt.tpl}, nil)
		if err != nil {
			t.Fatalf("New(%q): %v", tt.tpl, err)
		}
		got, err := tg.URL(target.Request{Event: env, Reference: "ref_7", Replay: 2})
		if err != nil || got != tt.want {
			t.Errorf("URL(%q): want %q, got %q (%v)", tt.tpl, tt.want, got, err)
		}
	}
	if _, err := target.New("erp", config.Target{URL: "https://x/{{.Kind"}, nil); err == nil {
		t.Error("New with an unclosed action: want an error, got nil")
	}
}

func TestURLTemplateErrorIsPermanent(t *testing.T) {
	t.Parallel()
	tg, err := target.New("erp", config.Target{URL: "https://erp.example.com/{{index .Kind 99}}"}, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	_, err = tg.Call(context.Background(), target.Request{Event: envelope(t), Attempt: 1})
	if !outcome.IsPermanent(err) {
		t.Errorf("want a permanent error for a template that cannot execute, got %v", err)
	}
}

func TestClassifyDefaults(t *testing.T) {
	t.Parallel()
	tg, err := target.New("erp", config.Target{URL: "https://x/"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]outcome.Class{
		200: outcome.ClassSuccess, 201: outcome.ClassSuccess, 202: outcome.ClassSuccess, 204: outcome.ClassSuccess, 299: outcome.ClassSuccess,
		408: outcome.ClassTransient, 429: outcome.ClassTransient, 500: outcome.ClassTransient, 502: outcome.ClassTransient,
		503: outcome.ClassTransient, 504: outcome.ClassTransient, 599: outcome.ClassTransient,
		501: outcome.ClassPermanent, 400: outcome.ClassPermanent, 401: outcome.ClassPermanent, 403: outcome.ClassPermanent,
		404: outcome.ClassPermanent, 409: outcome.ClassPermanent, 422: outcome.ClassPermanent,
		301: outcome.ClassPermanent, 304: outcome.ClassPermanent, 100: outcome.ClassPermanent,
	}
	for status, cls := range want {
		if got := tg.Classify(status); got != cls {
			t.Errorf("Classify(%d): want %s, got %s", status, cls, got)
		}
	}
}

func TestClassifyOverrides(t *testing.T) {
	t.Parallel()
	tg, err := target.New("erp", config.Target{URL: "https://x/", Classify: map[string]string{
		"409": "success", "422": "transient", "503": "permanent",
	}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for status, cls := range map[int]outcome.Class{
		409: outcome.ClassSuccess, 422: outcome.ClassTransient, 503: outcome.ClassPermanent,
		400: outcome.ClassPermanent, 502: outcome.ClassTransient, 200: outcome.ClassSuccess,
	} {
		if got := tg.Classify(status); got != cls {
			t.Errorf("Classify(%d) with overrides: want %s, got %s", status, cls, got)
		}
	}
	if _, err := target.New("erp", config.Target{URL: "https://x/", Classify: map[string]string{"4xx": "success"}}, nil); err == nil {
		t.Error(`New with classify "4xx": want an error, got nil`)
	}
}

func TestCallOutcomes(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 2000) // 4000 bytes, two per character
	tests := []struct {
		name  string
		cfg   config.Target
		h     http.HandlerFunc
		check func(t *testing.T, resp target.Response, err error)
	}{
		{"200 with id", config.Target{}, answer(200, `{"id":"ref_123","status":"accepted"}`), func(t *testing.T, resp target.Response, err error) {
			if err != nil || resp.Status != 200 || resp.Reference != "ref_123" {
				t.Errorf("want nil, 200, reference ref_123, got %v, %d, %q", err, resp.Status, resp.Reference)
			}
		}},
		{"201 with a numeric id kept exact", config.Target{}, answer(201, `{"id":12345678901234567890}`), func(t *testing.T, resp target.Response, err error) {
			if err != nil || resp.Reference != "12345678901234567890" {
				t.Errorf("want nil and reference 12345678901234567890, got %v, %q", err, resp.Reference)
			}
		}},
		{"reference field configured", config.Target{ReferenceField: "job_id"}, answer(202, `{"id":"x","job_id":"job_9"}`), func(t *testing.T, resp target.Response, err error) {
			if err != nil || resp.Reference != "job_9" {
				t.Errorf("want nil and reference job_9, got %v, %q", err, resp.Reference)
			}
		}},
		{"204 without body", config.Target{}, answer(204, ``), func(t *testing.T, resp target.Response, err error) {
			if err != nil || resp.Status != 204 || resp.Reference != "" {
				t.Errorf("want nil, 204, no reference, got %v, %d, %q", err, resp.Status, resp.Reference)
			}
		}},
		{"200 with a non-JSON body", config.Target{}, answer(200, `OK`), func(t *testing.T, resp target.Response, err error) {
			if err != nil || resp.Reference != "" || string(resp.Body) != "OK" {
				t.Errorf("want nil, no reference, body OK, got %v, %q, %q", err, resp.Reference, resp.Body)
			}
		}},
		{"200 with an object id", config.Target{}, answer(200, `{"id":{"v":1}}`), func(t *testing.T, resp target.Response, err error) {
			if err != nil || resp.Reference != "" {
				t.Errorf("want nil and no reference, got %v, %q", err, resp.Reference)
			}
		}},
		{"409 overridden to success", config.Target{Classify: map[string]string{"409": "success"}}, answer(409, `{"id":"ref_dup"}`), func(t *testing.T, resp target.Response, err error) {
			if err != nil || resp.Reference != "ref_dup" {
				t.Errorf("want nil and reference ref_dup, got %v, %q", err, resp.Reference)
			}
		}},
		{"422 permanent", config.Target{}, answer(422, `{"error":"vat number invalid"}`), func(t *testing.T, resp target.Response, err error) {
			if !outcome.IsPermanent(err) {
				t.Fatalf("want a permanent error, got %v", err)
			}
			var h *outcome.HTTPError
			if !errors.As(err, &h) || h.Status != 422 || h.Body != `{"error":"vat number invalid"}` {
				t.Errorf("want HTTPError 422 with the body, got %#v", h)
			}
			if resp.Status != 422 || outcome.StatusOf(err) != 422 {
				t.Errorf("want status 422 on the response and the error, got %d and %d", resp.Status, outcome.StatusOf(err))
			}
		}},
		{"422 overridden to transient", config.Target{Classify: map[string]string{"422": "transient"}}, answer(422, `busy`), func(t *testing.T, _ target.Response, err error) {
			if err == nil || outcome.ClassOf(err) != outcome.ClassTransient || outcome.StatusOf(err) != 422 {
				t.Errorf("want a transient error with status 422, got %v", err)
			}
		}},
		{"503 with Retry-After seconds", config.Target{}, answer(503, `down`, "Retry-After", "7"), func(t *testing.T, _ target.Response, err error) {
			var ra *outcome.RetryAfterError
			if !errors.As(err, &ra) || ra.After != 7*time.Second {
				t.Fatalf("want a *RetryAfterError of 7s, got %v", err)
			}
			if outcome.ClassOf(err) != outcome.ClassTransient || outcome.StatusOf(err) != 503 {
				t.Errorf("want transient with status 503, got %s / %d", outcome.ClassOf(err), outcome.StatusOf(err))
			}
		}},
		{"429 with Retry-After date", config.Target{}, answer(429, ``, "Retry-After", time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)), func(t *testing.T, _ target.Response, err error) {
			var ra *outcome.RetryAfterError
			if !errors.As(err, &ra) || ra.After < 58*time.Minute || ra.After > time.Hour {
				t.Fatalf("want a *RetryAfterError of about 1h, got %v", err)
			}
		}},
		{"503 without Retry-After", config.Target{}, answer(503, `down`), func(t *testing.T, _ target.Response, err error) {
			var ra *outcome.RetryAfterError
			if err == nil || errors.As(err, &ra) || outcome.ClassOf(err) != outcome.ClassTransient || outcome.StatusOf(err) != 503 {
				t.Errorf("want a plain transient error with status 503, got %v", err)
			}
		}},
		{"503 with a garbage Retry-After", config.Target{}, answer(503, ``, "Retry-After", "soon"), func(t *testing.T, _ target.Response, err error) {
			var ra *outcome.RetryAfterError
			if err == nil || errors.As(err, &ra) {
				t.Errorf("want a plain transient error, got %v", err)
			}
		}},
		{"long error body is cut to an excerpt", config.Target{}, answer(400, long), func(t *testing.T, resp target.Response, err error) {
			var h *outcome.HTTPError
			if !errors.As(err, &h) {
				t.Fatalf("want an HTTPError, got %v", err)
			}
			if len(h.Body) > 1024+len("…") || !strings.HasSuffix(h.Body, "…") || !utf8.ValidString(h.Body) {
				t.Errorf("want a valid UTF-8 excerpt of at most 1 KiB ending in …, got %d bytes (valid %v)", len(h.Body), utf8.ValidString(h.Body))
			}
			if len(resp.Body) != len(long) {
				t.Errorf("want the whole body on the response, got %d bytes", len(resp.Body))
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tg, _ := setup(t, tt.cfg, tt.h)
			resp, err := call(t, tg, 1)
			tt.check(t, resp, err)
		})
	}
}

func TestCallTimeout(t *testing.T) {
	t.Parallel()
	const timeout = 200 * time.Millisecond
	tg, _ := setup(t, config.Target{Timeout: config.Duration(timeout)}, func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // hang until the client gives up
	})
	start := time.Now()
	_, err := call(t, tg, 1)
	elapsed := time.Since(start)
	if !errors.Is(err, outcome.ErrTimeout) || outcome.ClassOf(err) != outcome.ClassTimeout {
		t.Fatalf("want an error wrapping ErrTimeout (class timeout), got %v", err)
	}
	if elapsed < timeout || elapsed > timeout+5*time.Second {
		t.Errorf("want the call to end at the %s timeout, it took %s", timeout, elapsed)
	}
}

func TestCallTimeoutWhileReadingTheAnswer(t *testing.T) {
	t.Parallel()
	tg, _ := setup(t, config.Target{Timeout: config.Duration(200 * time.Millisecond)}, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		_, _ = io.WriteString(w, `{"id":`)
		w.(http.Flusher).Flush()
		<-r.Context().Done() // the rest never comes
	})
	_, err := call(t, tg, 1)
	if !errors.Is(err, outcome.ErrTimeout) {
		t.Fatalf("want an error wrapping ErrTimeout, got %v", err)
	}
}

func TestCallCallerCancelIsNotTimeout(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	tg, _ := setup(t, config.Target{Timeout: config.Duration(time.Minute)}, func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-r.Context().Done()
	})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-started; cancel() }()
	_, err := tg.Call(ctx, target.Request{Event: envelope(t), Attempt: 1})
	if err == nil || errors.Is(err, outcome.ErrTimeout) || outcome.IsPermanent(err) {
		t.Errorf("want a transient, non-timeout error when the caller cancels, got %v", err)
	}
}

func TestCallConnectionRefused(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	tg, err := target.New("erp", config.Target{URL: "http://" + addr + "/"}, &http.Client{Transport: tr})
	if err != nil {
		t.Fatal(err)
	}
	_, err = tg.Call(context.Background(), target.Request{Event: envelope(t), Attempt: 1})
	if err == nil || outcome.ClassOf(err) != outcome.ClassTransient || !strings.Contains(err.Error(), "erp") {
		t.Errorf("want a transient error naming the target, got %v (class %s)", err, outcome.ClassOf(err))
	}
}

func TestCallSigned(t *testing.T) {
	t.Parallel()
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	// The server verifies as a provider would: 401 unless the signature holds.
	verify := func(secret string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			if err := webhook.Verify(secret, r.Header, body, 5*time.Minute, time.Now()); err != nil {
				http.Error(w, err.Error(), http.StatusUnauthorized)
				return
			}
			w.WriteHeader(http.StatusOK)
		}
	}
	tg, got := setup(t, config.Target{SigningSecret: config.Secret(secret)}, verify(secret))
	env := envelope(t)
	if _, err := call(t, tg, 1); err != nil {
		t.Fatalf("want the server to verify the signature, got %v", err)
	}
	if id := received(t, got).header.Get(webhook.HeaderID); id != env.ID {
		t.Errorf("webhook-id: want the event id %s, got %q", env.ID, id)
	}
	// The check above can fail: a server with another secret refuses.
	other, _ := setup(t, config.Target{SigningSecret: config.Secret(secret)}, verify("whsec_"+strings.Repeat("A", 32)))
	if _, err := call(t, other, 1); outcome.StatusOf(err) != http.StatusUnauthorized {
		t.Errorf("want 401 from a server with another secret, got %v", err)
	}
	unsigned, _ := setup(t, config.Target{}, verify(secret))
	if _, err := call(t, unsigned, 1); outcome.StatusOf(err) != http.StatusUnauthorized {
		t.Errorf("want 401 for an unsigned call, got %v", err)
	}
}

func TestNewDefaultClient(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(answer(200, `{"id":"r"}`))
	t.Cleanup(srv.Close)
	t.Cleanup(target.DefaultClient.CloseIdleConnections)
	tg, err := target.New("erp", config.Target{URL: srv.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := call(t, tg, 1)
	if err != nil || resp.Reference != "r" {
		t.Errorf("want success through DefaultClient, got %v, %q", err, resp.Reference)
	}
}

// Values a caller chose are escaped in the URL for where they land: an
// entity id or a reference cannot change the path or query of the call.
func TestURLEscapesCallerValues(t *testing.T) {
	t.Parallel()
	tg, err := target.New("erp", config.Target{URL: "http://erp.local/orders/{{.EntityID}}/ref/{{.Reference}}"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	u, err := tg.URL(target.Request{Event: event.Envelope{ID: "ev_x", Account: "a", Kind: "k", EntityID: "../admin?x=1"}, Reference: "r/1"})
	if err != nil {
		t.Fatal(err)
	}
	if want := "http://erp.local/orders/..%2Fadmin%3Fx=1/ref/r%2F1"; u != want {
		t.Fatalf("want %s, got %s", want, u)
	}
	// In the query, & and = are escaped too: no parameter can be added.
	tg, err = target.New("erp", config.Target{URL: "http://erp.local/orders?id={{.EntityID}}&ref={{.Reference}}"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	u, err = tg.URL(target.Request{Event: event.Envelope{ID: "ev_x", EntityID: "1&admin=true"}, Reference: "r#x"})
	if want := "http://erp.local/orders?id=1%26admin%3Dtrue&ref=r%23x"; err != nil || u != want {
		t.Fatalf("want %s, got %s (%v)", want, u, err)
	}
	// A whole ".." segment is refused, not sent.
	tg, err = target.New("erp", config.Target{URL: "http://erp.local/orders/{{.EntityID}}/items"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tg.Call(context.Background(), target.Request{Event: event.Envelope{ID: "ev_x", EntityID: ".."}}); !outcome.IsPermanent(err) {
		t.Fatalf(`entity id "..": want a permanent error and no call, got %v`, err)
	}
}

// A poll answer's done_when value may be a string, a number or a boolean:
// each is compared as written (a number is not reformatted, so 1000000
// is not "1e+06"), and null or a missing field is never done.
func TestPollDoneWhenValues(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in        []string
		body      string
		wantValue string
		wantDone  bool
	}{
		{[]string{"approved"}, `{"status":"approved"}`, "approved", true},
		{[]string{"true"}, `{"status":true}`, "true", true},
		{[]string{"true"}, `{"status":false}`, "false", false},
		{[]string{"1000000"}, `{"status":1000000}`, "1000000", true},
		{[]string{"12345678901234567890"}, `{"status":12345678901234567890}`, "12345678901234567890", true},
		{[]string{"null", "<nil>", ""}, `{"status":null}`, "", false},
		{[]string{"<nil>", ""}, `{}`, "", false},
		{[]string{"approved"}, `{"status":{"approved":true}}`, "", false},
	} {
		tg, _ := setup(t, config.Target{Poll: &config.Poll{URL: "{{.URL}}/jobs/{{.Reference}}", DoneWhen: config.DoneWhen{Field: "status", In: tc.in}}}, answer(200, tc.body))
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		a, err := tg.Poll(ctx, target.Request{Event: envelope(t), Reference: "r1"})
		cancel()
		if err != nil || a.Value != tc.wantValue || a.Done != tc.wantDone {
			t.Errorf("poll answering %s with done_when.in %q: want value %q, done %v; got %q, %v, %v", tc.body, tc.in, tc.wantValue, tc.wantDone, a.Value, a.Done, err)
		}
	}
}

// A 2xx answer that is a JSON object read two ways (a member given twice,
// at any depth, or a lone surrogate escape) is not read: a poll answering
// {"status":"processing","status":"approved"} may mean either, so it is a
// permanent error naming the member (a person decides), and a call's
// answer gives no reference and says why. An answer that is not a JSON
// object is read as before: no value, no error.
func TestAnswerThatReadsTwoWaysIsNotRead(t *testing.T) {
	t.Parallel()
	for _, body := range []string{
		`{"status":"processing","status":"approved"}`,
		`{"status":"approved","detail":{"score":1,"score":2}}`,
		`{"status":"approved","note":"\udc00"}`,
	} {
		tg, _ := setup(t, config.Target{Poll: &config.Poll{URL: "{{.URL}}/jobs/{{.Reference}}", DoneWhen: config.DoneWhen{Field: "status", In: []string{"approved"}}}}, answer(200, body))
		a, err := tg.Poll(t.Context(), target.Request{Event: envelope(t), Reference: "r1"})
		if !outcome.IsPermanent(err) || a.Done || !strings.Contains(err.Error(), "poll answer") {
			t.Errorf("poll answering %s: want a permanent error about the answer and not done, got done %v, %v", body, a.Done, err)
		}
		tg, _ = setup(t, config.Target{}, answer(202, strings.Replace(body, `"status"`, `"id"`, 2)))
		resp, err := tg.Call(t.Context(), target.Request{Event: envelope(t)})
		if err != nil || resp.Reference != "" || resp.Unclear == nil {
			t.Errorf("call answering %s: want success, no reference, and why, got %q, %v (%v)", body, resp.Reference, resp.Unclear, err)
		}
	}
	// A final answer over MaxResponse is cut where its field may be: not
	// read as "not final" (polled again until the deadline), but refused.
	big := `{"status":"approved","pad":"` + strings.Repeat("x", target.MaxResponse) + `"}`
	tg, _ := setup(t, config.Target{Poll: &config.Poll{URL: "{{.URL}}/jobs/{{.Reference}}", DoneWhen: config.DoneWhen{Field: "status", In: []string{"approved"}}}}, answer(200, big))
	if a, err := tg.Poll(t.Context(), target.Request{Event: envelope(t), Reference: "r1"}); !outcome.IsPermanent(err) || a.Done || !strings.Contains(err.Error(), "poll answer over") {
		t.Errorf("poll answering %d bytes: want a permanent error naming the size, got done %v, %v", len(big), a.Done, err)
	}
	for _, body := range []string{`approved`, `["approved","approved"]`, `{"id":"j1","status":"approved"}`} {
		tg, _ := setup(t, config.Target{}, answer(202, body))
		if resp, err := tg.Call(t.Context(), target.Request{Event: envelope(t)}); err != nil || resp.Unclear != nil {
			t.Errorf("call answering %s: want it read as before, got %v (%v)", body, resp.Unclear, err)
		}
	}
}

// A call or poll whose request cannot be made (its URL does not fit) is
// refused for good as ErrNotSent, and the target sees nothing; one the
// target answered, however it answered, is not ErrNotSent: what it
// counts against the target's limits was spent.
func TestARequestNotMadeIsNotSent(t *testing.T) {
	t.Parallel()
	repeat := func(v string) string { return strings.Repeat("{{."+v+"}}", 12) }
	tg, got := setup(t, config.Target{URL: "{{.URL}}/orders/" + repeat("EntityID"),
		Poll: &config.Poll{URL: "{{.URL}}/jobs/" + repeat("Reference"), DoneWhen: config.DoneWhen{Field: "status", In: []string{"done"}}}},
		answer(503, `{"error":"down"}`))
	long := strings.Repeat("/", names.MaxKeyLen) // 3 bytes each once escaped: 12 of them pass 8 KiB
	env := envelope(t)
	env.EntityID = long
	ctx := context.Background()
	_, callErr := tg.Call(ctx, target.Request{Event: env, Attempt: 1})
	_, pollErr := tg.Poll(ctx, target.Request{Event: envelope(t), Reference: long})
	for what, err := range map[string]error{"call": callErr, "poll": pollErr} {
		if !errors.Is(err, target.ErrNotSent) || !outcome.IsPermanent(err) || !strings.Contains(err.Error(), "expands to more than") {
			t.Errorf("%s whose URL does not fit: want a permanent ErrNotSent naming the URL's size, got %v", what, err)
		}
	}
	select {
	case s := <-got:
		t.Fatalf("want nothing sent for a URL that does not fit, the target saw %s %s", s.method, s.path)
	default:
	}
	env.EntityID = "o-1"
	_, callErr = tg.Call(ctx, target.Request{Event: env, Attempt: 1})
	_, pollErr = tg.Poll(ctx, target.Request{Event: envelope(t), Reference: "r1"})
	for what, err := range map[string]error{"call": callErr, "poll": pollErr} {
		if err == nil || errors.Is(err, target.ErrNotSent) {
			t.Errorf("%s the target refused with a 503: want an error that is not ErrNotSent, got %v", what, err)
		}
	}
	if n := len(got); n != 2 {
		t.Errorf("want the call and the poll that fit sent, the target saw %d requests", n)
	}
}
