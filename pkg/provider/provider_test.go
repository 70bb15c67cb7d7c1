package provider_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/webhook"
)

func TestFaultMix(t *testing.T) {
	t.Parallel()
	const n = 1000
	const tolerance = 0.05
	tests := []struct {
		name   string
		faults provider.Faults
		want   map[int]float64 // status → expected fraction
	}{
		{"healthy", provider.Faults{}, map[int]float64{200: 1}},
		{"errors", provider.Faults{ErrorRate: 0.3}, map[int]float64{503: 0.3, 200: 0.7}},
		{"rate limit", provider.Faults{RateLimitRate: 0.25}, map[int]float64{429: 0.25, 200: 0.75}},
		{"timeouts", provider.Faults{TimeoutRate: 0.2, Hang: time.Millisecond}, map[int]float64{504: 0.2, 200: 0.8}},
		{"lost replies", provider.Faults{LostReplyRate: 0.2, Hang: time.Millisecond}, map[int]float64{504: 0.2, 200: 0.8}},
		{"mixed", provider.Faults{ErrorRate: 0.1, TimeoutRate: 0.1, RateLimitRate: 0.1, Hang: time.Millisecond},
			map[int]float64{503: 0.1, 504: 0.1, 429: 0.1, 200: 0.7}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, srv := setup(t, tt.faults, provider.WithSeed(42))
			got := map[int]int{}
			for i := range n {
				r := deliver(t, srv, keyN(i), `{"order_id":1}`)
				got[r.status]++
				if r.status == 429 && r.header.Get("Retry-After") != "1" {
					t.Errorf("429: want Retry-After 1, got %q", r.header.Get("Retry-After"))
				}
			}
			for status := range got {
				if _, ok := tt.want[status]; !ok {
					t.Errorf("want only statuses %v, got %d %d times", tt.want, status, got[status])
				}
			}
			for status, frac := range tt.want {
				if f := float64(got[status]) / n; math.Abs(f-frac) > tolerance {
					t.Errorf("status %d: want fraction %.2f±%.2f, got %.3f (%v)", status, frac, tolerance, f, got)
				}
			}
			// Every success, and every lost reply, applied its effect.
			wantApplied := got[200]
			if tt.faults.LostReplyRate > 0 {
				wantApplied = n
			}
			if a := p.Applied(); a != wantApplied {
				t.Errorf("want %d keys applied, got %d", wantApplied, a)
			}
			if c := p.CallCount(); c != n {
				t.Errorf("want %d calls recorded, got %d", n, c)
			}
		})
	}
}

func TestSeedIsDeterministic(t *testing.T) {
	t.Parallel()
	statuses := func(seed uint64) []int {
		p := provider.New(provider.Faults{ErrorRate: 0.2, RateLimitRate: 0.2}, provider.WithSeed(seed))
		defer p.Close()
		var out []int
		for i := range 200 {
			req := httptest.NewRequest(http.MethodPost, "/x", strings.NewReader(`{}`))
			req.Header.Set("Idempotency-Key", keyN(i))
			rec := httptest.NewRecorder()
			p.ServeHTTP(rec, req)
			out = append(out, rec.Code)
		}
		return out
	}
	a, b, c := statuses(7), statuses(7), statuses(8)
	if !slices.Equal(a, b) {
		t.Errorf("want the same statuses for the same seed, got\n%v\n%v", a, b)
	}
	if slices.Equal(a, c) {
		t.Errorf("want different statuses for seeds 7 and 8, got the same %v", a)
	}
}

func TestFailFirst(t *testing.T) {
	t.Parallel()
	p, srv := setup(t, provider.Faults{FailFirst: 2})
	for _, key := range []string{"a", "b"} {
		var got []int
		for range 4 {
			got = append(got, deliver(t, srv, key, `{}`).status)
		}
		if want := []int{503, 503, 200, 200}; !slices.Equal(got, want) {
			t.Errorf("key %s: want statuses %v, got %v", key, want, got)
		}
	}
	if n := len(p.CallsFor("a")); n != 4 {
		t.Errorf("want 4 calls for key a, got %d", n)
	}
}

