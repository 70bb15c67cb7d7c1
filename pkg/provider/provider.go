package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/webhook"
)

// Defaults applied to zero-valued Faults fields.
const (
	DefaultHang        = 30 * time.Second
	DefaultRetryAfter  = time.Second
	DefaultRejectField = "reject"
	// DefaultTolerance is the clock skew a WithSignatureSecret provider
	// accepts on the webhook-timestamp of a delivery.
	DefaultTolerance = 5 * time.Minute
)

// StatusClientClosed is recorded as Call.Status when the client went away
// (its timeout or cancellation) before the provider answered. Nothing was
// written to the connection. The value is nginx's "client closed request".
const StatusClientClosed = 499

// HeaderReplayed is set to "true" on a response an idempotent provider
// replays for an already applied key.
const HeaderReplayed = "Idempotent-Replayed"

// DecisionField is the payload field that, when a string, becomes the final
// status reported by polls and callbacks (e.g. "rejected"). Defaults to
// "approved" when absent.
const DecisionField = "decision"

// RefPrefix starts every reference the provider hands out ("ref_1"). A GET
// whose last path segment starts with it is a poll.
const RefPrefix = "ref_"

// maxBody bounds a delivery body; a larger one is answered 413.
const maxBody = 8 << 20

// Faults says how the provider misbehaves. The zero value is a healthy
// provider. Faults are checked in this order, the first that applies
// decides the answer:
//
//  1. Down, or now inside a WithOutage window: 503.
//  2. A WithSignatureSecret provider and a missing or bad signature: 401.
//  3. Status non-zero: that status (a 2xx Status is a success).
//  4. FailFirst: the first FailFirst calls for a key: 503.
//  5. One random draw split over ErrorRate (503), TimeoutRate (hang, 504),
//     RateLimitRate (429) and LostReplyRate (apply, then hang, 504), in
//     that order; the rates are exclusive fractions whose sum should be <= 1.
//  6. A body that is not JSON: 400; RejectField true in the payload: 422.
//  7. Success: 200.
//
// Latency is added before the answer whatever it is.
type Faults struct {
	// ErrorRate is the fraction of calls answered 503 (transient).
	ErrorRate float64
	// TimeoutRate is the fraction of calls that hang for Hang before
	// answering 504; the client is expected to time out first.
	TimeoutRate float64
	// Hang is how long a hanging call waits before answering 504. It ends
	// early when the request context is cancelled (nothing is answered, the
	// call is recorded as StatusClientClosed) or the provider is closed (504
	// at once). Defaults to 30s.
	Hang time.Duration
	// RateLimitRate is the fraction of calls answered 429 with Retry-After.
	RateLimitRate float64
	// RetryAfter is sent in Retry-After as whole seconds, rounded up, at
	// least 1. Defaults to 1s.
	RetryAfter time.Duration
	// Latency is added to every call, deliveries and polls (context-aware).
	Latency time.Duration
	// Down is a full outage: every call, deliveries and polls, answers 503.
	Down bool
	// RejectField names a payload field that, when JSON true, gets the call
	// answered 422 {"error":"rejected by rule"}. Defaults to "reject"; "-"
	// turns the rule off.
	RejectField string
	// FailFirst answers the first FailFirst calls for each idempotency key
	// 503: a deterministic transient-then-success. Only calls that get past
	// Down, the signature check and Status count.
	FailFirst int
	// Status, if non-zero, is the answer to every call (e.g. 400, 501). A
	// 2xx Status is a success that applies the effect.
	Status int
	// LostReplyRate is the fraction of calls that apply the effect and then
	// hang like TimeoutRate: the provider did the work but the client never
	// hears so. Only WithIdempotent providers survive the retry unharmed.
	LostReplyRate float64
	// PollAfter is the number of polls of a reference answered
	// "processing" before the final status. Defaults to 0 (final at once).
	PollAfter int
	// PollRetryAfter, if set, is sent in Retry-After (whole seconds,
	// rounded up) with the 503 of a poll while the provider is down.
	PollRetryAfter time.Duration
}

func (f Faults) withDefaults() Faults {
	if f.Hang <= 0 {
		f.Hang = DefaultHang
	}
	if f.RetryAfter <= 0 {
		f.RetryAfter = DefaultRetryAfter
	}
	if f.RejectField == "" {
		f.RejectField = DefaultRejectField
	}
	return f
}

// retryAfterSeconds is RetryAfter in whole seconds, rounded up, min 1.
func (f Faults) retryAfterSeconds() int {
	s := int((f.RetryAfter + time.Second - 1) / time.Second)
	return max(s, 1)
}

