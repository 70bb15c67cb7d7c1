package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/tenaz/tenaz/pkg/ops"
)

// The operators' actions on live accounts, events and breakers (the
// deadletter service's; each needs the operator credential and a reason,
// and records who acted).

// PauseAccount pauses an account's dispatch: no call of it is made until
// ResumeAccount (or req.Until, or req.For); its events wait.
func (c *Client) PauseAccount(ctx context.Context, req ops.PauseRequest) (ops.AccountReply, error) {
	var rep ops.AccountReply
	_, err := c.t.do(ctx, call{endpoint: ops.AccountsPause, natsBody: req,
		method: http.MethodPost, path: "/v1/accounts/" + url.PathEscape(req.Account) + "/pause", body: req, operator: true}, &rep)
	return rep, err
}

// ResumeAccount ends an operator's pause of an account (ErrNotPaused when
// there is none).
func (c *Client) ResumeAccount(ctx context.Context, account, reason string) (ops.AccountReply, error) {
	req := ops.ResumeRequest{Account: account, Reason: reason}
	var rep ops.AccountReply
	_, err := c.t.do(ctx, call{endpoint: ops.AccountsResume, natsBody: req,
		method: http.MethodPost, path: "/v1/accounts/" + url.PathEscape(account) + "/resume", body: req, operator: true}, &rep)
	return rep, err
}

// Pauses lists the accounts an operator's pause or an open breaker holds
// (with account, that account's dispatch, held or not).
func (c *Client) Pauses(ctx context.Context, account string) (ops.PausesReply, error) {
	q := url.Values{}
	if account != "" {
		q.Set("account", account)
	}
	var rep ops.PausesReply
	_, err := c.t.do(ctx, call{endpoint: ops.PausesList, natsBody: ops.PausesRequest{Account: account},
		method: http.MethodGet, path: "/v1/pauses", query: q, operator: true}, &rep)
	return rep, err
}

// RetryNow makes a retrying or scheduled event's next attempt now
// (ErrNotWaiting for an event in another state).
func (c *Client) RetryNow(ctx context.Context, id, reason string) (ops.EventReply, error) {
	return c.eventAction(ctx, ops.EventsRetry, "/retry", id, reason)
}

// CancelWait cancels an event awaiting its callback or polling; a later
// callback or poll answer is recorded as a no-op (ErrNotWaiting for an
// event in another state).
func (c *Client) CancelWait(ctx context.Context, id, reason string) (ops.EventReply, error) {
	return c.eventAction(ctx, ops.EventsCancel, "/cancel-wait", id, reason)
}

func (c *Client) eventAction(ctx context.Context, endpoint, suffix, id, reason string) (ops.EventReply, error) {
	req := ops.EventActionRequest{ID: id, Reason: reason}
	var rep ops.EventReply
	_, err := c.t.do(ctx, call{endpoint: endpoint, natsBody: req,
		method: http.MethodPost, path: "/v1/events/" + url.PathEscape(id) + suffix, body: req, operator: true}, &rep)
	return rep, err
}

// OpenBreaker opens account+target's breaker for every dispatcher replica
// until req.Until (or req.For from now): no call of the account to the
// target before then.
func (c *Client) OpenBreaker(ctx context.Context, req ops.OpenBreakerRequest) (ops.BreakerItem, error) {
	var rep ops.BreakerItem
	_, err := c.t.do(ctx, call{endpoint: ops.BreakersOpen, natsBody: req,
		method: http.MethodPost, path: "/v1/breakers/" + url.PathEscape(req.Account) + "/" + url.PathEscape(req.Target) + "/open", body: req, operator: true}, &rep)
	return rep, err
}

// Actions reads the audit of operator actions on accounts and breakers,
// newest first.
func (c *Client) Actions(ctx context.Context, req ops.ActionsRequest) (ops.ActionsReply, error) {
	q := url.Values{}
	if req.Account != "" {
		q.Set("account", req.Account)
	}
	if req.Limit != 0 {
		q.Set("limit", strconv.Itoa(req.Limit))
	}
	var rep ops.ActionsReply
	_, err := c.t.do(ctx, call{endpoint: ops.ActionsList, natsBody: req,
		method: http.MethodGet, path: "/v1/actions", query: q, operator: true}, &rep)
	return rep, err
}
