// Package target calls an external API for one event: it builds the
// request from the target's config (URL template, method, headers,
// timeout, Standard Webhooks signature), sends it, and classifies the
// answer as an outcome error (nil on success) per the target's rules.
//
// A call follows no redirect unless the target allows same-host https
// ones, and its errors never quote the URL, the target's host or a
// header: they end up in logs, in last_error and on the screen.
//
//	t, err := target.New("erp", cfg.TargetFor("acme", "erp"), nil)
//	resp, err := t.Call(ctx, target.Request{Event: env, Attempt: 1})
//	switch outcome.ClassOf(err) { … }
package target

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/outcome"
	"github.com/tenaz/tenaz/pkg/tracing"
	"github.com/tenaz/tenaz/pkg/webhook"
)

// MaxResponse bounds how much of an answer is read.
const MaxResponse = 1 << 20

// Target is one configured external API.
type Target struct {
	Name      string
	url       *config.URLTemplate
	method    string
	timeout   time.Duration
	headers   http.Header
	signing   string
	classify  map[int]outcome.Class
	refField  string
	client    *http.Client
	pollURL   *config.URLTemplate // nil: the target is not polled
	doneWhen  config.DoneWhen
	callerKey bool   // Idempotency-Key is the submitter's key, not the event id
	redirects string // config.RedirectsNone or config.RedirectsSameHost
}

// maxRedirects bounds the same-host redirects one call follows, as
// net/http's default policy does.
const maxRedirects = 10

// DefaultClient is shared by targets built without a client: keep-alive
// with enough idle connections per host for concurrent delivery.
var DefaultClient = &http.Client{Transport: &http.Transport{
	Proxy:               http.ProxyFromEnvironment,
	DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
	MaxIdleConns:        1024,
	MaxIdleConnsPerHost: 256,
	IdleConnTimeout:     90 * time.Second,
}}

// New builds a target from its (account-resolved) config.
func New(name string, c config.Target, client *http.Client) (*Target, error) {
	tpl, err := config.ParseURLTemplate(c.URL)
	if err != nil {
		return nil, fmt.Errorf("target %s: url: %w", name, err)
	}
	if client == nil {
		client = DefaultClient
	}
	t := &Target{
		Name: name, url: tpl, method: c.Method, timeout: c.Timeout.D(),
		headers: http.Header{}, signing: c.SigningSecret.Reveal(),
		classify: map[int]outcome.Class{}, refField: c.ReferenceField,
		redirects: cmp.Or(c.Redirects, config.RedirectsNone),
	}
	switch c.IdempotencyKey {
	case "", config.IdempotencyKeyEvent:
	case config.IdempotencyKeyCaller:
		t.callerKey = true
	default:
		return nil, fmt.Errorf("target %s: idempotency_key %q: must be event or caller", name, c.IdempotencyKey)
	}
	// A copy of the client with this target's redirect policy; it shares
	// the client's transport and so its connections.
	own := *client
	switch t.redirects {
	case config.RedirectsNone:
		own.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	case config.RedirectsSameHost:
		own.CheckRedirect = sameHostRedirect
	default:
		return nil, fmt.Errorf("target %s: redirects %q: must be none or same_host", name, t.redirects)
	}
	t.client = &own
	if c.Poll != nil {
		if t.pollURL, err = config.ParseURLTemplate(c.Poll.URL); err != nil {
			return nil, fmt.Errorf("target %s: poll.url: %w", name, err)
		}
		t.doneWhen = c.Poll.DoneWhen
	}
	if t.method == "" {
		t.method = http.MethodPost
	}
	if t.timeout <= 0 {
		t.timeout = 10 * time.Second
	}
	if t.refField == "" {
		t.refField = "id"
	}
	for k, v := range c.Headers {
		t.headers.Set(k, v.Reveal())
	}
	for code, cls := range c.Classify {
		n, err := strconv.Atoi(code)
		if err != nil {
			return nil, fmt.Errorf("target %s: classify %q: not a status code", name, code)
		}
		t.classify[n] = outcome.Class(cls)
	}
	return t, nil
}

// Request is one call.
type Request struct {
	Event     event.Envelope
	Attempt   int
	Reference string // provider's job id, for poll URLs
	// Replay is how many times operators replayed the event
	// (state.Record.Replays): a provider that echoes it in its webhooks
	// lets a call made before a replay be told apart.
	Replay int
}

// Response is a target's answer to a call that reached it.
type Response struct {
	Status    int
	Body      []byte
	Reference string // the reference field of a JSON answer, if any
	// Unclear says why Reference was not read from a JSON object answer
	// that reads two ways (a member given twice, a lone surrogate
	// escape): which of its values the provider meant cannot be told.
	Unclear error
}

