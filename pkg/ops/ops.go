// Package ops is the wire contract of tenaz's operator surface: the request
// and reply bodies of the deadletter service's NATS micro endpoints (the
// service "tenaz-deadletter"), which the tenaz CLI calls, and of its JSON
// HTTP API under /v1/dead, /v1/review and /v1/breakers, which uses the
// same types.
//
// # Endpoints
//
// Each endpoint is a request/reply subject <prefix>.api.<name> (prefix
// defaults to "tenaz"; Subject builds it). Request and reply bodies are
// JSON of the types below:
//
//	dead.list        ListRequest         → ListReply       dead letters (record still dead)
//	dead.show        ShowRequest         → ShowReply       one entry, dead or in review
//	dead.replay      ReplayRequest       → ReplayReply     replay ids now, or a filter as a job
//	dead.discard     DiscardRequest      → ActionReply     discard ids with a reason
//	dead.job         JobRequest          → JobReply        progress of a replay job
//	review.list      ListRequest         → ListReply       manual reviews (record still in review)
//	review.resolve   ResolveRequest      → ActionReply     done | discard | requeue_primary | requeue_fallback
//	breakers.list    BreakersRequest     → BreakersReply   every breaker with its shared state
//	breakers.close   CloseBreakerRequest → BreakerItem     close one breaker for everyone
//	breakers.open    OpenBreakerRequest  → BreakerItem     open one breaker for everyone until a time
//	accounts.pause   PauseRequest        → AccountReply    pause an account's dispatch
//	accounts.resume  ResumeRequest       → AccountReply    end an operator's pause
//	pauses.list      PausesRequest       → PausesReply     the accounts held by a pause or a breaker
//	events.retry     EventActionRequest  → EventReply      a retrying or scheduled event runs now
//	events.cancel_wait EventActionRequest → EventReply     stop waiting for a callback or a poll
//	actions.list     ActionsRequest      → ActionsReply    the audit of actions on accounts and breakers
//	accounts.set     StoredSetRequest    → StoredAccount   add or replace an account of the accounts bucket
//	accounts.list    StoredListRequest   → StoredListReply the accounts bucket, header values redacted
//	accounts.rm      StoredRemoveRequest → StoredAccount   remove an account of the accounts bucket
//	config.status    (any)               → ConfigStatus    the config in force and its last reload
//
// An error is answered with the micro error headers — Nats-Service-Error-Code
// holds an HTTP-like code (400 bad request, 401 no or invalid operator
// credential, 403 a credential that is not an operator's, 404 not found,
// 409 conflict:
// the event is not in a state the action is legal from (code
// "not_parked", "not_waiting") or not indexed yet, the account is not
// paused ("not_paused") or was paused again meanwhile ("pause_changed"), 413/422 an edited payload refused like
// a submission, 500 internal) and Nats-Service-Error the message — and the
// body ErrorBody, {"error":{"code":"not_found","message":"..."}}. A request
// with an unknown field is refused (400 "malformed"). Call does a request
// and turns such an answer into an *Error.
//
// # Who and why
//
// Every endpoint needs the operator credential: the request's
// Authorization header (AuthorizationHeader) holds "Bearer <operator key>"
// (or Basic with the operator's name), checked against auth.operators as
// the HTTP API checks it. Without one the answer is 401, with an API key
// 403. The service records who acted from that credential,
// "operator:<name>", in the event's history (state.Entry.Actor); with
// auth.disabled it records "anonymous". No request body names the actor:
// a body "actor" field is an unknown field (400). Reason, the why, is
// recorded as the entry's detail.
//
//	var rep ops.ListReply
//	err := ops.Call(ctx, nc, ops.Subject("tenaz", ops.DeadList), ops.ListRequest{Account: "acme", Limit: 50}, &rep,
//		ops.WithOperatorKey(os.Getenv("TENAZ_OPERATOR_KEY")))
package ops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/state"
)

// Endpoint names; Subject(prefix, name) is the subject to request.
const (
	DeadList      = "dead.list"
	DeadShow      = "dead.show"
	DeadReplay    = "dead.replay"
	DeadDiscard   = "dead.discard"
	DeadJob       = "dead.job"
	DeadJobCancel = "dead.job.cancel"
	ReviewList    = "review.list"
	ReviewResolve = "review.resolve"
	BreakersList  = "breakers.list"
	BreakersClose = "breakers.close"
)

