package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/ops"
)

// Client calls one tenaz deployment, over NATS (NewNATS) or HTTP
// (NewHTTP). Every method does one call, bounded by its ctx; it is safe
// for concurrent use.
type Client struct {
	t transport
	o options
}

// options are the settings of a Client.
type options struct {
	prefix      string
	apiKey      string
	operatorKey string
	httpClient  *http.Client
}

// Option sets something of a Client.
type Option func(*options)

// WithPrefix is the subject prefix of the deployment (its config key
// prefix). NATS only; defaults to "tenaz".
func WithPrefix(prefix string) Option { return func(o *options) { o.prefix = prefix } }

// WithAPIKey sends key ("Authorization: Bearer <key>") with submissions
// and reads. HTTP only: over NATS, the connection's permissions decide.
func WithAPIKey(key string) Option { return func(o *options) { o.apiKey = key } }

// WithOperatorKey sends key ("Authorization: Bearer <key>", one of
// auth.operators) with the operator calls: Cancel, the dead letters,
// reviews and breakers. It is sent to nothing else, since whoever answers
// a subject reads the request's headers.
func WithOperatorKey(key string) Option { return func(o *options) { o.operatorKey = key } }

// WithHTTPClient makes the calls of an HTTP Client with hc. Defaults to
// a client without a timeout of its own (each call's ctx bounds it).
func WithHTTPClient(hc *http.Client) Option { return func(o *options) { o.httpClient = hc } }

func newOptions(opts []Option) options {
	o := options{prefix: names.DefaultPrefix, httpClient: &http.Client{}}
	for _, f := range opts {
		f(&o)
	}
	if o.prefix == "" {
		o.prefix = names.DefaultPrefix
	}
	return o
}

// NewNATS is a Client that calls tenaz's micro endpoints
// (<prefix>.api.…) on nc. Closing nc is the caller's business.
func NewNATS(nc *nats.Conn, opts ...Option) *Client {
	o := newOptions(opts)
	return &Client{t: &natsTransport{nc: nc, o: o}, o: o}
}

// NewHTTP is a Client of tenaz's HTTP API at baseURL
// ("http://localhost:8080"; a path is kept as a prefix of every route).
func NewHTTP(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: base URL %q: want http(s)://host[:port]", baseURL)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	o := newOptions(opts)
	return &Client{t: &httpTransport{base: u, o: o}, o: o}, nil
}

// call is one request, as each transport sends it.
type call struct {
	// endpoint is the NATS endpoint under <prefix>.api. ("ingest.get", ops.DeadList).
	endpoint string
	// natsBody is the NATS request: []byte as is, anything else as JSON.
	natsBody any
	// method, path, query and body are the HTTP request (body nil: none).
	method, path string
	query        url.Values
	body         any
	// header is sent with the HTTP request as well.
	header http.Header
	// operator marks a call that needs the operator credential.
	operator bool
}

// transport sends a call and decodes a good answer into out (unless nil),
// returning its status (200, 202, …). An error answer is an *Error.
type transport interface {
	do(ctx context.Context, c call, out any) (status int, err error)
}

// SubmitOption sets something of one submission.
type SubmitOption func(*submitOptions)

type submitOptions struct{ key string }

// IdempotencyKey submits under key: a submission with a key tenaz has
// seen answers the event it made then (Receipt.Duplicate). Without one,
// tenaz derives the key from kind, entity and payload.
func IdempotencyKey(key string) SubmitOption { return func(o *submitOptions) { o.key = key } }

// Receipt is tenaz's answer to a submission.
type Receipt struct {
	event.View
	// Duplicate is true when the idempotency key named an event tenaz
	// already had: View is that event, and nothing new was submitted.
	Duplicate bool
}

