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
	"math"
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
	ClassCrash     Class = "crash" // the worker died on it (max deliveries, or its runs lost past its attempts)
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

// ErrRunLost is wrapped when an event's runs were lost (its worker died
// on it, or was cut off from NATS) until the stage had no attempt left:
// class crash.
var ErrRunLost = errors.New("its runs were lost: the worker died or was cut off during each")

// ClassOf classifies an error (nil is success).
func ClassOf(err error) Class {
	switch {
	case err == nil:
		return ClassSuccess
	case IsPermanent(err):
		return ClassPermanent
	case errors.Is(err, ErrTimeout):
		return ClassTimeout
	case errors.Is(err, ErrRunLost):
		return ClassCrash
	}
	return ClassTransient
}

// Overloaded reports whether err is the target refusing for load: 429
// or 503, any answer that asked for a pause (Retry-After), or a timeout;
// and how long it asked to wait.
func Overloaded(err error) (bool, time.Duration) {
	if err == nil {
		return false, 0
	}
	if ra, ok := errors.AsType[*RetryAfterError](err); ok {
		return true, ra.After
	}
	s := StatusOf(err)
	return s == 429 || s == 503 || ClassOf(err) == ClassTimeout, 0
}

// StatusOf returns the HTTP status carried by err, or 0.
func StatusOf(err error) int {
	var h *HTTPError
	if errors.As(err, &h) {
		return h.Status
	}
	return 0
}

// ParseRetryAfter reads a Retry-After value: delay-seconds or an HTTP date
// (a date in the past is 0). The result is in [0, RetryAfterCap]. ok is
// false for anything else (then the backoff decides).
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	// delay-seconds; a number too big for int64 is still a (huge) delay.
	if n, err := strconv.ParseInt(v, 10, 64); err == nil || errors.Is(err, strconv.ErrRange) && n > 0 {
		if n < 0 {
			return 0, false
		}
		return time.Duration(min(n, int64(RetryAfterCap/time.Second))) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return min(max(t.Sub(now), 0), RetryAfterCap), true
}

// RetryAfterCap is the longest wait ParseRetryAfter returns.
const RetryAfterCap = 366 * 24 * time.Hour

// Backoff is exponential backoff with jitter.
type Backoff struct {
	Initial, Max  time.Duration // Max <= 0: no cap
	Multiplier    float64       // below 1 counts as 1
	Jitter        float64       // ±fraction, clamped to [0, 1]
	MaxRetryAfter time.Duration // cap on a target's Retry-After; <= 0: no cap
}

// Delay is the wait before attempt n+1 after n failed attempts (n ≥ 1):
// Initial·Multiplier^(n-1), capped at Max, then ±Jitter, never negative,
// and never less than a Retry-After the target asked for (capped).
func (b Backoff) Delay(n int, err error, rnd *rand.Rand) time.Duration {
	d := 0.0
	if b.Initial > 0 {
		mult := b.Multiplier
		if !(mult >= 1) { // also NaN
			mult = 1
		}
		d = float64(b.Initial) * math.Pow(mult, float64(max(n-1, 0))) // +Inf past float64, capped below
	}
	if b.Max > 0 && d > float64(b.Max) {
		d = float64(b.Max)
	}
	if j := min(b.Jitter, 1); j > 0 {
		f := 0.5
		if rnd != nil {
			f = rnd.Float64()
		} else {
			f = rand.Float64()
		}
		d *= 1 + j*(2*f-1)
	}
	out := saturate(d)
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

// saturate converts nanoseconds to a Duration in [0, MaxInt64]: converting
// a float64 beyond the int64 range is implementation-defined in Go (on
// amd64 it gives a negative duration).
func saturate(ns float64) time.Duration {
	switch {
	case !(ns > 0): // also NaN
		return 0
	case ns >= float64(math.MaxInt64):
		return math.MaxInt64
	}
	return time.Duration(ns)
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
