package deadletter

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/tenaz/tenaz/pkg/auth"
	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/metrics"
	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/pkg/state"
)

// microTimeout bounds one request's work.
const microTimeout = 30 * time.Second

// registerMicro registers tenaz-deadletter with the endpoints of pkg/ops
// on <prefix>.api.<name>, plus the old ping on <prefix>.api.deadletter.ping.
// Every pkg/ops endpoint needs the operator credential in the request's
// Authorization header (401 without a valid one, 403 for an API key); its
// principal, in the handler's context, is the actor of any action.
func (s *Service) registerMicro() (micro.Service, error) {
	m, err := micro.AddService(s.o.Conn, micro.Config{
		Name: ops.ServiceName, Version: Version,
		Description: "Dead letters, manual review, replay, breakers: the operator endpoints (see pkg/ops)",
		QueueGroup:  ops.ServiceName,
		// Every endpoint's stats carry the same essentials as /metrics.
		StatsHandler: metrics.Default.StatsHandler,
	})
	if err != nil {
		return nil, err
	}
	if err := m.AddGroup(s.cfg.Prefix+".api.deadletter").AddEndpoint("ping", micro.HandlerFunc(func(r micro.Request) { _ = r.Respond([]byte("pong")) })); err != nil {
		_ = m.Stop()
		return nil, err
	}
	eps := []struct {
		name string
		h    func(ctx context.Context, data []byte) (any, error)
	}{
		{ops.DeadList, listEndpoint(s, state.Dead)},
		{ops.ReviewList, listEndpoint(s, state.ManualReview)},
		{ops.DeadShow, func(ctx context.Context, data []byte) (any, error) {
			var req ops.ShowRequest
			if err := strict(data, &req); err != nil {
				return nil, err
			}
			return s.showNamed(ctx, req)
		}},
		{ops.DeadReplay, func(ctx context.Context, data []byte) (any, error) {
			var req ops.ReplayRequest
			if err := strict(data, &req); err != nil {
				return nil, err
			}
			return s.replayRequest(ctx, req)
		}},
		{ops.DeadDiscard, func(ctx context.Context, data []byte) (any, error) {
			var req ops.DiscardRequest
			if err := strict(data, &req); err != nil {
				return nil, err
			}
			return s.discardRequest(ctx, req)
		}},
		{ops.DeadJob, func(ctx context.Context, data []byte) (any, error) {
			var req ops.JobRequest
			if err := strict(data, &req); err != nil {
				return nil, err
			}
			return s.getJob(ctx, req.JobID)
		}},
		{ops.DeadJobCancel, func(ctx context.Context, data []byte) (any, error) {
			var req ops.JobCancelRequest
			if err := strict(data, &req); err != nil {
				return nil, err
			}
			return s.cancelJob(ctx, req)
		}},
		{ops.ReviewResolve, func(ctx context.Context, data []byte) (any, error) {
			var req ops.ResolveRequest
			if err := strict(data, &req); err != nil {
				return nil, err
			}
			if err := s.resolve(ctx, req); err != nil {
				return nil, err
			}
			return ops.ActionReply{Done: 1}, nil
		}},
		{ops.BreakersList, endpoint(s.breakersList)},
		{ops.BreakersClose, func(ctx context.Context, data []byte) (any, error) {
			var req ops.CloseBreakerRequest
			if err := strict(data, &req); err != nil {
				return nil, err
			}
			return s.closeBreaker(ctx, req)
		}},
		{ops.BreakersOpen, endpoint(s.openBreaker)},
		{ops.AccountsPause, endpoint(s.pauseAccount)},
		{ops.AccountsResume, endpoint(s.resumeAccount)},
		{ops.PausesList, endpoint(s.pausesList)},
		{ops.EventsRetry, endpoint(s.retryNow)},
		{ops.EventsCancel, endpoint(s.cancelWait)},
		{ops.ActionsList, endpoint(s.actions)},
	}
	eps = append(eps, s.storedEndpoints()...)
	// The timeline also answers an API key with the read scope (for its
	// own account: timeline checks it).
	reader := func(authorization string) (auth.Principal, error) {
		return s.o.Auth.RequireScope(authorization, auth.Read)
	}
	eps = append(eps, struct {
		name string
		h    func(ctx context.Context, data []byte) (any, error)
	}{ops.EntitiesTimeline, endpoint(s.timeline)})
	eps = append(eps, struct {
		name string
		h    func(ctx context.Context, data []byte) (any, error)
	}{ops.EventsFind, endpoint(s.findEvents)})
	for _, ep := range eps {
		h := ep.h
		name := microName(ep.name)
		authorize := s.o.Auth.RequireOperator
		if ep.name == ops.EntitiesTimeline || ep.name == ops.EventsFind {
			authorize = reader
		}
		if err := m.AddEndpoint(name, micro.HandlerFunc(func(r micro.Request) {
			p, err := authorize(r.Headers().Get(ops.AuthorizationHeader))
			if err != nil {
				status, code, msg := auth.Refusal(err)
				microError(r, status, code, msg)
				return
			}
			ctx, cancel := context.WithTimeout(auth.WithPrincipal(s.runCtx, p), microTimeout)
			defer cancel()
			v, err := h(ctx, r.Data())
			if err != nil {
				status, code, msg := statusOf(err)
				if status == http.StatusInternalServerError {
					s.log.Error().Err(err).Str("endpoint", name).Msg("operator request failed")
				}
				microError(r, status, code, msg)
				return
			}
			if err := r.RespondJSON(v); err != nil {
				// Most often an answer over the server's max_payload:
				// unanswered, the caller would only see its timeout.
				s.log.Warn().Err(err).Str("endpoint", name).Msg("operator request's answer not sent")
				microError(r, http.StatusInternalServerError, "answer_not_sent", "the answer could not be sent ("+err.Error()+"): ask for less, such as a smaller limit, or use the HTTP API")
			}
		}), micro.WithEndpointSubject(ops.Subject(s.cfg.Prefix, ep.name))); err != nil {
			_ = m.Stop()
			return nil, err
		}
	}
	// Once Start returns, the server routes requests to the endpoints.
	if err := s.o.Conn.Flush(); err != nil {
		_ = m.Stop()
		return nil, err
	}
	return m, nil
}

