package ingest

import (
	"errors"
	"net/http"

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
	actor := "api"
	if u := r.Header.Get("X-Tenaz-Actor"); u != "" {
		actor = "api:" + u
	}
	next, _, _, err := s.st.Transition(r.Context(), rec.ID, state.Action{Name: state.Cancel, Actor: actor, Detail: "cancelled by caller"})
	if errors.Is(err, state.ErrInvalidTransition) {
		httpapi.Error(w, http.StatusConflict, "not_cancellable", "event is "+string(next.Status)+"; only scheduled, pending or retrying events can be cancelled")
		return
	}
	if err != nil {
		httpapi.Error(w, http.StatusServiceUnavailable, "unavailable", err.Error())
		return
	}
	if err := s.q.CancelSchedule(r.Context(), rec.ID); err != nil {
		s.log.Warn().Err(err).Str("event_id", rec.ID).Msg("cancel: purge schedule failed; the dispatcher will drop it when it fires")
	}
	httpapi.JSON(w, http.StatusOK, viewOf(next, statusURL(r, next.ID)))
}