func TestRejectField(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		field  string
		body   string
		status int
	}{
		{"default field true", "", `{"reject":true}`, 422},
		{"default field false", "", `{"reject":false}`, 200},
		{"string true is not true", "", `{"reject":"true"}`, 200},
		{"absent", "", `{"total":1}`, 200},
		{"custom field", "bad", `{"bad":true,"reject":true}`, 422},
		{"custom field leaves default", "bad", `{"reject":true}`, 200},
		{"rule off", "-", `{"reject":true}`, 200},
		{"not an object", "", `[1,2]`, 200},
		{"empty body", "", ``, 200},
		{"not JSON", "", `{"reject":`, 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, srv := setup(t, provider.Faults{RejectField: tt.field})
			r := deliver(t, srv, "k", tt.body)
			if r.status != tt.status {
				t.Fatalf("body %s: want %d, got %d %s", tt.body, tt.status, r.status, r.body)
			}
			if tt.status == 422 && !strings.Contains(string(r.body), `"error":"rejected by rule"`) {
				t.Errorf(`want body {"error":"rejected by rule"}, got %s`, r.body)
			}
			if wantEffects := map[bool]int{true: 1, false: 0}[tt.status == 200]; p.Effects("k") != wantEffects {
				t.Errorf("want %d effects, got %d", wantEffects, p.Effects("k"))
			}
		})
	}
}

func TestDownAndForcedStatus(t *testing.T) {
	t.Parallel()
	p, srv := setup(t, provider.Faults{Down: true})
	if r := deliver(t, srv, "k", `{}`); r.status != 503 {
		t.Errorf("down: want 503, got %d", r.status)
	}
	p.SetDown(false)
	if r := deliver(t, srv, "k", `{}`); r.status != 200 {
		t.Errorf("after SetDown(false): want 200, got %d", r.status)
	}
	p.SetFaults(provider.Faults{Status: 501})
	if r := deliver(t, srv, "k", `{}`); r.status != 501 {
		t.Errorf("Status 501: want 501, got %d", r.status)
	}
	p.SetFaults(provider.Faults{Status: 201})
	if r := deliver(t, srv, "k", `{}`); r.status != 201 {
		t.Errorf("Status 201: want 201, got %d", r.status)
	}
	if e := p.Effects("k"); e != 2 {
		t.Errorf("want 2 effects (the 200 and the 201), got %d", e)
	}
	if f := p.Faults(); f.Status != 201 {
		t.Errorf("Faults(): want the faults last set (Status 201), got %+v", f)
	}
}

// clock is a settable time for outage windows.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

func TestOutageWindows(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	clk := &clock{t: t0}
	_, srv := setup(t, provider.Faults{},
		provider.WithClock(clk.now),
		provider.WithOutage(t0.Add(10*time.Second), t0.Add(20*time.Second)),
		provider.WithOutage(t0.Add(time.Minute), t0.Add(2*time.Minute)))
	steps := []struct {
		at   time.Duration
		want int
	}{
		{0, 200}, {10 * time.Second, 503}, {19 * time.Second, 503}, {20 * time.Second, 200},
		{time.Minute, 503}, {90 * time.Second, 503}, {2 * time.Minute, 200},
	}
	for _, s := range steps {
		clk.set(t0.Add(s.at))
		if r := deliver(t, srv, "k"+s.at.String(), `{}`); r.status != s.want {
			t.Errorf("at t0+%s: want %d, got %d", s.at, s.want, r.status)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		d    time.Duration
		want string
	}{{0, "1"}, {300 * time.Millisecond, "1"}, {time.Second, "1"}, {2500 * time.Millisecond, "3"}, {10 * time.Second, "10"}} {
		_, srv := setup(t, provider.Faults{RateLimitRate: 1, RetryAfter: tt.d})
		r := deliver(t, srv, "k", `{}`)
		if r.status != 429 || r.header.Get("Retry-After") != tt.want {
			t.Errorf("RetryAfter %s: want 429 with Retry-After %s, got %d with %q", tt.d, tt.want, r.status, r.header.Get("Retry-After"))
		}
	}
}

func TestHangEndsWhenClientGivesUp(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		faults provider.Faults
	}{
		{"timeout", provider.Faults{TimeoutRate: 1, Hang: time.Hour}},
		{"latency", provider.Faults{Latency: time.Hour}},
		{"lost reply", provider.Faults{LostReplyRate: 1, Hang: time.Hour}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, srv := setup(t, tt.faults)
			c := *srv.Client()
			c.Timeout = 100 * time.Millisecond
			if r, err := send(t, &c, http.MethodPost, srv.URL+"/x", `{}`, "Idempotency-Key", "k"); err == nil {
				t.Fatalf("want a client timeout, got %d %s", r.status, r.body)
			}
			// The handler returns (and records the call) once the client left.
			if err := p.WaitCalls(waitCtx(t), 1); err != nil {
				t.Fatalf("want the hanging handler to return after the client timeout: %v", err)
			}
			call := p.Calls()[0]
			if call.Status != provider.StatusClientClosed {
				t.Errorf("want the call recorded as %d, got %d", provider.StatusClientClosed, call.Status)
			}
			wantApplied := tt.faults.LostReplyRate > 0
			if call.Applied != wantApplied || p.Effects("k") != map[bool]int{true: 1}[wantApplied] {
				t.Errorf("want applied=%v, got applied=%v effects=%d", wantApplied, call.Applied, p.Effects("k"))
			}
		})
	}
}