// DemoFaults is the mix the built-in demo of tenaz run uses: a provider
// that fails now and then like a real one, but whose events all end
// within seconds of retries.
func DemoFaults() Faults {
	return Faults{
		ErrorRate:     0.10,
		TimeoutRate:   0.02,
		RateLimitRate: 0.05,
		RetryAfter:    time.Second,
		Hang:          15 * time.Second,
		Latency:       20 * time.Millisecond,
		PollAfter:     2,
	}
}

// Call is one delivery the provider received, recorded when it was
// answered (or abandoned by the client).
type Call struct {
	At             time.Time // when the call arrived
	Answered       time.Time // when it was answered (or the client left)
	Method         string
	Path           string
	IdempotencyKey string // Idempotency-Key, or Tenaz-Event-Id when absent
	EventID        string // Tenaz-Event-Id
	Attempt        int    // Tenaz-Attempt; 0 when absent or not a number
	Status         int    // status answered; StatusClientClosed if the client left first
	Body           []byte
	Header         http.Header
	Applied        bool   // this call applied the side effect
	Replayed       bool   // an idempotent provider replayed a stored answer
	Reference      string // the provider reference of a 2xx answer
}

// MostInFlight is the most of calls that were in flight at once: the
// concurrency a caller held against the provider.
func MostInFlight(calls []Call) int {
	most := 0
	for _, c := range calls {
		n := 0
		for _, o := range calls {
			if !o.At.After(c.At) && o.Answered.After(c.At) {
				n++
			}
		}
		most = max(most, n)
	}
	return most
}

// CallbackRecord is one callback the provider sent or dropped.
type CallbackRecord struct {
	At        time.Time // when it was sent (or dropped)
	EventID   string
	Reference string
	WebhookID string
	Body      []byte
	Status    int    // the receiver's answer; 0 if none
	Err       string // transport error, if any
	Dropped   bool   // the fault dropped it; nothing was sent
	Duplicate bool   // the second copy of a duplicated callback
}

// Option configures a Provider at New.
type Option func(*Provider)

// WithSeed makes the fault choice deterministic: the same seed and the same
// sequence of calls give the same answers.
func WithSeed(seed uint64) Option {
	return func(p *Provider) { p.seed = seed }
}

// WithOutage adds a scheduled outage: the provider behaves as Down for
// from <= now < to. It may be given many times.
func WithOutage(from, to time.Time) Option {
	return func(p *Provider) { p.outages = append(p.outages, window{from, to}) }
}

// WithIdempotent makes the provider honour Idempotency-Key like Stripe: a
// second success for an already applied key replays the stored answer with
// Idempotent-Replayed: true and does not apply the effect again.
func WithIdempotent() Option {
	return func(p *Provider) { p.idempotent = true }
}

// WithPollAfter sets Faults.PollAfter: polls answered "processing" before
// the final status.
func WithPollAfter(n int) Option {
	return func(p *Provider) { p.faults.PollAfter = n }
}

// WithClock replaces time.Now for outage windows, timestamps and
// signatures; tests use it to step through outages.
func WithClock(now func() time.Time) Option {
	return func(p *Provider) { p.now = now }
}

// WithSignatureSecret makes the provider verify the Standard Webhooks
// signature of every delivery with secret ("whsec_<base64>" or raw) and a
// DefaultTolerance clock skew; an unsigned or badly signed call is answered
// 401 and does not count towards FailFirst.
func WithSignatureSecret(secret string) Option {
	return func(p *Provider) { p.verifySecret = secret }
}

// WithMaxCalls keeps only the most recent n calls in the log (Calls,
// CallsFor) so that a long-running demo does not grow without bound.
// CallCount and the effect counters stay exact. Defaults to 0 (keep all).
func WithMaxCalls(n int) Option {
	return func(p *Provider) { p.maxCalls = n }
}

type window struct{ from, to time.Time }

type stored struct {
	status int
	body   []byte
	ref    string
}

type refState struct {
	key      string
	eventID  string
	decision string
	polls    int
	final    bool // answered the decision once; never "processing" again
}

