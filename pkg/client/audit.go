package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/tenaz/tenaz/pkg/ops"
)

// ErrHTTPOnly is the error of a call that only tenaz's HTTP API serves,
// made on a Client of NewNATS.
var ErrHTTPOnly = errors.New("client: only over HTTP (NewHTTP)")

// EntityTimeline is everything the audit archive holds about one business
// entity of an account (the entity id the events were submitted with):
// its events, each step of their histories and the operator actions on
// the account while they ran, in order; also once streams.retention has
// expired the events' records. An API key reads its own account's only.
func (c *Client) EntityTimeline(ctx context.Context, account, entity string) (ops.TimelineReply, error) {
	var rep ops.TimelineReply
	_, err := c.t.do(ctx, call{endpoint: ops.EntitiesTimeline, natsBody: ops.TimelineRequest{Account: account, EntityID: entity},
		method: http.MethodGet, path: "/v1/entities/" + url.PathEscape(account) + "/" + url.PathEscape(entity) + "/timeline", operator: true}, &rep)
	return rep, err
}

// ExportAudit streams the audit entries req selects (GET /v1/audit/export)
// to fn, one at a time, in the order they were archived, and returns how
// many it read. HTTP only. An error of fn stops the export and is returned.
func (c *Client) ExportAudit(ctx context.Context, req ops.ExportRequest, fn func(ops.AuditEntry) error) (int, error) {
	t, ok := c.t.(*httpTransport)
	if !ok {
		return 0, ErrHTTPOnly
	}
	q := url.Values{}
	for k, v := range map[string]*time.Time{"since": req.Since, "until": req.Until} {
		if v != nil {
			q.Set(k, v.UTC().Format(time.RFC3339Nano))
		}
	}
	if req.Account != "" {
		q.Set("account", req.Account)
	}
	if req.EventID != "" {
		q.Set("event", req.EventID)
	}
	n := 0
	err := t.stream(ctx, call{method: http.MethodGet, path: "/v1/audit/export", query: q, operator: true}, func(line []byte) error {
		var probe struct {
			Error *ops.ErrorDetail `json:"error"`
		}
		if json.Unmarshal(line, &probe) == nil && probe.Error != nil {
			return &Error{Op: "GET /v1/audit/export", Status: http.StatusInternalServerError, Code: Code(probe.Error.Code), Message: probe.Error.Message}
		}
		var e ops.AuditEntry
		if err := json.Unmarshal(line, &e); err != nil {
			return fmt.Errorf("GET /v1/audit/export: line %d: %w", n+1, err)
		}
		n++
		return fn(e)
	})
	return n, err
}

// stream sends a GET whose good answer is JSON Lines and calls fn with
// each line; an error answer is an *Error, as for do.
func (t *httpTransport) stream(ctx context.Context, c call, fn func([]byte) error) error {
	op := c.method + " " + c.path
	req, err := http.NewRequestWithContext(ctx, c.method, t.urlOf(c), nil)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	req.Header.Set("Accept", "application/x-ndjson")
	if key := t.credential(c.operator); key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := t.o.httpClient.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctxError(op, ctx.Err())
		}
		return &transportError{op: op, msg: fmt.Sprintf("cannot reach tenaz at %s: %v", t.base.Redacted(), errors.Unwrap(err)), err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
		var eb ops.ErrorBody
		_ = json.Unmarshal(b, &eb)
		return &Error{Op: op, Status: resp.StatusCode, Code: Code(eb.Error.Code), Message: eb.Error.Message}
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		if len(sc.Bytes()) == 0 {
			continue
		}
		if err := fn(sc.Bytes()); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		if ctx.Err() != nil {
			return ctxError(op, ctx.Err())
		}
		return &transportError{op: op, msg: "reading the answer: " + err.Error(), err: err}
	}
	return nil
}
