package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/tenaz/tenaz/pkg/ops"
)

// statusHeader carries the HTTP status of an ingest endpoint's answer.
const statusHeader = "Tenaz-Status"

// natsTransport requests <prefix>.api.<endpoint>.
type natsTransport struct {
	nc *nats.Conn
	o  options
}

func (t *natsTransport) do(ctx context.Context, c call, out any) (int, error) {
	subj := ops.Subject(t.o.prefix, c.endpoint)
	data, ok := c.natsBody.([]byte)
	if !ok {
		var err error
		if data, err = json.Marshal(c.natsBody); err != nil {
			return 0, fmt.Errorf("%s: encode request: %w", subj, err)
		}
	}
	msg := nats.NewMsg(subj)
	msg.Data = data
	if c.operator && t.o.operatorKey != "" {
		msg.Header.Set(ops.AuthorizationHeader, "Bearer "+t.o.operatorKey)
	}
	m, err := t.nc.RequestMsgWithContext(ctx, msg)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return 0, &transportError{op: subj, err: err,
			msg: fmt.Sprintf("nothing answers at %s: is tenaz (or the service) running, with prefix %q?", t.nc.ConnectedUrlRedacted(), t.o.prefix)}
	case errors.Is(err, nats.ErrTimeout):
		return 0, &transportError{op: subj, msg: "no answer in time", err: err}
	case errors.Is(err, nats.ErrConnectionClosed):
		return 0, &transportError{op: subj, msg: "the NATS connection is closed", err: err}
	case ctx.Err() != nil:
		return 0, ctxError(subj, ctx.Err())
	case err != nil:
		return 0, fmt.Errorf("%s: %w", subj, err)
	}
	status, err := strconv.Atoi(m.Header.Get(statusHeader))
	if err != nil {
		status = 0 // the deadletter endpoints answer errors the micro way only
	}
	if e := natsError(subj, m, status); e != nil {
		return e.Status, e
	}
	if status == 0 {
		status = http.StatusOK
	}
	if out != nil {
		if err := json.Unmarshal(m.Data, out); err != nil {
			return status, fmt.Errorf("%s: unexpected answer %q: %w", subj, short(string(m.Data), 200), err)
		}
	}
	return status, nil
}

// natsError reads an error answer: a micro error (Nats-Service-Error and
// -Code headers) or a status of 400 or more, each with the HTTP API's
// {error: {code, message}} body. nil for a good answer.
func natsError(subj string, m *nats.Msg, status int) *Error {
	var body ops.ErrorBody
	_ = json.Unmarshal(m.Data, &body)
	code := m.Header.Get(micro.ErrorCodeHeader)
	if code == "" && status < 400 {
		return nil
	}
	e := &Error{Op: subj, Status: status, Code: Code(body.Error.Code), Message: body.Error.Message}
	if code != "" {
		if n, err := strconv.Atoi(code); err == nil {
			e.Status = n
		} else if e.Code == "" {
			e.Code = Code(code)
		}
		if msg := m.Header.Get(micro.ErrorHeader); e.Message == "" {
			e.Message = msg
		}
	}
	return e
}

// short shortens s to n runes for an error message.
func short(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