// Provider is a fake external API with injectable faults. It is an
// http.Handler; all methods are safe for concurrent use.
type Provider struct {
	// set at New, read-only after
	seed         uint64
	outages      []window
	idempotent   bool
	now          func() time.Time
	verifySecret string
	maxCalls     int
	cb           callbackConfig
	client       *http.Client
	transport    *http.Transport
	ctx          context.Context // cancelled by Close
	cancel       context.CancelFunc
	wg           sync.WaitGroup // callback goroutines

	mu        sync.Mutex
	changed   chan struct{} // closed and replaced on every change (broadcast)
	faults    Faults
	cbFaults  CallbackFaults
	rng       *rand.Rand
	cbRng     *rand.Rand
	closed    bool
	calls     []Call
	total     int            // calls received since New/Reset (the log may be trimmed)
	seen      map[string]int // calls per key, for FailFirst
	effects   map[string]int
	stored    map[string]stored
	refs      map[string]*refState
	refSeq    int
	pollCount int
	polled    []Call // every poll request
	callbacks []CallbackRecord
}

// New returns a provider misbehaving as f. Close it to stop pending
// callbacks.
func New(f Faults, opts ...Option) *Provider {
	p := &Provider{faults: f, now: time.Now, seed: rand.Uint64()}
	for _, o := range opts {
		o(p)
	}
	p.rng = rand.New(rand.NewPCG(p.seed, 0x9e3779b97f4a7c15))
	p.cbRng = rand.New(rand.NewPCG(p.seed, 0xbf58476d1ce4e5b9))
	p.transport = &http.Transport{MaxIdleConnsPerHost: 16, IdleConnTimeout: 30 * time.Second}
	p.client = &http.Client{Transport: p.transport, Timeout: 10 * time.Second}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.changed = make(chan struct{})
	p.resetLocked()
	return p
}

func (p *Provider) resetLocked() {
	p.calls = nil
	p.total = 0
	p.seen = map[string]int{}
	p.effects = map[string]int{}
	p.stored = map[string]stored{}
	p.refs = map[string]*refState{}
	p.pollCount = 0
	p.polled = nil
	p.callbacks = nil
}

// notifyLocked wakes every waiter; p.mu must be held.
func (p *Provider) notifyLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// Handler returns the provider as an http.Handler serving both endpoints
// (see the package documentation for routing).
func (p *Provider) Handler() http.Handler { return p }

// ServeHTTP routes a GET whose last path segment starts with RefPrefix to
// the polling endpoint and everything else to the delivery endpoint.
func (p *Provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		if ref := lastSegment(r.URL.Path); strings.HasPrefix(ref, RefPrefix) {
			p.servePoll(w, r, ref)
			return
		}
	}
	p.serveDelivery(w, r)
}

func lastSegment(path string) string {
	path = strings.TrimSuffix(path, "/")
	return path[strings.LastIndexByte(path, '/')+1:]
}

type outcome int

const (
	outSuccess   outcome = iota
	outError             // a plain error status
	outHang              // hang, then 504
	outLostReply         // apply, hang, then 504
)

type decision struct {
	kind     outcome
	status   int
	msg      string
	decision string // final status for polls and callbacks
	retry    int    // Retry-After seconds of a 429
}

func (p *Provider) serveDelivery(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	call := Call{
		At:             p.now(),
		Method:         r.Method,
		Path:           r.URL.Path,
		IdempotencyKey: r.Header.Get(names.HeaderIdempotencyKey),
		EventID:        r.Header.Get(names.HeaderEventID),
		Header:         r.Header.Clone(),
	}
	if call.IdempotencyKey == "" {
		call.IdempotencyKey = call.EventID
	}
	call.Attempt, _ = strconv.Atoi(r.Header.Get(names.HeaderAttempt))

	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	call.Body = body
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			p.answer(w, &call, http.StatusRequestEntityTooLarge, "body too large")
		} else {
			p.record(&call, StatusClientClosed)
		}
		return
	}

	p.mu.Lock()
	f := p.faults.withDefaults()
	d := p.decideLocked(f, &call, body)
	p.mu.Unlock()

	if !p.wait(ctx, f.Latency) {
		p.record(&call, StatusClientClosed)
		return
	}

	switch d.kind {
	case outError:
		if d.retry > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(d.retry))
		}
		p.answer(w, &call, d.status, d.msg)
	case outHang:
		p.hang(w, ctx, &call, f.Hang)
	case outLostReply:
		p.mu.Lock()
		p.applyLocked(&call, d.decision, 0)
		p.mu.Unlock()
		p.hang(w, ctx, &call, f.Hang)
	case outSuccess:
		p.mu.Lock()
		st := p.applyLocked(&call, d.decision, d.status)
		p.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if call.Replayed {
			w.Header().Set(HeaderReplayed, "true")
		}
		w.WriteHeader(st.status)
		_, _ = w.Write(st.body)
		p.record(&call, st.status)
	}
}