// Limits and names of the contract.
const (
	// ServiceName is the micro service that answers the endpoints.
	ServiceName = "tenaz-deadletter"
	// DefaultLimit is ListRequest.Limit when 0; MaxLimit the largest.
	DefaultLimit = 50
	MaxLimit     = 500
	// MaxSelection is the most IDs one replay or discard takes.
	MaxSelection = 1000
	// MaxReason is the longest reason an action takes, in bytes: it is
	// kept in the event's history and in the audit entry, which must stay
	// within what NATS stores.
	MaxReason = 1024
	// DefaultRate is ReplayRequest.RatePerSecond when 0.
	DefaultRate = 100.0
	// ErrorCodeHeader carries an error answer's HTTP-like code.
	ErrorCodeHeader = "Nats-Service-Error-Code"
	// ErrorHeader carries an error answer's message.
	ErrorHeader = "Nats-Service-Error"
	// AuthorizationHeader carries a request's operator credential, as in
	// HTTP: "Bearer <operator key>".
	AuthorizationHeader = "Authorization"
)

// Subject is the request subject of endpoint name under prefix ("" means "tenaz").
func Subject(prefix, name string) string {
	if prefix == "" {
		prefix = names.DefaultPrefix
	}
	return prefix + ".api." + name
}

// ListRequest filters and pages a list. Every filter is optional and they
// combine with AND. The same fields are the query parameters of
// GET /v1/dead and GET /v1/review (since/until as RFC 3339).
type ListRequest struct {
	// Account, Kind, Class (error class: permanent, transient, timeout,
	// crash, …) and Reason (permanent, attempts_exhausted, max_deliveries,
	// terminated, rejected_at_intake, manual_review) match exactly.
	Account string `json:"account,omitempty"`
	Kind    string `json:"kind,omitempty"`
	Class   string `json:"class,omitempty"`
	Reason  string `json:"reason,omitempty"`
	// Since and Until bound the time the entry arrived in DEAD: Since <= at < Until.
	Since *time.Time `json:"since,omitempty"`
	Until *time.Time `json:"until,omitempty"`
	// Cursor is a previous reply's NextCursor; "" is the first page.
	// Pages run newest first.
	Cursor string `json:"cursor,omitempty"`
	// Limit is the page size: 1..500, 0 means 50.
	Limit int `json:"limit,omitempty"`
}

// Item is one line of a list: an entry of DEAD whose event is still dead
// (or in manual review).
type Item struct {
	// ID is the event id, or, for a rejected submission that never became
	// an event, seq_<n> (n its DEAD sequence) as the API names it ("" on
	// the screen).
	ID      string `json:"id"`
	Account string `json:"account"`
	Kind    string `json:"kind"`
	// Reason is why it is in DEAD (dead.Reason*).
	Reason string `json:"reason"`
	// Class, Error and HTTPStatus are the last failure.
	Class      string `json:"class,omitempty"`
	Error      string `json:"error,omitempty"`
	HTTPStatus int    `json:"http_status,omitempty"`
	// Attempts made in the last stage, and that stage.
	Attempts int    `json:"attempts"`
	Stage    string `json:"stage,omitempty"`
	// Status is the record's state when listed: dead or manual_review.
	Status state.State `json:"status"`
	// At is when the entry arrived in DEAD.
	At time.Time `json:"at"`
	// Seq is the entry's sequence in the DEAD stream.
	Seq uint64 `json:"seq"`
}

// ListReply is one page.
type ListReply struct {
	Items []Item `json:"items"`
	// NextCursor fetches the next page; "" when this is the last one.
	NextCursor string `json:"next_cursor,omitempty"`
	// Total counts every entry matching the filter (all pages).
	Total int `json:"total"`
}

// ShowRequest names one event by id. Seq, when set instead, names a DEAD
// entry by stream sequence (a rejected submission has no id).
type ShowRequest struct {
	ID  string `json:"id,omitempty"`
	Seq uint64 `json:"seq,omitempty"`
}

// ShowReply is one entry in full.
type ShowReply struct {
	Item Item `json:"item"`
	// Event is the envelope with its payload as it was when it died.
	Event *event.Envelope `json:"event,omitempty"`
	// Record is the event's current record in tenaz_state, with its whole
	// timeline (attempts, HTTP statuses, who did what); the one kept in
	// DEAD when the record is gone.
	Record *state.Record `json:"record,omitempty"`
	// Raw, RawSubject and RawHeader are a rejected submission as received.
	Raw        []byte              `json:"raw,omitempty"`
	RawSubject string              `json:"raw_subject,omitempty"`
	RawHeader  map[string][]string `json:"raw_header,omitempty"`
}