// Submit submits an event. It returns once tenaz has stored it (status
// "accepted", "pending" or "scheduled"); Wait follows it to its outcome.
func (c *Client) Submit(ctx context.Context, sub event.Submission, opts ...SubmitOption) (Receipt, error) {
	var so submitOptions
	for _, f := range opts {
		f(&so)
	}
	// Over NATS, to the account's own endpoint, which permissions can
	// grant per account (a name that is no subject token goes to the
	// plain endpoint, which refuses it as POST /v1/events does).
	endpoint := "ingest.submit"
	if names.ValidateAccount(sub.Account) == nil {
		endpoint += "." + sub.Account
	}
	cl := call{endpoint: endpoint, natsBody: event.SubmitRequest{Submission: sub, IdempotencyKey: so.key},
		method: http.MethodPost, path: "/v1/events", body: sub}
	if so.key != "" {
		cl.header = http.Header{names.HeaderIdempotencyKey: {so.key}}
	}
	var r Receipt
	status, err := c.t.do(ctx, cl, &r.View)
	r.Duplicate = status == http.StatusOK
	return r, err
}

// Get reads an event's status.
func (c *Client) Get(ctx context.Context, id string) (event.View, error) {
	var v event.View
	_, err := c.t.do(ctx, call{endpoint: "ingest.get", natsBody: []byte(id),
		method: http.MethodGet, path: "/v1/events/" + url.PathEscape(id)}, &v)
	return v, err
}

// History reads everything that happened to an event, in order.
func (c *Client) History(ctx context.Context, id string) (event.HistoryView, error) {
	var h event.HistoryView
	_, err := c.t.do(ctx, call{endpoint: "ingest.history", natsBody: []byte(id),
		method: http.MethodGet, path: "/v1/events/" + url.PathEscape(id) + "/history"}, &h)
	return h, err
}

// Cancel cancels a scheduled, pending or retrying event (ErrNotCancellable
// otherwise) and returns it. reason is recorded in its history over NATS;
// the HTTP API records "cancelled by caller".
func (c *Client) Cancel(ctx context.Context, id, reason string) (event.View, error) {
	var v event.View
	_, err := c.t.do(ctx, call{endpoint: "ingest.cancel", natsBody: event.CancelRequest{ID: id, Reason: reason},
		method: http.MethodDelete, path: "/v1/events/" + url.PathEscape(id), operator: true}, &v)
	return v, err
}

// ListDead lists one page of dead letters, newest first.
func (c *Client) ListDead(ctx context.Context, req ops.ListRequest) (ops.ListReply, error) {
	return c.list(ctx, ops.DeadList, "/v1/dead", req)
}

// ListReview lists one page of the events waiting for manual review.
func (c *Client) ListReview(ctx context.Context, req ops.ListRequest) (ops.ListReply, error) {
	return c.list(ctx, ops.ReviewList, "/v1/review", req)
}

func (c *Client) list(ctx context.Context, endpoint, path string, req ops.ListRequest) (ops.ListReply, error) {
	q := url.Values{}
	for k, v := range map[string]string{"account": req.Account, "kind": req.Kind, "class": req.Class, "reason": req.Reason, "cursor": req.Cursor} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if req.Since != nil {
		q.Set("since", req.Since.UTC().Format(time.RFC3339))
	}
	if req.Until != nil {
		q.Set("until", req.Until.UTC().Format(time.RFC3339))
	}
	if req.Limit != 0 {
		q.Set("limit", strconv.Itoa(req.Limit))
	}
	var rep ops.ListReply
	_, err := c.t.do(ctx, call{endpoint: endpoint, natsBody: req, method: http.MethodGet, path: path, query: q, operator: true}, &rep)
	return rep, err
}

// ShowDead reads one dead letter (or review) in full: its payload, last
// error and the event's record with its timeline.
func (c *Client) ShowDead(ctx context.Context, req ops.ShowRequest) (ops.ShowReply, error) {
	ref := req.ID
	if req.Seq != 0 {
		ref = "seq_" + strconv.FormatUint(req.Seq, 10)
	}
	var rep ops.ShowReply
	_, err := c.t.do(ctx, call{endpoint: ops.DeadShow, natsBody: req,
		method: http.MethodGet, path: "/v1/dead/" + url.PathEscape(ref), operator: true}, &rep)
	return rep, err
}

