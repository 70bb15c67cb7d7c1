package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/services/ingest"
)

// chaosFaults is the providers' steady misbehaviour in the crash suite:
// 30 % 5xx, 10 % timeouts (a hang longer than the call timeout), a few
// 429s with Retry-After, a few lost replies (applied, then a timeout), and
// two "processing" answers before every poll's final one.
func chaosFaults() provider.Faults {
	return provider.Faults{
		ErrorRate: 0.30, TimeoutRate: 0.10, Hang: callTimeout + time.Second,
		RateLimitRate: 0.02, RetryAfter: 2 * time.Second, LostReplyRate: 0.02,
		Latency: 2 * time.Millisecond, PollAfter: 2,
	}
}

// burstFaults is a 429 burst: most answers are 429 with Retry-After.
func burstFaults() provider.Faults {
	f := chaosFaults()
	f.ErrorRate, f.TimeoutRate, f.RateLimitRate = 0.15, 0.05, 0.70
	return f
}

// soakFaults is the soak's mild misbehaviour: every event ends done.
func soakFaults() provider.Faults {
	return provider.Faults{ErrorRate: 0.05, RateLimitRate: 0.01, RetryAfter: time.Second, Latency: 2 * time.Millisecond, PollAfter: 1}
}

type window struct{ from, to time.Time }

func (w window) has(t time.Time) bool { return !t.Before(w.from) && t.Before(w.to) }

// callRec is one delivery (not a poll) that reached the providers.
type callRec struct {
	at      time.Time // when it arrived
	end     time.Time // when the provider was done with it (zero: not yet)
	gone    bool      // it ended because the caller went away (a client timeout, a killed dispatcher)
	account string
	target  string
	eventID string
	key     string
	down    bool   // answered 503 by the gate: the account was in its outage
	poll    bool   // a poll (GET of a reference), not a delivery
	sender  string // the calling process's lifetime (headerInstance)
}

// cbRec is one webhook sent to ingest's /v1/callbacks/{target} and what
// ingest answered.
type cbRec struct {
	at        time.Time
	source    string // "provider", "forged", "out_of_order", "conflicting", "replay"
	webhookID string
	eventID   string
	ref       string
	req       []byte // the webhook's body
	status    int    // 0: not answered (ingest down)
	outcome   string // the answer's outcome for a 200
	body      []byte // the answer
}

// acceptedRef is a bureau_a delivery answered 2xx: the provider holds a
// reference for the event and will call back.
type acceptedRef struct {
	eventID, ref string
}

// fleet is the providers of a run: one fake provider per target, shared
// by every account, behind a gate that routes /<account>/<target>/...
// and answers 503 for an account in its outage; and a proxy that carries
// bureau_a's webhooks to ingest and records the answers.
type fleet struct {
	prov      map[string]*provider.Provider
	faults    provider.Faults
	ingestURL string // base URL of ingest, "http://127.0.0.1:port"
	client    *http.Client
	srv       *http.Server
	addr      string

	mu       sync.Mutex
	outages  map[string]window
	calls    []callRec
	polls    []callRec // poll.eventID is empty: a poll names only its reference
	refs     []acceptedRef
	cbs      []cbRec
	downPoll int // polls answered 503 by the gate
}

func newFleet(faults provider.Faults, cb provider.CallbackFaults, seed uint64, ingestURL string) (*fleet, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &fleet{
		prov: map[string]*provider.Provider{}, faults: faults, ingestURL: ingestURL, addr: ln.Addr().String(),
		client:  &http.Client{Timeout: 8 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}},
		outages: map[string]window{},
	}
	for i, t := range targets {
		opts := []provider.Option{provider.WithSeed(seed + uint64(i)), provider.WithIdempotent()}
		if t == targetBureauA {
			opts = append(opts, provider.WithCallbacks("http://"+f.addr+"/cb/"+t, callbackSecret, 300*time.Millisecond))
		}
		p := provider.New(faults, opts...)
		if t == targetBureauA {
			p.SetCallbackFaults(cb)
		}
		f.prov[t] = p
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /cb/{target}", f.proxyCallback)
	mux.Handle("/", http.HandlerFunc(f.gate))
	f.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = f.srv.Serve(ln) }()
	return f, nil
}