func vars(r Request) config.URLVars {
	return config.URLVars{ID: r.Event.ID, Account: r.Event.Account, Kind: r.Event.Kind,
		EntityID: r.Event.EntityID, Reference: r.Reference, Replay: strconv.Itoa(r.Replay)}
}

// URL renders the target URL for r. The template escapes every value for
// where it lands (config.URLTemplate), so an entity id or a reference such
// as "../admin" or "x&y=1" cannot change the path or query of a call that
// carries credentials.
func (t *Target) URL(r Request) (string, error) {
	return t.url.Render(vars(r))
}

// IdempotencyKey is the Idempotency-Key header of r's calls: the event id,
// unique across accounts, so that a provider that replays the answer to a
// repeated key never hands one account another's; or, for a target with
// idempotency_key: caller, the key the submitter chose.
func (t *Target) IdempotencyKey(r Request) string {
	if t.callerKey {
		return r.Event.IdempotencyKey
	}
	return r.Event.ID
}

// sameHostRedirect is the same_host redirect policy: follow an https
// redirect to the host and port of the first request, at most
// maxRedirects of them; any other redirect is the call's answer.
func sameHostRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= maxRedirects || req.URL.Scheme != "https" || !strings.EqualFold(hostPort(req.URL), hostPort(via[0].URL)) {
		return http.ErrUseLastResponse
	}
	return nil
}

// hostPort is u's host and port, the scheme's default port when none is given.
func hostPort(u *url.URL) string {
	port := u.Port()
	switch {
	case port != "":
	case u.Scheme == "https":
		port = "443"
	default:
		port = "80"
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// Classify applies the target's rules to a status: overrides first, then
// 2xx success; 408, 429 and 5xx except 501 transient; other statuses permanent.
func (t *Target) Classify(status int) outcome.Class {
	if c, ok := t.classify[status]; ok {
		return c
	}
	switch {
	case status >= 200 && status < 300:
		return outcome.ClassSuccess
	case status == 408 || status == 429 || (status >= 500 && status != 501):
		return outcome.ClassTransient
	}
	return outcome.ClassPermanent
}

// ErrNotSent is in the error of a call or poll whose request could not
// be made (its URL, the request itself): the provider was not asked, so
// what it counts against the target's limits goes back.
var ErrNotSent = errors.New("the request was not sent")

// notSent marks err as ErrNotSent, keeping its message.
type notSent struct{ error }

func (e notSent) Unwrap() error      { return e.error }
func (notSent) Is(target error) bool { return target == ErrNotSent }

// Call sends the event and returns the answer and its outcome: nil on
// success, outcome.Permanent(...) for a permanent rejection, a
// RetryAfterError when the target asked for a pause, else a transient error.
func (t *Target) Call(ctx context.Context, r Request) (Response, error) {
	u, err := t.URL(r)
	if err != nil {
		return Response{}, outcome.Permanent(notSent{fmt.Errorf("target %s: url: %w", t.Name, err)})
	}
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	body := []byte(r.Event.Payload)
	req, err := http.NewRequestWithContext(ctx, t.method, u, bytes.NewReader(body))
	if err != nil {
		return Response{}, outcome.Permanent(notSent{fmt.Errorf("target %s: request: %w", t.Name, RedactURL(err, u))})
	}
	for k, v := range t.headers {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(names.HeaderIdempotencyKey, t.IdempotencyKey(r))
	req.Header.Set(names.HeaderEventID, r.Event.ID)
	req.Header.Set(names.HeaderAttempt, strconv.Itoa(r.Attempt))
	req.Header.Set(names.HeaderReplay, strconv.Itoa(r.Replay))
	tracing.Inject(ctx, req.Header, r.Event.Traceparent)
	if t.signing != "" {
		for k, v := range webhook.Headers(t.signing, r.Event.ID, time.Now(), body) {
			req.Header[k] = v
		}
	}
	resp, err := t.client.Do(req)
	if err != nil {
		err = RedactURL(err, u)
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return Response{}, fmt.Errorf("%w after %s: %w", outcome.ErrTimeout, t.timeout, err)
		}
		return Response{}, fmt.Errorf("target %s: %w", t.Name, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponse))
	if err != nil {
		err = RedactURL(err, u)
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return Response{}, fmt.Errorf("%w reading the answer: %w", outcome.ErrTimeout, err)
		}
		return Response{}, fmt.Errorf("target %s: reading answer: %w", t.Name, err)
	}
	out := Response{Status: resp.StatusCode, Body: b}
	switch t.Classify(resp.StatusCode) {
	case outcome.ClassSuccess:
		out.Reference, out.Unclear = answerField(b, t.refField)
		return out, nil
	case outcome.ClassPermanent:
		return out, outcome.Permanent(t.httpError(resp.StatusCode, b))
	}
	herr := t.httpError(resp.StatusCode, b)
	if d, ok := outcome.ParseRetryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
		return out, outcome.RetryAfter(d, herr)
	}
	return out, herr
}