// ReplayRequest replays dead or reviewed events: a fresh attempt cycle
// (attempts reset) in Stage. Give IDs (up to 1000, replayed in the call;
// ReplayReply counts them) or Filter (every entry of dead.list matching
// it, replayed by a durable background job at RatePerSecond; ReplayReply
// has its JobID). An event that is no longer dead or in review (already
// replayed, running, resolved) is skipped, never run twice.
type ReplayRequest struct {
	IDs    []string     `json:"ids,omitempty"`
	Filter *ListRequest `json:"filter,omitempty"`
	// Payload replaces the event's payload (the operator fixed the data);
	// only with exactly one id. The id, account, kind and keys stay.
	Payload json.RawMessage `json:"payload,omitempty"`
	// Stage is "primary", "fallback" or "" (the stage it was in).
	Stage string `json:"stage,omitempty"`
	// Reason is why, recorded in each event's history.
	Reason string `json:"reason,omitempty"`
	// RatePerSecond bounds a job's replays; 0 means 100.
	RatePerSecond float64 `json:"rate_per_second,omitempty"`
	// Entries are the DEAD entries (Item.Seq) the replay was decided on,
	// by id; see Entries.
	Entries Entries `json:"entries,omitempty"`
}

// Entries names, by event id, the DEAD entry (Item.Seq) an operator
// looked at when deciding an action. An id whose listed entry is another
// by then (it was replayed by someone else and died again, with another
// error) is refused 409 entry_changed, not acted on: the decision was
// about a death the operator did not see. An id not named is acted on
// whichever entry is listed.
type Entries map[string]uint64

