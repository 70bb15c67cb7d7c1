package client

import (
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Code is a machine code of tenaz's error answers (the "code" of
// {"error": {"code", "message"}}). A Code is an error, so that
// errors.Is(err, client.ErrNotFound) matches any *Error with that code.
type Code string

func (c Code) Error() string { return string(c) }

// Codes that callers branch on. Any other code the server answers with
// is still in Error.Code.
const (
	// ErrNotFound: no such event, dead letter, job or breaker (404).
	ErrNotFound Code = "not_found"
	// ErrIdempotencyKeyReused: the idempotency key names an event with
	// another kind or payload (409); the event is not submitted again.
	ErrIdempotencyKeyReused Code = "idempotency_key_reused"
	// ErrNotCancellable: only scheduled, pending or retrying events can be
	// cancelled (409).
	ErrNotCancellable Code = "not_cancellable"
	// ErrNotParked: the event is not dead or in review any more, so it
	// cannot be replayed, discarded or resolved (409).
	ErrNotParked Code = "not_parked"
	// ErrNotWaiting: the event is not in a state the action on it is legal
	// from: retry now needs it retrying or scheduled, cancel wait awaiting
	// its callback or polling (409).
	ErrNotWaiting Code = "not_waiting"
	// ErrNotPaused: the account has no operator's pause to resume (409).
	ErrNotPaused Code = "not_paused"
	// ErrPauseChanged: the account was paused again while a resume ran;
	// that pause stands (409).
	ErrPauseChanged Code = "pause_changed"
	// ErrReasonRequired: an operator action needs a reason (400).
	ErrReasonRequired Code = "reason_required"
	// ErrReasonTooLong: the reason is over ops.MaxReason bytes (400).
	ErrReasonTooLong Code = "reason_too_long"
	// ErrMalformed: the request could not be parsed (400).
	ErrMalformed Code = "malformed"
	// ErrUnknownKind: the kind is not configured (422).
	ErrUnknownKind Code = "unknown_kind"
	// ErrSchemaViolation: the payload does not match the kind's schema (422).
	ErrSchemaViolation Code = "schema_violation"
	// ErrTooLarge: the request body is over the limit (413).
	ErrTooLarge Code = "too_large"
	// ErrUnauthorized: no credential, or one that is not valid (401).
	ErrUnauthorized Code = "unauthorized"
	// ErrForbidden: the credential may not do this, e.g. an API key on an
	// operator call or another account's event (403).
	ErrForbidden Code = "forbidden"
	// ErrRateLimited: the API key's rate is spent; Error.RetryAfter says
	// when to try again (429).
	ErrRateLimited Code = "rate_limited"
	// ErrStoreFull: tenaz's storage is full; the submission was not taken (503).
	ErrStoreFull Code = "store_full"
	// ErrUnavailable: tenaz could not do it now (503), or nothing answered
	// in time: a transport failure wraps it too, so errors.Is(err,
	// ErrUnavailable) means "try again later". It matches
	// ErrOutcomeUnknown as well.
	ErrUnavailable Code = "unavailable"
	// ErrOutcomeUnknown: the submission went to NATS but its
	// acknowledgement did not come back (503): it may have been taken.
	// Submit it again with the same idempotency key: if it was taken, the
	// answer is its event (Receipt.Duplicate), never a second one.
	ErrOutcomeUnknown Code = "outcome_unknown"
)

// Error is an error answer of tenaz: the HTTP status (over NATS, the
// Tenaz-Status header or the micro error code), the machine code and the
// message.
type Error struct {
	// Op is what was called: "POST /v1/events" or "tenaz.api.ingest.submit".
	Op string
	// Status is the HTTP(-like) status: 400, 404, 409, 503, …
	Status int
	// Code is the machine code, e.g. ErrNotFound.
	Code Code
	// Message is the server's explanation, for people.
	Message string
	// RetryAfter is the server's Retry-After, when it sent one.
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	if e.Code != "" && string(e.Code) != strconv.Itoa(e.Status) {
		return fmt.Sprintf("%s: %s (%s)", e.Op, msg, e.Code)
	}
	return fmt.Sprintf("%s: %s", e.Op, msg)
}

// Is matches a Code: errors.Is(err, client.ErrNotFound). An
// ErrOutcomeUnknown answer is ErrUnavailable too: trying again is right
// for both (with the same idempotency key).
func (e *Error) Is(target error) bool {
	c, ok := target.(Code)
	return ok && (c == e.Code || c == ErrUnavailable && e.Code == ErrOutcomeUnknown)
}

// transportError is a call that got no answer: nothing listens, the
// connection is gone, or ctx ended. It wraps ErrUnavailable and the cause.
type transportError struct {
	op, msg string
	err     error
}

func (e *transportError) Error() string { return e.op + ": " + e.msg }

func (e *transportError) Unwrap() []error { return []error{ErrUnavailable, e.err} }
