package cli

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

// OperatorKeyEnv names the environment variable that holds the operator
// key (auth.operators) the commands send as "Authorization: Bearer <key>"
// to tenaz's operator endpoints. There is no flag: a key on the command
// line shows in ps and in shell history.
const OperatorKeyEnv = "TENAZ_OPERATOR_KEY"

// operatorEndpoints need the operator credential: every endpoint of
// tenaz-deadletter (pkg/ops) and ingest's cancel. The key is sent to them
// only, since whoever answers a subject reads the request's headers.
var operatorEndpoints = map[string]bool{
	ops.DeadList: true, ops.DeadShow: true, ops.DeadReplay: true, ops.DeadDiscard: true, ops.DeadJob: true,
	ops.ReviewList: true, ops.ReviewResolve: true, ops.BreakersList: true, ops.BreakersClose: true,
	"ingest.cancel": true,
}

// request sends req (raw if []byte, else JSON) to <prefix>.api.<endpoint>,
// turns error answers into *RemoteError and decodes a good answer into out
// (unless out is nil). It returns the raw answer too.
func (s *session) request(endpoint string, req, out any) ([]byte, error) {
	ctx, cancel := s.ctx()
	defer cancel()
	return s.requestCtx(ctx, endpoint, req, out)
}

func (s *session) requestCtx(ctx context.Context, endpoint string, req, out any) ([]byte, error) {
	subj := s.subject(endpoint)
	data, ok := req.([]byte)
	if !ok {
		var err error
		if data, err = json.Marshal(req); err != nil {
			return nil, fmt.Errorf("%s: encode request: %w", subj, err)
		}
	}
	msg := nats.NewMsg(subj)
	msg.Data = data
	if key := s.env.Getenv(OperatorKeyEnv); key != "" && operatorEndpoints[endpoint] {
		msg.Header.Set(ops.AuthorizationHeader, "Bearer "+key)
	}
	m, err := s.nc.RequestMsgWithContext(ctx, msg)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return nil, failf(ErrUnavailable, "nothing answers on %s at %s: is tenaz (or the service) running, with prefix %q?", subj, s.set.URL, s.c.Prefix)
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
		return nil, failf(ErrUnavailable, "no answer on %s within %s", subj, s.c.Timeout)
	case err != nil:
		return nil, fmt.Errorf("%s: %w", subj, err)
	}
	if rerr := remoteError(subj, m); rerr != nil {
		if rerr.Status == http.StatusUnauthorized {
			rerr.Message += "; set " + OperatorKeyEnv + " to your operator key (auth.operators)"
		}
		return m.Data, rerr
	}
	if out != nil {
		if err := json.Unmarshal(m.Data, out); err != nil {
			return m.Data, fmt.Errorf("%s: unexpected answer %q: %w", subj, short(string(m.Data), 200), err)
		}
	}
	return m.Data, nil
}

// remoteError reads an error answer: a micro error (Nats-Service-Error
// and -Code headers) or a Tenaz-Status of 400 or more with the HTTP API's
// {error: {code, message}} body. nil for a good answer.
func remoteError(subj string, m *nats.Msg) *RemoteError {
	var body struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	_ = json.Unmarshal(m.Data, &body)
	if code := m.Header.Get(micro.ErrorCodeHeader); code != "" {
		e := &RemoteError{Subject: subj, Code: code, Message: m.Header.Get(micro.ErrorHeader)}
		e.Status, _ = strconv.Atoi(code)
		if body.Error.Code != "" {
			e.Code = body.Error.Code
		}
		if e.Message == "" {
			e.Message = body.Error.Message
		}
		if e.Status == 0 {
			e.Status = statusOfCode(code)
		}
		return e
	}
	if st, err := strconv.Atoi(m.Header.Get("Tenaz-Status")); err == nil && st >= 400 {
		return &RemoteError{Subject: subj, Status: st, Code: body.Error.Code, Message: body.Error.Message}
	}
	return nil
}

// statusOfCode reads a non-numeric micro error code.
func statusOfCode(code string) int {
	switch code {
	case "not_found":
		return 404
	case "conflict", "not_cancellable", "running":
		return 409
	case "bad_request", "invalid", "malformed":
		return 400
	case "unavailable", "timeout":
		return 503
	}
	return 0
}
