package dispatcher

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/queue"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/store"
)

// laneRecheck is how long a parked event waits before it looks at its
// predecessor again by itself: a safety net; normally the predecessor's
// finisher wakes it at once (lane.Order.Advance).
const laneRecheck = 5 * time.Minute

// LostWake is logged (warn, with the event's id, "finished", the event
// whose finish cleared its lane, and when that finished and the net
// fired) when a parked event's safety net fires well after the event it
// waited for finished: its finisher did not wake it (it died between the
// two, or the wake failed). The wait up to the net is a lane held for
// nothing; the crash suite counts these.
const LostWake = "woken by its lane's safety net: the event it waited for finished without waking it"

// noteSafetyNet logs LostWake when m is the safety net of rec's parking
// (queue.FiredParking) and the events rec waited for (rec.After, and the
// ones before it that were cancelled, which Blocker looks past) had last
// finished (a replayed one: its second finish) more than queue.DueSlack
// before it fired. A net that fired while one still ran is no lost wake:
// its copy waited behind the account's backlog, and the finisher found
// nothing parked to wake. The slack covers the finish's time, read
// before its record is written and the wake made, on the finisher's
// clock against the server's.
func (s *Service) noteSafetyNet(ctx context.Context, m jetstream.Msg, rec state.Record) {
	if !queue.FiredParking(m.Headers()) {
		return
	}
	meta, err := m.Metadata()
	if err != nil {
		return
	}
	var finished time.Time
	last := ""
	for id, hops := rec.After, 0; id != "" && hops < 8; hops++ {
		p, _, err := s.st.Get(ctx, rec.Account, id)
		if err != nil {
			return // gone or unreadable: nothing to tell
		}
		at, ok := p.LastFinishedAt()
		if !ok {
			return
		}
		if at.After(finished) {
			finished, last = at, id
		}
		if p.Status != state.Cancelled {
			break
		}
		id = p.After
	}
	if last == "" || meta.Timestamp.Sub(finished) <= queue.DueSlack {
		return
	}
	zerolog.Ctx(ctx).Warn().Str("after", rec.After).Str("finished", last).Time("finished_at", finished).Time("fired_at", meta.Timestamp).Msg(LostWake)
}

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
		s.noteSafetyNet(ctx, m, rec)
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