// ItemError is why one id of a batch was not acted on.
type ItemError struct {
	ID string `json:"id"`
	// Code is HTTP-like: 404 unknown, 409 not in a state the action is legal from, 500.
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// ReplayReply answers a replay: counts for IDs, JobID for a Filter.
type ReplayReply struct {
	JobID    string      `json:"job_id,omitempty"`
	Replayed int         `json:"replayed"`
	Skipped  int         `json:"skipped"`
	Errors   []ItemError `json:"errors,omitempty"`
}

// JobRequest asks for a replay job's progress.
type JobRequest struct {
	JobID string `json:"job_id"`
}

// JobCancelRequest stops a running replay job.
type JobCancelRequest struct {
	JobID string `json:"job_id"`
	// Reason is why (required), kept in the job.
	Reason string `json:"reason"`
}

// Job states.
const (
	JobRunning   = "running"
	JobDone      = "done"
	JobFailed    = "failed"
	JobCancelled = "cancelled"
)

// JobReply is a replay job's progress, kept durably (a restart resumes it).
type JobReply struct {
	JobID string `json:"job_id"`
	// Total is how many entries matched when the job started; Done counts
	// replayed ones, Skipped those no longer dead, Failed errors.
	Total   int    `json:"total"`
	Done    int    `json:"done"`
	Skipped int    `json:"skipped"`
	Failed  int    `json:"failed"`
	State   string `json:"state"`
	// Error is why a failed job stopped.
	Error string `json:"error,omitempty"`
	// CancelledBy and CancelReason are who cancelled a cancelled job
	// (from the credential) and why.
	CancelledBy  string `json:"cancelled_by,omitempty"`
	CancelReason string `json:"cancel_reason,omitempty"`
	// LastErrors are the latest per-event failures (up to 20).
	LastErrors []ItemError `json:"last_errors,omitempty"`
	Filter     ListRequest `json:"filter"`
	Stage      string      `json:"stage,omitempty"`
	// Actor is who started the job (from the credential: "operator:alice").
	Actor         string    `json:"actor"`
	Reason        string    `json:"reason,omitempty"`
	RatePerSecond float64   `json:"rate_per_second"`
	CreatedAt     time.Time `json:"created_at"`
	UpdatedAt     time.Time `json:"updated_at"`
}

// DiscardRequest discards dead or reviewed events (they become cancelled).
// Seqs names DEAD entries without an event (rejected submissions, Item.ID
// "") by their Item.Seq; discarding one drops it from the list.
type DiscardRequest struct {
	IDs  []string `json:"ids,omitempty"`
	Seqs []uint64 `json:"seqs,omitempty"`
	// Reason is why (required), recorded in each event's history.
	Reason string `json:"reason"`
	// Entries are the DEAD entries the discard was decided on, by id.
	Entries Entries `json:"entries,omitempty"`
}

// ActionReply answers discard and resolve: how many moved, how many were
// skipped (not dead or in review any more) and why others failed.
type ActionReply struct {
	Done    int         `json:"done"`
	Skipped int         `json:"skipped"`
	Errors  []ItemError `json:"errors,omitempty"`
}

// Outcomes of a review.
const (
	OutcomeDone            = "done"             // resolved: done, with Result
	OutcomeDiscard         = "discard"          // cancelled
	OutcomeRequeuePrimary  = "requeue_primary"  // replayed at the primary stage
	OutcomeRequeueFallback = "requeue_fallback" // replayed at the fallback stage
)

// ResolveRequest decides a manual review (it also works on a dead event).
type ResolveRequest struct {
	ID      string `json:"id"`
	Outcome string `json:"outcome"`
	// Result is stored as the event's result with OutcomeDone (optional JSON).
	Result json.RawMessage `json:"result,omitempty"`
	// Reason is why, recorded in the event's history; required with
	// OutcomeDiscard, as DiscardRequest's (400 reason_required).
	Reason string `json:"reason,omitempty"`
	// Entry is the DEAD entry (Item.Seq) the decision was made on; 0:
	// whichever is listed (see Entries).
	Entry uint64 `json:"entry,omitempty"`
}

// BreakersRequest lists breakers, optionally of one account.
type BreakersRequest struct {
	Account string `json:"account,omitempty"`
}

// BreakerItem is one breaker's shared state.
type BreakerItem struct {
	Account string `json:"account"`
	Target  string `json:"target"`
	// State is closed, open or half_open.
	State     string     `json:"state"`
	OpenUntil *time.Time `json:"open_until,omitempty"`
	Reason    string     `json:"reason,omitempty"`
	Failures  int        `json:"failures"`
	By        string     `json:"by,omitempty"`
	At        time.Time  `json:"at"`
}

// BreakersReply is every known breaker, sorted by account and target.
type BreakersReply struct {
	Items []BreakerItem `json:"items"`
}

// CloseBreakerRequest closes account+target's breaker for every replica.
type CloseBreakerRequest struct {
	Account string `json:"account"`
	Target  string `json:"target"`
	// Reason is why, recorded in the audit (optional).
	Reason string `json:"reason,omitempty"`
}

// ErrorBody is the JSON body of an error answer (the same as HTTP's).
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is a machine code and a human message.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Error is an error answer: Status is the HTTP-like code, Code the machine code.
type Error struct {
	Status  int
	Code    string
	Message string
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s (%d %s)", e.Message, e.Status, e.Code)
}

// ErrNoService is returned by Call when nobody answers the subject.
var ErrNoService = errors.New("ops: no deadletter service answers (is tenaz-deadletter running?)")

// CallOption sets something of one Call.
type CallOption func(*nats.Msg)

// WithOperatorKey sends key as the request's operator credential
// ("Authorization: Bearer <key>"); "" sends none.
func WithOperatorKey(key string) CallOption {
	return func(m *nats.Msg) {
		if key != "" {
			m.Header.Set(AuthorizationHeader, "Bearer "+key)
		}
	}
}

// Call sends req as JSON to subject, waits for the answer (ctx bounds it)
// and decodes it into rep. An error answer is returned as *Error.
func Call(ctx context.Context, nc *nats.Conn, subject string, req, rep any, opts ...CallOption) error {
	b, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("ops: encode request: %w", err)
	}
	msg := nats.NewMsg(subject)
	msg.Data = b
	for _, o := range opts {
		o(msg)
	}
	m, err := nc.RequestMsgWithContext(ctx, msg)
	if errors.Is(err, nats.ErrNoResponders) {
		return ErrNoService
	}
	if err != nil {
		return fmt.Errorf("ops: %s: %w", subject, err)
	}
	if code := m.Header.Get(ErrorCodeHeader); code != "" {
		e := &Error{Message: m.Header.Get(ErrorHeader)}
		e.Status, _ = strconv.Atoi(code)
		var body ErrorBody
		if json.Unmarshal(m.Data, &body) == nil && body.Error.Code != "" {
			e.Code, e.Message = body.Error.Code, body.Error.Message
		}
		return e
	}
	if rep == nil {
		return nil
	}
	if err := json.Unmarshal(m.Data, rep); err != nil {
		return fmt.Errorf("ops: decode %s reply: %w", subject, err)
	}
	return nil
}

// Digest is the JSON of <prefix>.advisory.digest: what arrived in DEAD
// (dead letters and manual reviews) since the previous digest, counted by
// account, kind and reason, and what is still open.
type Digest struct {
	// From and To bound the period: arrivals after From up to To.
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// Total is how many entries arrived in the period.
	Total     int            `json:"total"`
	ByAccount map[string]int `json:"by_account"`
	ByKind    map[string]int `json:"by_kind"`
	ByReason  map[string]int `json:"by_reason"`
	// Rows count each account + kind + reason, largest first.
	Rows []DigestRow `json:"rows"`
	// OpenDead and OpenReview are what waits for an operator now.
	OpenDead   int `json:"open_dead"`
	OpenReview int `json:"open_review"`
}

// DigestRow is one account + kind + reason count of a Digest.
type DigestRow struct {
	Account string `json:"account"`
	Kind    string `json:"kind"`
	Reason  string `json:"reason"`
	Count   int    `json:"count"`
}
