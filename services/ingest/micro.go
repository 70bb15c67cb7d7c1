package ingest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/micro"

	"github.com/tenaz/tenaz/pkg/auth"
	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/httpapi"
	"github.com/tenaz/tenaz/pkg/metrics"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/pkg/tracing"
)

// Name is ingest's name: its process's, its NATS connection's (whose
// replies come under natsconn.InboxPrefix(Name)) and its micro service's.
const Name = "tenaz-ingest"

// Version is reported by the micro service: the build's version, the
// same for every tenaz service (metrics.BuildInfo.SemVer).
var Version = metrics.Build().SemVer()

// registerMicro registers tenaz-ingest with endpoints submit, get, history,
// cancel and the repeats' (repeat.go) under <prefix>.api.ingest. Each answers what the HTTP API answers
// (the body) with the HTTP status in the Tenaz-Status header; a status of
// 400 or more is also a micro error (see reply).
func (s *Service) registerMicro() (micro.Service, error) {
	svc, err := micro.AddService(s.nc, micro.Config{
		Name: Name, Version: Version,
		Description: "Accepts events and answers their status",
		QueueGroup:  Name,
		// Every endpoint's stats carry the same essentials as /metrics.
		StatsHandler: s.metrics.StatsHandler,
	})
	if err != nil {
		return nil, err
	}
	g := svc.AddGroup(s.cfg.Prefix + ".api.ingest")
	add := func(name string, h micro.HandlerFunc) error { return g.AddEndpoint(name, h) }
	if err := add("submit", func(req micro.Request) { s.microSubmit(req, "") }); err != nil {
		return nil, err
	}
	// submit.<account> takes that account's submissions only, so that NATS
	// permissions can bind a user (a producer's outbox relay) to its
	// account, as tenaz.intake.<account>.> does; plain submit takes any.
	if err := g.AddEndpoint("submit-account", micro.HandlerFunc(func(req micro.Request) {
		s.microSubmit(req, req.Subject()[strings.LastIndexByte(req.Subject(), '.')+1:])
	}), micro.WithEndpointSubject("submit.*")); err != nil {
		return nil, err
	}
	for _, ep := range []struct {
		name string
		h    http.HandlerFunc
	}{{"get", s.handleGet}, {"history", s.handleHistory}} {
		h := ep.h
		if err := add(ep.name, func(req micro.Request) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.Host = ""
			r.SetPathValue("id", string(req.Data()))
			rec := httptest.NewRecorder()
			h(rec, r)
			reply(req, rec.Code, rec.Body.Bytes())
		}); err != nil {
			return nil, err
		}
	}
	if err := add("cancel", s.microCancel); err != nil {
		return nil, err
	}
	if err := s.addRepeatEndpoints(add); err != nil {
		return nil, err
	}
	// Once Start returns, the server routes requests to the endpoints.
	if err := s.nc.Flush(); err != nil {
		_ = svc.Stop()
		return nil, err
	}
	return svc, nil
}

// microSubmit answers a submission as POST /v1/events does. With account
// set (the subject's), the submission must be that account's; one that
// names no account is.
func (s *Service) microSubmit(req micro.Request, account string) {
	if name := givenTwice(req.Headers()); name != "" {
		s.metrics.Rejected("malformed")
		respond(req, http.StatusBadRequest, httpapi.ErrorBody{Error: httpapi.ErrorDetail{Code: "malformed", Message: "the " + name + " header is given twice, with different values: send one"}})
		return
	}
	if s.microCloudEvent(req, account) {
		return
	}
	ms, err := event.ParseSubmitRequest(req.Data())
	if err != nil {
		s.metrics.Rejected("malformed")
		respond(req, http.StatusBadRequest, httpapi.ErrorBody{Error: httpapi.ErrorDetail{Code: "malformed", Message: err.Error() + ": want {account, kind, payload, entity_id?, ordering_key?, not_before?, idempotency_key?}"}})
		return
	}
	if msg := fieldsFromHeaders(req.Headers(), append(headerFields(&ms.Submission), headerField{names.HeaderIdempotencyKey, "idempotency_key", &ms.IdempotencyKey})); msg != "" {
		s.metrics.Rejected("malformed")
		respond(req, http.StatusBadRequest, httpapi.ErrorBody{Error: httpapi.ErrorDetail{Code: "malformed", Message: msg}})
		return
	}
	if account != "" {
		if ms.Account == "" {
			ms.Account = account
		}
		if ms.Account != account {
			s.metrics.Rejected("forbidden")
			respond(req, http.StatusForbidden, httpapi.ErrorBody{Error: httpapi.ErrorDetail{Code: "forbidden",
				Message: fmt.Sprintf("a submission of account %q sent to the submit endpoint of account %q", ms.Account, account)}})
			return
		}
	}
	f := event.Fields{Account: ms.Account, Kind: ms.Kind, EntityID: ms.EntityID, OrderingKey: ms.OrderingKey, NotBefore: ms.NotBefore, IdempotencyKey: ms.IdempotencyKey,
		Traceparent: tracing.From(req.Headers().Get)}
	r := httptest.NewRequest(http.MethodPost, "/v1/events", nil)
	r.Host = "" // over NATS: status_url is the path alone, or under http.public_url
	status, v := s.submit(r, f, ms.Payload)
	respond(req, status, v)
}

