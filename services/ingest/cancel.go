package ingest

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/tenaz/tenaz/pkg/auth"
	"github.com/tenaz/tenaz/pkg/httpapi"
	"github.com/tenaz/tenaz/pkg/state"
)

// handleCancel: DELETE /v1/events/{id} cancels a scheduled, pending or
// retrying event (409 otherwise) and purges its schedule so it never fires.
// A dispatch message already queued finds the event cancelled and is dropped.
func (s *Service) handleCancel(w http.ResponseWriter, r *http.Request) {
	rec, ok := s.lookup(w, r)
	if !ok {
		return
	}
	// Who the credential proves ("api:key:acme-shop", "api:operator:alice"),
	// never what the request claims; without authentication, anonymous.
	p, ok := auth.From(r.Context())
	if !ok {
		p = auth.Principal{Anonymous: true}
	}
	actor := "api:" + p.String()
	next, errBody := s.cancelEvent(r.Context(), rec, actor, "cancelled by caller")
	if errBody != nil {
		httpapi.Error(w, errBody.status, errBody.Code, errBody.Message)
		return
	}
	httpapi.JSON(w, http.StatusOK, viewOf(next, s.statusURL(r, next.ID)))
}

// cancelError is a refused cancel: the HTTP status and the coded error.
type cancelError struct {
	status int
	httpapi.ErrorDetail
}

// cancelEvent moves rec to cancelled, recording actor and detail in its history,
// purges its schedule and moves its ordered lane along. It is shared by the HTTP API and the micro
// endpoint: 409 not_cancellable unless scheduled, pending or retrying.
func (s *Service) cancelEvent(ctx context.Context, rec state.Record, actor, detail string) (state.Record, *cancelError) {
	next, _, _, err := s.st.Transition(ctx, rec.Account, rec.ID, state.Action{Name: state.Cancel, Actor: actor, Detail: detail})
	if errors.Is(err, state.ErrInvalidTransition) {
		return next, &cancelError{http.StatusConflict, httpapi.ErrorDetail{Code: "not_cancellable",
			Message: "event is " + string(next.Status) + "; only scheduled, pending or retrying events can be cancelled"}}
	}
	if err != nil {
		return next, &cancelError{http.StatusServiceUnavailable, httpapi.ErrorDetail{Code: "unavailable", Message: err.Error()}}
	}
	if err := s.q.CancelSchedule(ctx, rec.Account, rec.ID); err != nil {
		s.log.Warn().Err(err).Str("event_id", rec.ID).Msg("cancel: purge schedule failed; the dispatcher will drop it when it fires")
	}
	// Not cut short by a caller that hangs up: the cancel is stored.
	actx, cancel := context.WithTimeout(context.WithoutCancel(s.log.WithContext(ctx)), 10*time.Second)
	defer cancel()
	if err := s.order.Advance(actx, next); err != nil {
		s.log.Warn().Err(err).Str("event_id", rec.ID).Msg("cancel: the next event of its lane not woken; its parking schedule wakes it")
	}
	return next, nil
}