// httpError is the error of an answer that is not a success: its status
// and an excerpt of its body, or, for a redirect that was not followed,
// why not (the body of a redirect names where it points).
func (t *Target) httpError(status int, body []byte) *outcome.HTTPError {
	if status < 300 || status > 399 {
		return &outcome.HTTPError{Status: status, Body: excerpt(body)}
	}
	why := "redirect not followed (redirects: none)"
	if t.redirects == config.RedirectsSameHost {
		why = "redirect not followed: it leaves the call's host or https (redirects: same_host)"
	}
	return &outcome.HTTPError{Status: status, Body: why}
}

// RedactURL returns err, met building or sending a request to rawURL,
// fit for logs, last_error and the screen: net/http's *url.Error quotes
// the whole URL (query tokens and all) and the net errors under it quote
// the host name or the address dialled. The message keeps what failed;
// errors.Is still finds the cause (context.Canceled, a timeout).
func RedactURL(err error, rawURL string) error {
	if ue, ok := errors.AsType[*url.Error](err); ok {
		err = ue.Err
	}
	return &scrubbedError{msg: describe(err, rawURL), err: err}
}

// scrubbedError is an error with a message that names no URL or host.
type scrubbedError struct {
	msg string
	err error
}

func (e *scrubbedError) Error() string { return e.msg }
func (e *scrubbedError) Unwrap() error { return e.err }

// describe says what failed in err without the URL, host or address.
func describe(err error, rawURL string) string {
	if dns, ok := errors.AsType[*net.DNSError](err); ok {
		switch {
		case dns.IsNotFound:
			return "lookup of the target's host: no such host"
		case dns.IsTimeout:
			return "lookup of the target's host: timeout"
		}
		return "lookup of the target's host failed"
	}
	if _, ok := errors.AsType[x509.HostnameError](err); ok {
		return "tls: the certificate is not valid for the target's host"
	}
	if _, ok := errors.AsType[x509.UnknownAuthorityError](err); ok {
		return "tls: certificate signed by an unknown authority"
	}
	if ci, ok := errors.AsType[x509.CertificateInvalidError](err); ok {
		return "tls: invalid certificate: " + scrub(ci.Error(), rawURL)
	}
	if rh, ok := errors.AsType[tls.RecordHeaderError](err); ok {
		return "tls: " + rh.Msg
	}
	if op, ok := errors.AsType[*net.OpError](err); ok {
		// Error() would add the source and the address dialled.
		return op.Op + ": " + scrub(op.Err.Error(), rawURL)
	}
	return scrub(err.Error(), rawURL)
}

// scrub removes the URL and its host from a message that may quote them.
func scrub(msg, rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return strings.ReplaceAll(msg, rawURL, "<target url>")
	}
	for _, s := range []string{rawURL, u.Redacted(), u.Host, u.Hostname()} {
		if len(s) > 1 {
			msg = strings.ReplaceAll(msg, s, "<target>")
		}
	}
	return msg
}

// answerField is field of a JSON object answer as text (event.Scalar),
// "" for any other answer, and an error for an object that reads two
// ways (a member given twice, a lone surrogate escape): encoding/json
// would read its last value, and the provider may have meant the first.
func answerField(b []byte, field string) (string, error) {
	obj, err := event.DecodeObject(b)
	if err != nil {
		return "", nil
	}
	if err := event.ReadsTwoWays("answer", b); err != nil {
		return "", err
	}
	return event.Scalar(obj[field]), nil
}

func excerpt(b []byte) string {
	const max = 1024
	s := strings.ToValidUTF8(string(b), "?")
	if len(s) > max {
		n := max
		for n > 0 && !utf8.RuneStart(s[n]) {
			n-- // do not cut a character in two
		}
		s = s[:n] + "…"
	}
	return strings.TrimSpace(s)
}

// PollAnswer is a poll's answer.
type PollAnswer struct {
	Status int
	Body   []byte
	Value  string // the done_when field's value ("" when absent)
	Done   bool   // Value is one of done_when.in: Body is the result
}

// PollNeedsReference reports whether the poll URL is built from the
// provider's reference, so that an answer without one cannot be polled.
func (t *Target) PollNeedsReference() bool {
	return t.pollURL != nil && t.pollURL.Needs("Reference")
}