// endpoint is an endpoint's handler for an action taking Req.
func endpoint[Req, Rep any](act func(context.Context, Req) (Rep, error)) func(context.Context, []byte) (any, error) {
	return func(ctx context.Context, data []byte) (any, error) {
		var req Req
		if err := strict(data, &req); err != nil {
			return nil, err
		}
		return act(ctx, req)
	}
}

// microError answers r with the micro error headers and the ErrorBody.
func microError(r micro.Request, status int, code, msg string) {
	body, _ := json.Marshal(ops.ErrorBody{Error: ops.ErrorDetail{Code: code, Message: msg}})
	_ = r.Error(strconv.Itoa(status), msg, body)
}

// microName is an endpoint's name in micro's info ("dead.list" → "dead-list").
func microName(ep string) string {
	b := []byte(ep)
	for i, c := range b {
		if c == '.' {
			b[i] = '-'
		}
	}
	return string(b)
}

func listEndpoint(s *Service, st state.State) func(context.Context, []byte) (any, error) {
	return func(_ context.Context, data []byte) (any, error) {
		var req ops.ListRequest
		if err := strict(data, &req); err != nil {
			return nil, err
		}
		return s.listNamed(st, req)
	}
}

// strict decodes a request body (empty means all defaults) as decode
// does an HTTP one: event.DecodeStrict, and a reason that says nothing
// is refused.
func strict(data []byte, v any) error {
	if len(data) == 0 {
		return nil
	}
	if err := event.DecodeStrict("request body", data, v); err != nil {
		return fail(http.StatusBadRequest, "malformed", "%v", err)
	}
	return checkReasonIn(data)
}
