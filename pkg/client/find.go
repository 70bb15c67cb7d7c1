package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/tenaz/tenaz/pkg/ops"
)

// Find searches the events tenaz holds (any state) by account, kind,
// state, entity, idempotency key, provider reference and creation time:
// one page, whose NextCursor (set as req.Cursor) fetches the next. An API
// key finds only its own account's events (naming another account is
// ErrForbidden); an operator key any account's.
func (c *Client) Find(ctx context.Context, req ops.FindRequest) (ops.FindReply, error) {
	q := url.Values{}
	for k, v := range map[string]string{"account": req.Account, "kind": req.Kind, "state": string(req.State), "entity": req.EntityID,
		"idempotency_key": req.IdempotencyKey, "provider_ref": req.ProviderRef, "cursor": req.Cursor} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if req.Since != nil {
		q.Set("since", req.Since.UTC().Format(time.RFC3339Nano))
	}
	if req.Until != nil {
		q.Set("until", req.Until.UTC().Format(time.RFC3339Nano))
	}
	if req.Limit != 0 {
		q.Set("limit", strconv.Itoa(req.Limit))
	}
	var rep ops.FindReply
	_, err := c.t.do(ctx, call{endpoint: ops.EventsFind, natsBody: req, method: http.MethodGet, path: "/v1/events", query: q, operator: true}, &rep)
	return rep, err
}