// RefField is the JSON field of a 2xx answer read as the reference.
func (t *Target) RefField() string { return t.refField }

// Poll asks the target's poll URL (GET, with the target's headers) for
// r's result. A 2xx JSON answer is judged by done_when; any other answer
// is an error classified like a delivery's (transient or permanent).
func (t *Target) Poll(ctx context.Context, r Request) (PollAnswer, error) {
	if t.pollURL == nil {
		return PollAnswer{}, outcome.Permanent(notSent{fmt.Errorf("target %s has no poll url", t.Name)})
	}
	u, err := t.pollURL.Render(vars(r))
	if err != nil {
		return PollAnswer{}, outcome.Permanent(notSent{fmt.Errorf("target %s: poll url: %w", t.Name, err)})
	}
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return PollAnswer{}, outcome.Permanent(notSent{fmt.Errorf("target %s: poll request: %w", t.Name, RedactURL(err, u))})
	}
	for k, v := range t.headers {
		req.Header[k] = v
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set(names.HeaderEventID, r.Event.ID)
	tracing.Inject(ctx, req.Header, r.Event.Traceparent)
	resp, err := t.client.Do(req)
	if err != nil {
		err = RedactURL(err, u)
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return PollAnswer{}, fmt.Errorf("%w after %s: %w", outcome.ErrTimeout, t.timeout, err)
		}
		return PollAnswer{}, fmt.Errorf("target %s: poll: %w", t.Name, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponse+1))
	if err != nil {
		return PollAnswer{}, fmt.Errorf("target %s: reading poll answer: %w", t.Name, RedactURL(err, u))
	}
	cut := len(body) > MaxResponse
	body = body[:min(len(body), MaxResponse)]
	a := PollAnswer{Status: resp.StatusCode, Body: body}
	switch t.Classify(resp.StatusCode) {
	case outcome.ClassSuccess:
		if cut {
			// Its field may be past the cut: read as "not final", a
			// final answer would be polled again until the deadline.
			return a, outcome.Permanent(fmt.Errorf("target %s: poll answer over %d bytes: whether the job is done cannot be told", t.Name, MaxResponse))
		}
	case outcome.ClassPermanent:
		return a, outcome.Permanent(t.httpError(resp.StatusCode, body))
	default:
		herr := t.httpError(resp.StatusCode, body)
		if d, ok := outcome.ParseRetryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
			return a, outcome.RetryAfter(d, herr) // the next poll waits at least this long
		}
		return a, herr
	}
	if a.Value, err = answerField(body, t.doneWhen.Field); err != nil {
		// Whether the job is done cannot be told: a person decides.
		return a, outcome.Permanent(fmt.Errorf("target %s: poll %w", t.Name, err))
	}
	a.Done = a.Value != "" && slices.Contains(t.doneWhen.In, a.Value)
	return a, nil
}

// DoneField is the poll answer's field that done_when looks at.
func (t *Target) DoneField() string { return t.doneWhen.Field }

// Cache holds the Targets built from the config on first use: one per
// target as every account without an override of its own calls it, and one
// per account and target for an account that overrides its URL or headers.
// Keyed by account alone, it would hold a Target (and its parsed URL
// templates) for every account ever served. Safe for concurrent use.
type Cache struct {
	cfg    *config.Config
	client *http.Client
	mu     sync.Mutex
	m      map[string]*Target
}

// NewCache returns an empty cache over cfg; client as for New.
func NewCache(cfg *config.Config, client *http.Client) *Cache {
	return &Cache{cfg: cfg, client: client, m: map[string]*Target{}}
}

// Reset makes the cache build its targets from cfg from now on (a
// reloaded config): every target is built again on its next Get, with
// cfg's URLs, headers and secrets. A call already holding a Target ends
// with the one it has.
func (c *Cache) Reset(cfg *config.Config) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cfg = cfg
	c.m = map[string]*Target{}
}

// Get returns the account's view of the named target, or an error when no
// such target is configured.
func (c *Cache) Get(account, name string) (*Target, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, own := c.cfg.Accounts[account].Targets[name]; !own {
		account = config.DefaultAccountName // it calls the target as "*" does
	}
	key := account + "\x00" + name
	if t, ok := c.m[key]; ok {
		return t, nil
	}
	if _, ok := c.cfg.Target(name); !ok {
		return nil, fmt.Errorf("unknown target %q", name)
	}
	t, err := New(name, c.cfg.TargetFor(account, name), c.client)
	if err != nil {
		return nil, err
	}
	c.m[key] = t
	return t, nil
}
