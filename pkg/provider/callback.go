package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/tenaz/tenaz/pkg/webhook"
)

// CallbackFaults says how the provider's webhooks misbehave.
type CallbackFaults struct {
	// DuplicateRate is the fraction of callbacks sent twice, the copy (same
	// webhook-id and body) right after the first.
	DuplicateRate float64
	// DropRate is the fraction of callbacks never sent.
	DropRate float64
	// LateBy is added to the WithCallbacks delay of every callback (or,
	// with LateRate set, of that fraction of them), e.g. to land after
	// tenaz's callback deadline.
	LateBy time.Duration
	// LateRate, when non-zero, is the fraction of callbacks LateBy applies
	// to; the others keep the plain delay.
	LateRate float64
}

type callbackConfig struct {
	url    string
	secret string
	delay  time.Duration
}

// Callback is the JSON body of a callback.
type Callback struct {
	EventID   string `json:"event_id"`
	Reference string `json:"reference"`
	Status    string `json:"status"`
}

// WithCallbacks makes the provider POST a signed Standard Webhooks callback
// to url, delay after each call that applied the effect. The body is a
// Callback with Status "approved" (or the payload's DecisionField); the
// webhook-id is "msg_<reference>", the secret "whsec_<base64>" or raw.
func WithCallbacks(url, secret string, delay time.Duration) Option {
	return func(p *Provider) { p.cb = callbackConfig{url: url, secret: secret, delay: delay} }
}

// SetCallbackFaults replaces the callback faults at run time. They apply to
// callbacks scheduled afterwards.
func (p *Provider) SetCallbackFaults(f CallbackFaults) {
	p.mu.Lock()
	p.cbFaults = f
	p.mu.Unlock()
}

// Callbacks returns a copy of the callbacks sent or dropped, in order.
func (p *Provider) Callbacks() []CallbackRecord {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]CallbackRecord(nil), p.callbacks...)
}

// WaitCallbacks blocks until len(Callbacks()) >= n or ctx is done.
func (p *Provider) WaitCallbacks(ctx context.Context, n int) error {
	return p.waitFor(ctx, func() (bool, string) {
		return len(p.callbacks) >= n, fmt.Sprintf("waiting for %d callbacks, got %d", n, len(p.callbacks))
	})
}

type callbackJob struct {
	rec   CallbackRecord
	delay time.Duration
	dup   bool
}

// scheduleCallbackLocked starts the callback of an applied call; p.mu must
// be held.
func (p *Provider) scheduleCallbackLocked(eventID, ref, final string) {
	if p.cb.url == "" || p.closed {
		return
	}
	f := p.cbFaults
	body, _ := json.Marshal(Callback{EventID: eventID, Reference: ref, Status: final})
	rec := CallbackRecord{EventID: eventID, Reference: ref, WebhookID: "msg_" + ref, Body: body}
	if f.DropRate > 0 && p.cbRng.Float64() < f.DropRate {
		rec.At = p.now()
		rec.Dropped = true
		p.callbacks = append(p.callbacks, rec)
		return // the caller notifies
	}
	job := callbackJob{rec: rec, delay: p.cb.delay}
	if f.LateRate == 0 || p.cbRng.Float64() < f.LateRate {
		job.delay += f.LateBy
	}
	job.dup = f.DuplicateRate > 0 && p.cbRng.Float64() < f.DuplicateRate
	p.wg.Add(1)
	go p.runCallback(job)
}

func (p *Provider) runCallback(job callbackJob) {
	defer p.wg.Done()
	if job.delay > 0 {
		t := time.NewTimer(job.delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-p.ctx.Done():
			return
		}
	}
	p.sendCallback(job.rec)
	if job.dup {
		job.rec.Duplicate = true
		p.sendCallback(job.rec)
	}
}

func (p *Provider) sendCallback(rec CallbackRecord) {
	if p.ctx.Err() != nil {
		return
	}
	rec.At = p.now()
	req, err := http.NewRequestWithContext(p.ctx, http.MethodPost, p.cb.url, bytes.NewReader(rec.Body))
	if err == nil {
		req.Header.Set("Content-Type", "application/json")
		for k, v := range webhook.Headers(p.cb.secret, rec.WebhookID, rec.At, rec.Body) {
			req.Header[k] = v
		}
		var resp *http.Response
		resp, err = p.client.Do(req)
		if err == nil {
			rec.Status = resp.StatusCode
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
		}
	}
	if err != nil {
		if p.ctx.Err() != nil {
			return // closed mid-flight: not a callback outcome
		}
		rec.Err = err.Error()
	}
	p.mu.Lock()
	p.callbacks = append(p.callbacks, rec)
	p.notifyLocked()
	p.mu.Unlock()
}