// CancelRequest is the request of the cancel endpoint (see event.CancelRequest).
type CancelRequest = event.CancelRequest

// microCancel answers what DELETE /v1/events/{id} answers: 200 and the
// cancelled event, 404, or 409 not_cancellable. Like the operator's other
// endpoints it needs the operator credential in the Authorization header
// (401 without a valid one, 403 for an API key), which is the actor it
// records ("operator:alice"; "anonymous" with auth disabled).
func (s *Service) microCancel(req micro.Request) {
	p, err := s.o.Auth.RequireOperator(req.Headers().Get(ops.AuthorizationHeader))
	if err != nil {
		status, code, msg := auth.Refusal(err)
		respond(req, status, httpapi.ErrorBody{Error: httpapi.ErrorDetail{Code: code, Message: msg}})
		return
	}
	cr := CancelRequest{ID: string(req.Data())}
	if d := req.Data(); len(d) > 0 && d[0] == '{' {
		cr = CancelRequest{}
		// An "actor" field is refused, not silently ignored.
		if err := event.DecodeStrict("request", d, &cr); err != nil {
			respond(req, http.StatusBadRequest, httpapi.ErrorBody{Error: httpapi.ErrorDetail{Code: "malformed", Message: "want an event id or {id, reason?}: " + err.Error()}})
			return
		}
	}
	if cr.Reason == "" {
		cr.Reason = "cancelled by caller"
	}
	r := httptest.NewRequest(http.MethodDelete, "/", nil)
	r.Host = "" // over NATS: status_url is the path alone, or under http.public_url
	r.SetPathValue("id", cr.ID)
	w := httptest.NewRecorder()
	rec, ok := s.lookup(w, r)
	if !ok {
		reply(req, w.Code, w.Body.Bytes())
		return
	}
	next, cerr := s.cancelEvent(r.Context(), rec, p.String(), cr.Reason)
	if cerr != nil {
		respond(req, cerr.status, httpapi.ErrorBody{Error: cerr.ErrorDetail})
		return
	}
	respond(req, http.StatusOK, viewOf(next, s.statusURL(r, next.ID)))
}

// respond answers req with v as JSON (see reply).
func respond(req micro.Request, status int, v any) {
	b, _ := json.Marshal(v)
	reply(req, status, b)
}

// reply answers req with body and the HTTP status in Tenaz-Status. A
// status of 400 or more is answered the micro way as well: the status as
// Nats-Service-Error-Code and the body's message as Nats-Service-Error,
// so that micro clients see an error and the endpoint's stats
// (`nats micro stats`) count it; the body is the HTTP API's ErrorBody
// either way.
func reply(req micro.Request, status int, body []byte) {
	h := micro.WithHeaders(micro.Headers{"Tenaz-Status": []string{strconv.Itoa(status)}})
	if status < http.StatusBadRequest {
		if err := req.Respond(body, h); err != nil {
			// Most often an answer over the server's max_payload (an
			// event's payload and history): unanswered, the caller would
			// only see its timeout.
			b, _ := json.Marshal(httpapi.ErrorBody{Error: httpapi.ErrorDetail{Code: "answer_not_sent", Message: "the answer could not be sent (" + err.Error() + "): use the HTTP API"}})
			reply(req, http.StatusInternalServerError, b)
		}
		return
	}
	_ = req.Error(strconv.Itoa(status), errorMessage(status, body), body, h)
}

// errorMessage is the message of an ErrorBody, on one line (it travels in
// a header), else the status text: micro refuses an empty description.
func errorMessage(status int, body []byte) string {
	var e httpapi.ErrorBody
	msg := ""
	if json.Unmarshal(body, &e) == nil {
		msg = strings.Join(strings.Fields(e.Error.Message), " ")
	}
	if msg == "" {
		msg = http.StatusText(status)
	}
	if msg == "" {
		msg = "status " + strconv.Itoa(status)
	}
	return msg
}
