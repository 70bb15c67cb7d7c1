package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"

	"github.com/tenaz/tenaz/pkg/callbacks"
	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/httpapi"
	"github.com/tenaz/tenaz/pkg/metrics"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/store"
	"github.com/tenaz/tenaz/pkg/tenaz"
	"github.com/tenaz/tenaz/pkg/webhook"
)

// Outcomes of a verified callback, answered as {"outcome": …}.
const (
	CallbackApplied   = "applied"       // it carried the result: the event is done
	CallbackDuplicate = "duplicate"     // its webhook-id was applied before
	CallbackLate      = "late"          // the event no longer waits for this target
	CallbackProgress  = "progress"      // not final (done_when): recorded, still waiting
	CallbackUnknown   = "unknown_event" // no event matches its id or reference
)

// maxCallbackResult bounds the callback body kept as the event's result.
const maxCallbackResult = 4096

// CallbackReply is the body of a 200 answer to a webhook.
type CallbackReply struct {
	Outcome string `json:"outcome"`
	ID      string `json:"id,omitempty"`
}

// handleCallback: POST /v1/callbacks/{target}. A provider's webhook,
// verified with the target's callback_secret (Standard Webhooks: HMAC over
// id.timestamp.body, timestamp tolerance). Whatever it turns out to be —
// applied, a duplicate, late, unknown — a verified webhook is answered 200
// and recorded in the event's history; only a bad signature is refused
// (401), and a store outage is 503 so that the provider retries.
func (s *Service) handleCallback(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("target")
	t, ok := s.cfg.Target(name)
	if !ok || t.CallbackSecret == "" {
		httpapi.Error(w, http.StatusNotFound, "unknown_target", fmt.Sprintf("no target %q receives callbacks", name))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.HTTP.MaxBodyBytes))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			httpapi.Error(w, http.StatusRequestEntityTooLarge, "too_large", "request body is over the limit")
			return
		}
		httpapi.Error(w, http.StatusBadRequest, "malformed", "reading body: "+err.Error())
		return
	}
	if err := webhook.Verify(t.CallbackSecret.Reveal(), r.Header, body, t.Callback.Tolerance.D(), s.st.Now()); err != nil {
		s.log.Warn().Str("target", name).Err(err).Msg("webhook refused")
		s.metrics.Callback(name, metrics.CallbackForged)
		httpapi.Error(w, http.StatusUnauthorized, "invalid_signature", err.Error())
		return
	}
	var doc map[string]any
	if err := json.Unmarshal(body, &doc); err != nil {
		httpapi.Error(w, http.StatusBadRequest, "malformed", "a callback body must be a JSON object: "+err.Error())
		return
	}
	reply, err := s.ApplyCallback(r.Context(), name, r.Header.Get("webhook-id"), doc, body)
	if err != nil {
		s.log.Error().Err(err).Str("target", name).Msg("callback not applied: store unavailable")
		httpapi.Error(w, http.StatusServiceUnavailable, "unavailable", "the callback could not be stored; send it again")
		return
	}
	switch reply.Outcome {
	case CallbackApplied:
		s.metrics.Callback(name, metrics.CallbackApplied)
	case CallbackUnknown:
		s.metrics.Callback(name, metrics.CallbackUnknown)
	default:
		s.metrics.Callback(name, metrics.CallbackNoop)
	}
	httpapi.JSON(w, http.StatusOK, reply)
}