func (f *fleet) base() string { return "http://" + f.addr }

// close stops the callbacks and the server.
func (f *fleet) close() {
	for _, p := range f.prov {
		_ = p.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = f.srv.Shutdown(ctx)
}

func (f *fleet) setOutage(account string, w window) {
	f.mu.Lock()
	f.outages[account] = w
	f.mu.Unlock()
}

func (f *fleet) down(account string, now time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	w, ok := f.outages[account]
	return ok && w.has(now)
}

// gate routes /<account>/<target>/... to the target's provider, answering
// 503 itself while the account is down, and records every delivery.
func (f *fleet) gate(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	parts := strings.SplitN(strings.TrimPrefix(r.URL.Path, "/"), "/", 3)
	if len(parts) < 3 {
		http.NotFound(w, r)
		return
	}
	account, target := parts[0], parts[1]
	p, ok := f.prov[target]
	if !ok {
		http.NotFound(w, r)
		return
	}
	down := f.down(account, now)
	poll := r.Method == http.MethodGet && strings.HasPrefix(parts[2][strings.LastIndexByte(parts[2], '/')+1:], provider.RefPrefix)
	if poll {
		f.mu.Lock()
		i := len(f.polls)
		f.polls = append(f.polls, callRec{at: now, account: account, target: target, down: down, poll: true, sender: r.Header.Get(headerInstance)})
		if down {
			f.downPoll++
		}
		f.mu.Unlock()
		defer f.ended(&f.polls, i, r)
		if down {
			unavailable(w)
			return
		}
		p.ServeHTTP(w, r)
		return
	}
	c := callRec{at: now, account: account, target: target, eventID: r.Header.Get(names.HeaderEventID),
		key: r.Header.Get(names.HeaderIdempotencyKey), down: down, sender: r.Header.Get(headerInstance)}
	f.mu.Lock()
	i := len(f.calls)
	f.calls = append(f.calls, c)
	f.mu.Unlock()
	defer f.ended(&f.calls, i, r)
	if down {
		_, _ = io.Copy(io.Discard, r.Body)
		unavailable(w)
		return
	}
	if target != targetBureauA {
		p.ServeHTTP(w, r)
		return
	}
	rec := &recorder{ResponseWriter: w}
	p.ServeHTTP(rec, r)
	if rec.status >= 200 && rec.status < 300 {
		var ans struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(rec.body.Bytes(), &ans) == nil && ans.ID != "" {
			f.mu.Lock()
			f.refs = append(f.refs, acceptedRef{eventID: c.eventID, ref: ans.ID})
			f.mu.Unlock()
		}
	}
}

func unavailable(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.Write([]byte(`{"error":"outage"}` + "\n"))
}

// recorder keeps the status and the start of the body of a response.
type recorder struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (r *recorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	if r.body.Len() < 4096 {
		r.body.Write(b)
	}
	return r.ResponseWriter.Write(b)
}

// proxyCallback carries a provider's webhook to ingest, unchanged, and
// hands ingest's answer back (a 502 when ingest is down: the provider
// records the failure and, like many real ones, does not send it again).
func (f *fleet) proxyCallback(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	var cb provider.Callback
	_ = json.Unmarshal(body, &cb)
	rec := f.sendCallback(r.Context(), "provider", r.PathValue("target"), r.Header, body, cb.EventID)
	if rec.status == 0 {
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(rec.status)
	_, _ = w.Write(rec.body)
}

// sendCallback posts a webhook to ingest and records the answer.
func (f *fleet) sendCallback(ctx context.Context, source, target string, h http.Header, body []byte, eventID string) cbRec {
	rec := cbRec{at: time.Now(), source: source, webhookID: h.Get("webhook-id"), eventID: eventID, req: body}
	var cb provider.Callback
	if json.Unmarshal(body, &cb) == nil {
		rec.ref = cb.Reference
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.ingestURL+"/v1/callbacks/"+target, bytes.NewReader(body))
	if err == nil {
		for k, v := range h {
			req.Header[k] = v
		}
		req.Header.Set("Content-Type", "application/json")
		var resp *http.Response
		if resp, err = f.client.Do(req); err == nil {
			rec.status = resp.StatusCode
			rec.body, _ = io.ReadAll(io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
			var ans struct {
				Outcome string `json:"outcome"`
			}
			if json.Unmarshal(rec.body, &ans) == nil {
				rec.outcome = ans.Outcome
			}
		}
	}
	f.mu.Lock()
	f.cbs = append(f.cbs, rec)
	f.mu.Unlock()
	return rec
}

// shape starts a 429 burst of a few seconds on a random provider now and
// then, and sends some of bureau_a's callbacks late (after the callback
// SLA), until ctx ends; then the steady faults come back.
func (f *fleet) shape(ctx context.Context, rng *rand.Rand, cb provider.CallbackFaults, late time.Duration) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	burstUntil := map[string]time.Time{}
	lateUntil := time.Time{}
	defer func() {
		for _, p := range f.prov {
			p.SetFaults(f.faults)
		}
		f.prov[targetBureauA].SetCallbackFaults(cb)
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := time.Now()
		for _, t := range targets {
			switch until, on := burstUntil[t]; {
			case on && now.After(until):
				delete(burstUntil, t)
				f.prov[t].SetFaults(f.faults)
			case !on && rng.Float64() < 1.0/20:
				burstUntil[t] = now.Add(3 * time.Second)
				f.prov[t].SetFaults(burstFaults())
			}
		}
		switch {
		case !lateUntil.IsZero() && now.After(lateUntil):
			lateUntil = time.Time{}
			f.prov[targetBureauA].SetCallbackFaults(cb)
		case lateUntil.IsZero() && rng.Float64() < 1.0/25:
			lateUntil = now.Add(3 * time.Second)
			c := cb
			c.LateBy = late
			f.prov[targetBureauA].SetCallbackFaults(c)
		}
	}
}

// ended records the end of (*recs)[i], for the checks of calls in
// flight: when the provider answered, or when the caller went away (a
// hang ends then).
func (f *fleet) ended(recs *[]callRec, i int, r *http.Request) {
	end, gone := time.Now(), r.Context().Err() != nil
	f.mu.Lock()
	(*recs)[i].end, (*recs)[i].gone = end, gone
	f.mu.Unlock()
}

// snapshot copies what the checks read.
func (f *fleet) snapshot() (calls, polls []callRec, cbs []cbRec, downPoll int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls), slices.Clone(f.polls), slices.Clone(f.cbs), f.downPoll
}

// recentRefs returns up to n of the latest bureau_a acceptances.
func (f *fleet) recentRefs(n int) []acceptedRef {
	f.mu.Lock()
	defer f.mu.Unlock()
	from := max(0, len(f.refs)-n)
	return append([]acceptedRef(nil), f.refs[from:]...)
}

// applied returns up to n of the latest provider webhooks that ingest
// applied: their event is done, so nothing sent after may change it.
func (f *fleet) applied(n int) []cbRec {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []cbRec
	for i := len(f.cbs) - 1; i >= 0 && len(out) < n; i-- {
		if c := f.cbs[i]; c.source == "provider" && c.outcome == ingest.CallbackApplied {
			out = append(out, c)
		}
	}
	return out
}

// pendingCallbacks is how many of bureau_a's callbacks are still to be
// sent (each applied delivery schedules one; a duplicate is a second
// record of the same).
func (f *fleet) pendingCallbacks() int {
	p := f.prov[targetBureauA]
	applied := 0
	for _, c := range p.Calls() {
		if c.Applied {
			applied++
		}
	}
	sent := 0
	for _, c := range p.Callbacks() {
		if !c.Duplicate {
			sent++
		}
	}
	return applied - sent
}