func TestCloseCutsHangsShort(t *testing.T) {
	t.Parallel()
	p, srv := setup(t, provider.Faults{TimeoutRate: 1, Hang: time.Hour, Latency: time.Hour})
	_ = p.Close()
	if r := deliver(t, srv, "k", `{}`); r.status != 504 {
		t.Errorf("closed provider: want a hang answered 504 at once, got %d", r.status)
	}
}

func TestEffectsPlainProvider(t *testing.T) {
	t.Parallel()
	p, srv := setup(t, provider.Faults{})
	refs := map[string]bool{}
	for range 3 {
		r := deliver(t, srv, "k", `{"total":1}`)
		if r.status != 200 || r.header.Get(provider.HeaderReplayed) != "" {
			t.Fatalf("want 200 without %s, got %d %v", provider.HeaderReplayed, r.status, r.header)
		}
		refs[reference(t, r)] = true
	}
	if len(refs) != 3 {
		t.Errorf("want a new reference per applied call, got %v", refs)
	}
	if e := p.Effects("k"); e != 3 {
		t.Errorf("plain provider: want 3 effects for 3 successes, got %d", e)
	}
	if d := p.DuplicateEffects(); d["k"] != 3 || len(d) != 1 {
		t.Errorf("want DuplicateEffects {k:3}, got %v", d)
	}
	if a := p.Applied(); a != 1 {
		t.Errorf("want 1 key applied, got %d", a)
	}
}

func TestEffectsIdempotentProvider(t *testing.T) {
	t.Parallel()
	p, srv := setup(t, provider.Faults{}, provider.WithIdempotent())
	first := deliver(t, srv, "k", `{"total":1}`)
	if first.status != 200 || first.header.Get(provider.HeaderReplayed) != "" {
		t.Fatalf("first call: want 200, not replayed, got %d %v", first.status, first.header)
	}
	for range 2 {
		r := deliver(t, srv, "k", `{"total":1}`)
		if r.status != 200 || r.header.Get(provider.HeaderReplayed) != "true" || string(r.body) != string(first.body) {
			t.Errorf("repeat: want 200 %s with %s: true, got %d %s %v", first.body, provider.HeaderReplayed, r.status, r.body, r.header)
		}
	}
	if e := p.Effects("k"); e != 1 {
		t.Errorf("idempotent provider: want 1 effect, got %d", e)
	}
	if d := p.DuplicateEffects(); len(d) != 0 {
		t.Errorf("want no duplicate effects, got %v", d)
	}
	calls := p.CallsFor("k")
	if len(calls) != 3 || !calls[0].Applied || calls[1].Applied || !calls[1].Replayed || calls[2].Applied {
		t.Errorf("want 3 calls, only the first applied, got %+v", calls)
	}
}

func TestCallRecord(t *testing.T) {
	t.Parallel()
	p, srv := setup(t, provider.Faults{})
	// No Idempotency-Key: Tenaz-Event-Id is the key.
	r, err := send(t, srv.Client(), http.MethodPut, srv.URL+"/api/order.create", `{"a":1}`,
		"Tenaz-Event-Id", "evt-1", "Tenaz-Attempt", "3", "X-App-Key", "s")
	if err != nil || r.status != 200 {
		t.Fatalf("want 200, got %d %v", r.status, err)
	}
	calls := p.Calls()
	if len(calls) != 1 {
		t.Fatalf("want 1 call, got %d", len(calls))
	}
	c := calls[0]
	if c.Method != "PUT" || c.Path != "/api/order.create" || c.IdempotencyKey != "evt-1" || c.EventID != "evt-1" ||
		c.Attempt != 3 || c.Status != 200 || string(c.Body) != `{"a":1}` || c.Header.Get("X-App-Key") != "s" ||
		!c.Applied || c.Reference != reference(t, r) || c.At.IsZero() {
		t.Errorf("want PUT /api/order.create key evt-1 attempt 3 status 200 applied with its body and headers, got %+v", c)
	}
	if p.Effects("evt-1") != 1 {
		t.Errorf("want the effect counted under the event id, got %d", p.Effects("evt-1"))
	}
}

