// Package outcome is how a delivery attempt ended, as an error value, and
// the one function (Decide) that turns an outcome into what happens to the
// event and its message. A nil error is success; Permanent(err) never
// retries; RetryAfter(d, err) retries no sooner than d; anything else is
// transient and retried with backoff until the attempts run out.
//
//	return outcome.Permanent(fmt.Errorf("customer %s unknown", id))
package outcome

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Class names an outcome in records, metrics and advisories.
type Class string

// The classes.
const (
	ClassSuccess   Class = "success"
	ClassTransient Class = "transient"
	ClassPermanent Class = "permanent"
	ClassTimeout   Class = "timeout"
	ClassCrash     Class = "crash" // the worker died on it (max deliveries)
)

type permanent struct{ err error }

func (p *permanent) Error() string { return p.err.Error() }
func (p *permanent) Unwrap() error { return p.err }

// Permanent marks err as not worth retrying: the event goes to dead-letter.
func Permanent(err error) error {
	if err == nil {
		err = errors.New("permanent failure")
	}
	return &permanent{err: err}
}

// IsPermanent reports whether err was marked with Permanent.
func IsPermanent(err error) bool {
	var p *permanent
	return errors.As(err, &p)
}

// RetryAfterError asks for the next attempt no sooner than After.
type RetryAfterError struct {
	After time.Duration
	Err   error
}

func (r *RetryAfterError) Error() string {
	return fmt.Sprintf("retry after %s: %v", r.After, r.Err)
}
func (r *RetryAfterError) Unwrap() error { return r.Err }

// RetryAfter marks err as transient with a minimum wait of d.
func RetryAfter(d time.Duration, err error) error {
	if err == nil {
		err = errors.New("retry later")
	}
	return &RetryAfterError{After: d, Err: err}
}

// HTTPError is a target's non-success answer.
type HTTPError struct {
	Status int
	Body   string // excerpt, at most 1 KiB
}

func (h *HTTPError) Error() string {
	if h.Body == "" {
		return fmt.Sprintf("target answered %d %s", h.Status, http.StatusText(h.Status))
	}
	return fmt.Sprintf("target answered %d %s: %s", h.Status, http.StatusText(h.Status), h.Body)
}

// ErrTimeout is wrapped when a call did not answer in time.
var ErrTimeout = errors.New("target did not answer in time")

// ClassOf classifies an error (nil is success).
func ClassOf(err error) Class {
	switch {
	case err == nil:
		return ClassSuccess
	case IsPermanent(err):
		return ClassPermanent
	case errors.Is(err, ErrTimeout):
		return ClassTimeout
	}
	return ClassTransient
}

// StatusOf returns the HTTP status carried by err, or 0.
func StatusOf(err error) int {
	var h *HTTPError
	if errors.As(err, &h) {
		return h.Status
	}
	return 0
}

// ParseRetryAfter reads a Retry-After value: delay-seconds or an HTTP date.
// ok is false for anything else (then the backoff decides).
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 {
			return 0, false
		}
		if n > 366*24*3600 {
			n = 366 * 24 * 3600
		}
		return time.Duration(n) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	d := t.Sub(now)
	if d < 0 {
		d = 0
	}
	return d, true
}

// Backoff is exponential backoff with jitter.
type Backoff struct {
	Initial, Max  time.Duration
	Multiplier    float64
	Jitter        float64       // ±fraction
	MaxRetryAfter time.Duration // cap on a target's Retry-After
}

// Delay is the wait before attempt n+1 after n failed attempts (n ≥ 1),
// never less than a Retry-After the target asked for (capped).
func (b Backoff) Delay(n int, err error, rnd *rand.Rand) time.Duration {
	d := float64(b.Initial)
	mult := b.Multiplier
	if mult < 1 {
		mult = 1
	}
	for i := 1; i < n && d < float64(b.Max); i++ {
		d *= mult
	}
	if b.Max > 0 && d > float64(b.Max) {
		d = float64(b.Max)
	}
	if b.Jitter > 0 {
		f := 0.5
		if rnd != nil {
			f = rnd.Float64()
		} else {
			f = rand.Float64()
		}
		d *= 1 + b.Jitter*(2*f-1)
	}
	out := time.Duration(d)
	var ra *RetryAfterError
	if errors.As(err, &ra) {
		want := ra.After
		if b.MaxRetryAfter > 0 && want > b.MaxRetryAfter {
			want = b.MaxRetryAfter
		}
		if want > out {
			out = want
		}
	}
	return out
}

// Verdict is what happens to an event after an attempt.
type Verdict int

// The verdicts.
const (
	VerdictDone     Verdict = iota // success: record done (or awaiting completion), ack
	VerdictRetry                   // schedule the next attempt, record retrying, ack
	VerdictFallback                // attempts exhausted, a fallback stage exists
	VerdictDead                    // permanent or exhausted: dead-letter, ack
)

func (v Verdict) String() string {
	return [...]string{"done", "retry", "fallback", "dead"}[v]
}

// Decision is Decide's answer.
type Decision struct {
	Verdict Verdict
	Class   Class
	Delay   time.Duration // VerdictRetry: wait before the next attempt
}

// Decide maps the outcome of attempt number attempt (1-based) of a stage
// that allows maxAttempts to what happens next. It is the only place that
// makes this choice.
func Decide(err error, attempt, maxAttempts int, hasFallback bool, b Backoff, rnd *rand.Rand) Decision {
	c := ClassOf(err)
	switch {
	case c == ClassSuccess:
		return Decision{Verdict: VerdictDone, Class: c}
	case c == ClassPermanent:
		return Decision{Verdict: VerdictDead, Class: c}
	case attempt >= maxAttempts && hasFallback:
		return Decision{Verdict: VerdictFallback, Class: c}
	case attempt >= maxAttempts:
		return Decision{Verdict: VerdictDead, Class: c}
	}
	return Decision{Verdict: VerdictRetry, Class: c, Delay: b.Delay(attempt, err, rnd)}
}
