package auth

import (
	"encoding/json"
	"strconv"

	"github.com/nats-io/nats.go/micro"

	"github.com/tenaz/tenaz/pkg/ops"
)

// OperatorOnly wraps the handler of a NATS micro endpoint that only an
// operator may call: the credential in the request's Authorization
// header must be the operator's (RequireOperator; anyone's with auth
// disabled or a nil a). A refusal is answered as over HTTP, 401 or 403
// with the API's error body, the status as Nats-Service-Error-Code.
// NATS permissions alone do not do: under `tenaz run` every client
// shares one connection's rights.
func (a *Authenticator) OperatorOnly(h micro.Handler) micro.Handler {
	return micro.HandlerFunc(func(r micro.Request) {
		if _, err := a.RequireOperator(r.Headers().Get(ops.AuthorizationHeader)); err != nil {
			status, code, msg := Refusal(err)
			body, _ := json.Marshal(ops.ErrorBody{Error: ops.ErrorDetail{Code: code, Message: msg}})
			_ = r.Error(strconv.Itoa(status), msg, body)
			return
		}
		h.Handle(r)
	})
}
