package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/tenaz/tenaz/pkg/ops"
)

// maxAnswer bounds how much of an answer is read: a dead-letter page of
// 500 entries with their errors is far below it.
const maxAnswer = 64 << 20

// httpTransport calls the HTTP API under base.
type httpTransport struct {
	base *url.URL
	o    options
}

// urlOf is c's URL under base. c.path is escaped already (url.PathEscape
// of each free-form segment), so it is the URL's raw path: set as its
// path, it would be escaped again, and an entity "o/1" asked for as
// "o%252F1".
func (t *httpTransport) urlOf(c call) string {
	u := *t.base
	p, err := url.PathUnescape(c.path)
	if err != nil {
		p = c.path // not escaped by us: sent as written
	}
	u.Path, u.RawPath = t.base.Path+p, t.base.EscapedPath()+c.path
	u.RawQuery = c.query.Encode()
	return u.String()
}

func (t *httpTransport) do(ctx context.Context, c call, out any) (int, error) {
	op := c.method + " " + c.path
	var body io.Reader
	if c.body != nil {
		b, err := json.Marshal(c.body)
		if err != nil {
			return 0, fmt.Errorf("%s: encode request: %w", op, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, c.method, t.urlOf(c), body)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	for k, vs := range c.header {
		req.Header[k] = vs
	}
	if c.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if key := t.credential(c.operator); key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := t.o.httpClient.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return 0, ctxError(op, ctx.Err())
		}
		var ue *url.Error
		if errors.As(err, &ue) && ue.Timeout() {
			return 0, &transportError{op: op, msg: "no answer in time", err: err}
		}
		return 0, &transportError{op: op, msg: fmt.Sprintf("cannot reach tenaz at %s: %v", t.base.Redacted(), errors.Unwrap(err)), err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return resp.StatusCode, &transportError{op: op, msg: "reading the answer: " + err.Error(), err: err}
	}
	if resp.StatusCode >= 400 {
		var eb ops.ErrorBody
		_ = json.Unmarshal(b, &eb)
		e := &Error{Op: op, Status: resp.StatusCode, Code: Code(eb.Error.Code), Message: eb.Error.Message}
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s >= 0 {
			e.RetryAfter = time.Duration(s) * time.Second
		}
		return resp.StatusCode, e
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s: unexpected answer %q: %w", op, short(string(b), 200), err)
		}
	}
	return resp.StatusCode, nil
}

// credential is the key of a call: the operator key for operator calls,
// the API key for the others, each falling back to the other (an
// operator may read events, an API key with the operate scope may cancel).
func (t *httpTransport) credential(operator bool) string {
	if operator {
		return first(t.o.operatorKey, t.o.apiKey)
	}
	return first(t.o.apiKey, t.o.operatorKey)
}

func first(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}