// decideLocked picks the answer of a delivery; p.mu must be held.
func (p *Provider) decideLocked(f Faults, c *Call, body []byte) decision {
	if f.Down || p.inOutageLocked() {
		return decision{kind: outError, status: http.StatusServiceUnavailable, msg: "service unavailable: down"}
	}
	if p.verifySecret != "" {
		if err := webhook.Verify(p.verifySecret, c.Header, body, DefaultTolerance, p.now()); err != nil {
			return decision{kind: outError, status: http.StatusUnauthorized, msg: err.Error()}
		}
	}
	var payload map[string]any
	validJSON := len(bytes.TrimSpace(body)) == 0 || json.Unmarshal(body, new(any)) == nil
	if validJSON {
		_ = json.Unmarshal(body, &payload) // nil unless an object
	}
	final := "approved"
	if s, ok := payload[DecisionField].(string); ok && s != "" {
		final = s
	}

	if f.Status != 0 {
		if f.Status >= 200 && f.Status < 300 {
			return decision{kind: outSuccess, status: f.Status, decision: final}
		}
		d := decision{kind: outError, status: f.Status, msg: "forced status: " + http.StatusText(f.Status)}
		if f.Status == http.StatusTooManyRequests {
			d.retry = f.retryAfterSeconds()
		}
		return d
	}
	p.seen[c.IdempotencyKey]++
	if n := p.seen[c.IdempotencyKey]; n <= f.FailFirst {
		return decision{kind: outError, status: http.StatusServiceUnavailable, msg: fmt.Sprintf("service unavailable: fail first %d (call %d)", f.FailFirst, n)}
	}
	if f.ErrorRate > 0 || f.TimeoutRate > 0 || f.RateLimitRate > 0 || f.LostReplyRate > 0 {
		u := p.rng.Float64()
		switch {
		case u < f.ErrorRate:
			return decision{kind: outError, status: http.StatusServiceUnavailable, msg: "service unavailable"}
		case u < f.ErrorRate+f.TimeoutRate:
			return decision{kind: outHang}
		case u < f.ErrorRate+f.TimeoutRate+f.RateLimitRate:
			return decision{kind: outError, status: http.StatusTooManyRequests, msg: "rate limited", retry: f.retryAfterSeconds()}
		case u < f.ErrorRate+f.TimeoutRate+f.RateLimitRate+f.LostReplyRate:
			return decision{kind: outLostReply, decision: final}
		}
	}
	if !validJSON {
		return decision{kind: outError, status: http.StatusBadRequest, msg: "body is not JSON"}
	}
	if f.RejectField != "-" {
		if v, ok := payload[f.RejectField].(bool); ok && v {
			return decision{kind: outError, status: http.StatusUnprocessableEntity, msg: "rejected by rule"}
		}
	}
	return decision{kind: outSuccess, decision: final}
}

func (p *Provider) inOutageLocked() bool {
	if len(p.outages) == 0 {
		return false
	}
	now := p.now()
	for _, o := range p.outages {
		if !now.Before(o.from) && now.Before(o.to) {
			return true
		}
	}
	return false
}

// applyLocked applies the effect of a successful call (or replays it for an
// idempotent provider) and returns the answer; p.mu must be held.
func (p *Provider) applyLocked(c *Call, final string, status int) stored {
	if p.idempotent {
		if st, ok := p.stored[c.IdempotencyKey]; ok {
			c.Replayed = true
			c.Reference = st.ref
			return st
		}
	}
	p.refSeq++
	ref := RefPrefix + strconv.Itoa(p.refSeq)
	eventID := c.EventID
	if eventID == "" {
		eventID = c.IdempotencyKey
	}
	p.refs[ref] = &refState{key: c.IdempotencyKey, eventID: eventID, decision: final}
	p.effects[c.IdempotencyKey]++
	c.Applied = true
	c.Reference = ref
	body, _ := json.Marshal(struct {
		ID     string `json:"id"`
		Status string `json:"status"`
		Key    string `json:"key"`
	}{ref, "accepted", c.IdempotencyKey})
	if status == 0 {
		status = http.StatusOK
	}
	st := stored{status: status, body: body, ref: ref}
	if p.idempotent {
		p.stored[c.IdempotencyKey] = st
	}
	p.scheduleCallbackLocked(eventID, ref, final)
	p.notifyLocked()
	return st
}

