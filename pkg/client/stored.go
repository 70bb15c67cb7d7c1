package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"

	"github.com/tenaz/tenaz/pkg/ops"
)

// The config in force and the accounts bucket: accounts added, changed
// and removed without a deploy (the deadletter service's; each needs the
// operator credential, and setting or removing a reason).

// SetAccount adds account to the accounts bucket, or replaces its
// definition there: an accounts.<account> entry of tenaz.yaml as JSON
// with a "keys" member of auth.keys entries (ops.StoredSetRequest). A
// definition that does not fit the config is refused with every key at
// fault (an *Error with status 422, code "invalid_config").
func (c *Client) SetAccount(ctx context.Context, account string, definition json.RawMessage, reason string) (ops.StoredAccount, error) {
	req := ops.StoredSetRequest{Account: account, Definition: definition, Reason: reason}
	var rep ops.StoredAccount
	_, err := c.t.do(ctx, call{endpoint: ops.StoredSet, natsBody: req,
		method: http.MethodPut, path: "/v1/config/accounts/" + url.PathEscape(account), body: req, operator: true}, &rep)
	return rep, err
}

// StoredAccounts lists the accounts of the accounts bucket (or just
// account), every header value redacted.
func (c *Client) StoredAccounts(ctx context.Context, account string) (ops.StoredListReply, error) {
	q := url.Values{}
	if account != "" {
		q.Set("account", account)
	}
	var rep ops.StoredListReply
	_, err := c.t.do(ctx, call{endpoint: ops.StoredList, natsBody: ops.StoredListRequest{Account: account},
		method: http.MethodGet, path: "/v1/config/accounts", query: q, operator: true}, &rep)
	return rep, err
}

// RemoveAccount removes account from the accounts bucket (an *Error with
// status 404 when it holds none) and returns it as it was.
func (c *Client) RemoveAccount(ctx context.Context, account, reason string) (ops.StoredAccount, error) {
	req := ops.StoredRemoveRequest{Account: account, Reason: reason}
	var rep ops.StoredAccount
	_, err := c.t.do(ctx, call{endpoint: ops.StoredRemove, natsBody: req,
		method: http.MethodDelete, path: "/v1/config/accounts/" + url.PathEscape(account), body: req, operator: true}, &rep)
	return rep, err
}

// ConfigStatus is the config in force in the service that answers and
// how its last reload went.
func (c *Client) ConfigStatus(ctx context.Context) (ops.ConfigStatus, error) {
	var rep ops.ConfigStatus
	_, err := c.t.do(ctx, call{endpoint: ops.ConfigShow, natsBody: struct{}{},
		method: http.MethodGet, path: "/v1/config", operator: true}, &rep)
	return rep, err
}
