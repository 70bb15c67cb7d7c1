package dispatcher

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/store"
)

// laneRecheck is how long a parked event waits before it looks at its
// predecessor again by itself: a safety net; normally the predecessor's
// finisher wakes it at once (lane.Order.Advance).
const laneRecheck = 5 * time.Minute

// waitInLane holds back an ordered event that must wait in its lane
// (lane.Order.Blocker): it parks the event on its own server-side
// schedule (which keeps the envelope durably and fires after laneRecheck
// as a safety net), notes the wait in its history once, acks the message,
// and returns true. Whoever finishes the event it waits for wakes it. A
// re-check after parking closes the race with that event finishing
// meanwhile.
//
// A read of the predecessor that fails is not taken for a wait: its
// finisher may have woken this event already and will not again, so a
// park would hold the lane until the safety net (5 minutes, after a
// nats-server restart in the crash suite). The message comes back in
// seconds instead, and a re-check that fails wakes the event itself.
// Only a predecessor whose record does not decode (a hand-made value)
// is waited for at the safety net's pace, not every few seconds.
func (s *Service) waitInLane(ctx context.Context, m jetstream.Msg, env event.Envelope, rec state.Record, rev uint64) bool {
	blocker, err := s.blocker(ctx, env, rec)
	if err != nil && !errors.Is(err, store.ErrUndecodable) {
		s.retryLater(ctx, m, err)
		return true
	}
	if blocker == "" {
		return false
	}
	if err := s.q.Park(ctx, env, s.st.Now().Add(laneRecheck)); err != nil {
		s.retryLater(ctx, m, err)
		return true
	}
	note := "waiting for " + blocker + " (ordered lane)"
	if last := rec.History[len(rec.History)-1]; last.Detail != note {
		if n, _, err := state.Apply(rec, state.Action{Name: state.Note, Actor: s.actor, Detail: note}, s.st.Now()); err == nil {
			_, _ = s.st.Write(ctx, n, rev) // a conflict means someone moved it: they decide
		}
	}
	if b, err := s.blocker(ctx, env, rec); (err == nil && b == "") || (err != nil && !errors.Is(err, store.ErrUndecodable)) {
		// If this fails, the parking schedule fires later.
		if _, err := s.q.Wake(ctx, env.Account, env.ID); err != nil {
			zerolog.Ctx(ctx).Warn().Err(err).Msg("waking itself after its lane cleared")
		}
	}
	_ = m.Ack()
	zerolog.Ctx(ctx).Debug().Str("after", blocker).Msg("waiting in its lane")
	return true
}

// blocker is lane.Order.Blocker, after the LaneRead hook.
func (s *Service) blocker(ctx context.Context, env event.Envelope, rec state.Record) (string, error) {
	if h := s.o.Hooks; h != nil && h.LaneRead != nil {
		if err := h.LaneRead(env.ID); err != nil {
			return rec.After, err
		}
	}
	return s.order.Blocker(ctx, rec)
}