// hang waits d, then answers 504, unless the client or Close ends it first.
func (p *Provider) hang(w http.ResponseWriter, ctx context.Context, c *Call, d time.Duration) {
	if !p.wait(ctx, d) {
		p.record(c, StatusClientClosed)
		return
	}
	p.answer(w, c, http.StatusGatewayTimeout, "gateway timeout")
}

// wait sleeps d and reports true, or reports false as soon as ctx (the
// client) is done. A closed provider waits no more: it reports true at once.
func (p *Provider) wait(ctx context.Context, d time.Duration) bool {
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		case <-p.ctx.Done():
		}
	}
	return ctx.Err() == nil
}

// answer writes a JSON error and records the call.
func (p *Provider) answer(w http.ResponseWriter, c *Call, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
	p.record(c, status)
}

// record appends the answered call to the log and wakes waiters.
func (p *Provider) record(c *Call, status int) {
	c.Status = status
	c.Answered = p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.total++
	p.calls = append(p.calls, *c)
	if p.maxCalls > 0 && len(p.calls) >= 2*p.maxCalls {
		p.calls = append([]Call(nil), p.calls[len(p.calls)-p.maxCalls:]...)
	}
	p.notifyLocked()
}

// SetFaults replaces the faults at run time.
func (p *Provider) SetFaults(f Faults) {
	p.mu.Lock()
	p.faults = f
	p.mu.Unlock()
}

// Faults returns the current faults.
func (p *Provider) Faults() Faults {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.faults
}

// SetDown starts (true) or ends (false) a full outage.
func (p *Provider) SetDown(down bool) {
	p.mu.Lock()
	p.faults.Down = down
	p.mu.Unlock()
}

func (p *Provider) logLocked() []Call {
	if p.maxCalls > 0 && len(p.calls) > p.maxCalls {
		return p.calls[len(p.calls)-p.maxCalls:]
	}
	return p.calls
}

// Calls returns a copy of the calls received, in the order they were
// answered.
func (p *Provider) Calls() []Call {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Call(nil), p.logLocked()...)
}

// CallsFor returns the calls for one idempotency key, in order.
func (p *Provider) CallsFor(idempotencyKey string) []Call {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Call
	for _, c := range p.logLocked() {
		if c.IdempotencyKey == idempotencyKey {
			out = append(out, c)
		}
	}
	return out
}

// CallCount is the number of deliveries answered (polls excluded).
func (p *Provider) CallCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.total
}

// Effects is how many times the side effect was applied for the key: the
// number of its 2xx answers for a plain provider, at most 1 for a
// WithIdempotent one.
func (p *Provider) Effects(idempotencyKey string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.effects[idempotencyKey]
}

// Applied is the number of distinct keys whose effect was applied.
func (p *Provider) Applied() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.effects)
}

// DuplicateEffects returns the keys whose effect was applied more than
// once, with their count. Every test expects it empty.
func (p *Provider) DuplicateEffects() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]int{}
	for k, n := range p.effects {
		if n > 1 {
			out[k] = n
		}
	}
	return out
}

// WaitCalls blocks until CallCount() >= n or ctx is done.
func (p *Provider) WaitCalls(ctx context.Context, n int) error {
	return p.waitFor(ctx, func() (bool, string) {
		return p.total >= n, fmt.Sprintf("waiting for %d calls, got %d", n, p.total)
	})
}

// WaitApplied blocks until Applied() >= n or ctx is done.
func (p *Provider) WaitApplied(ctx context.Context, n int) error {
	return p.waitFor(ctx, func() (bool, string) {
		return len(p.effects) >= n, fmt.Sprintf("waiting for %d applied keys, got %d", n, len(p.effects))
	})
}

// waitFor blocks until cond, evaluated under p.mu at every change, holds.
func (p *Provider) waitFor(ctx context.Context, cond func() (bool, string)) error {
	for {
		p.mu.Lock()
		ok, what := cond()
		ch := p.changed
		p.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("provider: %s: %w", what, context.Cause(ctx))
		}
	}
}

// Reset forgets every call, effect, reference and callback record. Faults,
// options and pending callbacks are kept; references keep counting up so
// that none is handed out twice.
func (p *Provider) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.resetLocked()
	p.notifyLocked()
}

// Close stops pending callbacks, cuts hanging calls and latency short (they
// answer at once) and waits for the callback goroutines to return. The
// provider still answers calls after Close but sends no more callbacks.
// Close is idempotent.
func (p *Provider) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.cancel()
	p.wg.Wait()
	p.transport.CloseIdleConnections()
	return nil
}