// Replay replays dead or reviewed events: req.IDs at once (the reply
// counts them), or every dead letter matching req.Filter as a background
// job (the reply has its JobID; ReplayJob reads its progress).
func (c *Client) Replay(ctx context.Context, req ops.ReplayRequest) (ops.ReplayReply, error) {
	var rep ops.ReplayReply
	_, err := c.t.do(ctx, call{endpoint: ops.DeadReplay, natsBody: req,
		method: http.MethodPost, path: "/v1/dead/replay", body: req, operator: true}, &rep)
	return rep, err
}

// ReplayJob reads a replay job's progress.
func (c *Client) ReplayJob(ctx context.Context, jobID string) (ops.JobReply, error) {
	var rep ops.JobReply
	_, err := c.t.do(ctx, call{endpoint: ops.DeadJob, natsBody: ops.JobRequest{JobID: jobID},
		method: http.MethodGet, path: "/v1/dead/jobs/" + url.PathEscape(jobID), operator: true}, &rep)
	return rep, err
}

// CancelReplayJob stops a running replay job, saying why: its runner
// leaves it within a third of its lease; what it replayed stays replayed.
func (c *Client) CancelReplayJob(ctx context.Context, jobID, reason string) (ops.JobReply, error) {
	var rep ops.JobReply
	req := ops.JobCancelRequest{JobID: jobID, Reason: reason}
	_, err := c.t.do(ctx, call{endpoint: ops.DeadJobCancel, natsBody: req,
		method: http.MethodPost, path: "/v1/dead/jobs/" + url.PathEscape(jobID) + "/cancel", body: req, operator: true}, &rep)
	return rep, err
}

// Discard discards dead or reviewed events with a reason: they become
// cancelled.
func (c *Client) Discard(ctx context.Context, req ops.DiscardRequest) (ops.ActionReply, error) {
	var rep ops.ActionReply
	_, err := c.t.do(ctx, call{endpoint: ops.DeadDiscard, natsBody: req,
		method: http.MethodPost, path: "/v1/dead/discard", body: req, operator: true}, &rep)
	return rep, err
}

// Resolve decides a manual review (or a dead letter): ops.OutcomeDone
// with req.Result, OutcomeDiscard, or a requeue to a stage.
func (c *Client) Resolve(ctx context.Context, req ops.ResolveRequest) (ops.ActionReply, error) {
	var rep ops.ActionReply
	_, err := c.t.do(ctx, call{endpoint: ops.ReviewResolve, natsBody: req,
		method: http.MethodPost, path: "/v1/review/" + url.PathEscape(req.ID) + "/resolve", body: req, operator: true}, &rep)
	return rep, err
}

// ListBreakers lists the circuit breakers (of one account unless "")
// with their shared state.
func (c *Client) ListBreakers(ctx context.Context, account string) (ops.BreakersReply, error) {
	q := url.Values{}
	if account != "" {
		q.Set("account", account)
	}
	var rep ops.BreakersReply
	_, err := c.t.do(ctx, call{endpoint: ops.BreakersList, natsBody: ops.BreakersRequest{Account: account},
		method: http.MethodGet, path: "/v1/breakers", query: q, operator: true}, &rep)
	return rep, err
}

// CloseBreaker closes account+target's breaker for every dispatcher
// replica (the target is back); reason, why, is recorded in the audit.
func (c *Client) CloseBreaker(ctx context.Context, account, target, reason string) (ops.BreakerItem, error) {
	req := ops.CloseBreakerRequest{Account: account, Target: target, Reason: reason}
	var rep ops.BreakerItem
	_, err := c.t.do(ctx, call{endpoint: ops.BreakersClose, natsBody: req,
		method: http.MethodPost, path: "/v1/breakers/" + url.PathEscape(account) + "/" + url.PathEscape(target) + "/close", body: req, operator: true}, &rep)
	return rep, err
}

// ctxError is the error of a call that ctx ended: a deadline is "no
// answer in time" (ErrUnavailable), a cancel is the caller's own.
func ctxError(op string, err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return &transportError{op: op, msg: "no answer in time", err: err}
	}
	return fmt.Errorf("%s: %w", op, err)
}