func TestSignatureRequired(t *testing.T) {
	t.Parallel()
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	p, srv := setup(t, provider.Faults{FailFirst: 1}, provider.WithSignatureSecret(secret))
	if r := deliver(t, srv, "k", `{}`); r.status != 401 {
		t.Errorf("unsigned: want 401, got %d", r.status)
	}
	body := `{"total":1}`
	h := webhook.Headers(secret, "msg_1", time.Now(), []byte(body))
	signed := func() int {
		r, err := send(t, srv.Client(), http.MethodPost, srv.URL+"/x", body, "Idempotency-Key", "k",
			"webhook-id", h.Get("webhook-id"), "webhook-timestamp", h.Get("webhook-timestamp"), "webhook-signature", h.Get("webhook-signature"))
		if err != nil {
			t.Fatal(err)
		}
		return r.status
	}
	// The 401 did not count towards FailFirst.
	if got := []int{signed(), signed()}; !slices.Equal(got, []int{503, 200}) {
		t.Errorf("signed: want [503 200], got %v", got)
	}
	if p.Effects("k") != 1 {
		t.Errorf("want 1 effect, got %d", p.Effects("k"))
	}
}

func TestWaitCalls(t *testing.T) {
	t.Parallel()
	p, srv := setup(t, provider.Faults{})
	done := make(chan error, 1)
	go func() { done <- p.WaitCalls(waitCtx(t), 3) }()
	for i := range 3 {
		deliver(t, srv, keyN(i), `{}`)
	}
	if err := <-done; err != nil {
		t.Errorf("want WaitCalls(3) to return after 3 calls, got %v", err)
	}
	if err := p.WaitApplied(waitCtx(t), 3); err != nil {
		t.Errorf("want WaitApplied(3) to return at once, got %v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	err := p.WaitCalls(ctx, 4)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "got 3") {
		t.Errorf("want a deadline error naming the 3 calls seen, got %v", err)
	}
}

func TestResetAndMaxCalls(t *testing.T) {
	t.Parallel()
	p, srv := setup(t, provider.Faults{FailFirst: 1}, provider.WithMaxCalls(3))
	for i := range 10 {
		deliver(t, srv, keyN(i), `{}`)
	}
	calls := p.Calls()
	if p.CallCount() != 10 || len(calls) != 3 || calls[2].IdempotencyKey != "k9" {
		t.Errorf("WithMaxCalls(3): want count 10 and the last 3 calls kept, got count %d and %d calls", p.CallCount(), len(calls))
	}
	p.Reset()
	if p.CallCount() != 0 || len(p.Calls()) != 0 || p.Applied() != 0 {
		t.Errorf("after Reset: want nothing recorded, got %d calls, %d applied", p.CallCount(), p.Applied())
	}
	// FailFirst counts again from zero; faults are kept.
	if r := deliver(t, srv, "k1", `{}`); r.status != 503 {
		t.Errorf("after Reset: want FailFirst to apply again (503), got %d", r.status)
	}
}

func TestSuccessBody(t *testing.T) {
	t.Parallel()
	_, srv := setup(t, provider.Faults{})
	r := deliver(t, srv, "order-9", `{}`)
	var v map[string]string
	if err := json.Unmarshal(r.body, &v); err != nil || !strings.HasPrefix(v["id"], provider.RefPrefix) ||
		v["status"] != "accepted" || v["key"] != "order-9" || r.header.Get("Content-Type") != "application/json" {
		t.Errorf(`want application/json {"id":"ref_…","status":"accepted","key":"order-9"}, got %s %v (%v)`, r.body, r.header, err)
	}
}

func BenchmarkServeHTTP(b *testing.B) {
	p := provider.New(provider.Faults{ErrorRate: 0.1, RateLimitRate: 0.05}, provider.WithSeed(1), provider.WithMaxCalls(1000))
	defer p.Close()
	body := `{"order_id":"o-1","total":1990}`
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(body))
			req.Header.Set("Idempotency-Key", keyN(i))
			p.ServeHTTP(httptest.NewRecorder(), req)
		}
	})
}

// MostInFlight counts the calls that overlapped: three sent at once
// against a 200 ms latency were three in flight; sent one after another,
// one.
func TestMostInFlight(t *testing.T) {
	t.Parallel()
	p, srv := setup(t, provider.Faults{Latency: 200 * time.Millisecond})
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() {
			if _, err := send(t, srv.Client(), http.MethodPost, srv.URL+"/orders", `{}`, "Idempotency-Key", keyN(i)); err != nil {
				t.Errorf("call %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	if n := provider.MostInFlight(p.Calls()); n != 3 {
		t.Fatalf("want 3 calls sent at once counted in flight together, got %d", n)
	}
	for i := range 2 {
		deliver(t, srv, keyN(10+i), `{}`)
	}
	if n := provider.MostInFlight(p.Calls()[3:]); n != 1 {
		t.Fatalf("want calls sent one after another counted one at a time, got %d", n)
	}
}