// ApplyCallback applies a verified callback of target to the event it
// names (by event id, else by the provider's reference), once: only an
// event that still waits for this target's result moves (to done); every
// other case is a recorded no-op. It is safe to call concurrently with
// copies of the same callback.
func (s *Service) ApplyCallback(ctx context.Context, target, webhookID string, doc map[string]any, body []byte) (CallbackReply, error) {
	t, _ := s.cfg.Target(target)
	log := s.log.With().Str("target", target).Str("webhook_id", webhookID).Logger()
	id, _ := doc[t.Callback.EventField].(string)
	ref, _ := doc[t.Callback.ReferenceField].(string)
	if tenaz.ValidateEventID(id) != nil && ref != "" {
		var err error
		if id, err = s.refs.Lookup(ctx, target, ref); errors.Is(err, callbacks.ErrNotFound) {
			id = ""
		} else if err != nil {
			return CallbackReply{}, err
		}
	}
	if tenaz.ValidateEventID(id) != nil {
		log.Warn().Msg("callback for an unknown event")
		return CallbackReply{Outcome: CallbackUnknown}, nil
	}
	final, status := true, ""
	if dw := t.Callback.DoneWhen; dw.Field != "" {
		status = fmt.Sprint(doc[dw.Field])
		final = slices.Contains(dw.In, status)
	}
	actor := "callback:" + target
	outcome := ""
	now := s.st.Now()
	rec, _, err := s.st.Update(ctx, id, func(cur state.Record) (state.Record, error) {
		note := func(o, detail string) (state.Record, error) {
			outcome = o
			n, _, err := state.Apply(cur, state.Action{Name: state.Note, Actor: actor, Detail: detail}, now)
			return n, err
		}
		waiting := (cur.Status == tenaz.StateAwaitingCallback || cur.Status == tenaz.StateRunning) && s.awaits(cur, target)
		switch {
		case webhookID != "" && applied(cur, actor, webhookID):
			return note(CallbackDuplicate, fmt.Sprintf("duplicate callback (webhook-id %s, applied before) ignored", webhookID))
		case !waiting:
			return note(CallbackLate, fmt.Sprintf("late callback %s from %s ignored: the event is %s at stage %s", webhookID, target, cur.Status, cur.Stage))
		case !final:
			return note(CallbackProgress, fmt.Sprintf("callback %s: %s is %q, not final; still waiting", webhookID, t.Callback.DoneWhen.Field, status))
		}
		outcome = CallbackApplied
		a := state.Action{Name: state.Complete, Actor: actor, Detail: appliedDetail(webhookID), Reference: ref}
		if len(body) <= maxCallbackResult && json.Valid(body) {
			a.Result = json.RawMessage(body)
		}
		n, _, err := state.Apply(cur, a, now)
		return n, err
	})
	if errors.Is(err, store.ErrNotFound) {
		log.Warn().Str("event_id", id).Msg("callback for an unknown event")
		return CallbackReply{Outcome: CallbackUnknown}, nil
	}
	if err != nil {
		return CallbackReply{}, err
	}
	if outcome == CallbackApplied {
		if err := s.q.CancelSchedule(ctx, id); err != nil {
			log.Warn().Err(err).Msg("deadline not cancelled; it will find the event done")
		}
	}
	log.Info().Str("event_id", rec.ID).Str("outcome", outcome).Msg("callback")
	return CallbackReply{Outcome: outcome, ID: rec.ID}, nil
}

// awaits reports whether rec's current stage completes by target's callback.
func (s *Service) awaits(rec state.Record, target string) bool {
	k, ok := s.cfg.Kind(rec.Kind)
	if !ok {
		return false
	}
	st, ok := k.StageFor(rec.Stage == state.StageFallback)
	return ok && st.Target == target && st.Completion == config.CompletionCallback
}

// appliedDetail is the history detail of an applied callback; applied
// finds it again, so a copy of the same webhook is known for a duplicate
// from the event's own history (the webhook-id's replay protection: one
// result per webhook-id, written in the same compare-and-set as the
// result, so no crash can separate them).
func appliedDetail(webhookID string) string { return "callback " + webhookID + " applied" }

func applied(r state.Record, actor, webhookID string) bool {
	d := appliedDetail(webhookID)
	for i := len(r.History) - 1; i >= 0; i-- {
		if e := r.History[i]; e.Action == state.Complete && e.Actor == actor && e.Detail == d {
			return true
		}
	}
	return false
}
