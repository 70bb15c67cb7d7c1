package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/queue"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/store"
)

// laneRecheck is how long a parked event waits before it looks at its
// predecessor again by itself: a safety net; normally the predecessor's
// finisher wakes it at once.
const laneRecheck = 5 * time.Minute

// waitInLane holds back an ordered event whose predecessor is not finished:
// it parks the event on its own server-side schedule (which keeps the
// envelope durably and fires after laneRecheck as a safety net), notes the
// wait in its history once, acks the message, and returns true. Whoever
// finishes the predecessor wakes it (advanceLane). A re-check after parking
// closes the race with a predecessor finishing meanwhile.
func (s *Service) waitInLane(ctx context.Context, m jetstream.Msg, env event.Envelope, rec state.Record, rev uint64) bool {
	if s.predecessorFinished(ctx, rec.Account, rec.After) {
		return false
	}
	if err := s.q.Park(ctx, env, s.st.Now().Add(laneRecheck)); err != nil {
		s.retryLater(ctx, m, err)
		return true
	}
	note := "waiting for " + rec.After + " (ordered lane)"
	if last := rec.History[len(rec.History)-1]; last.Detail != note {
		if n, _, err := state.Apply(rec, state.Action{Name: state.Note, Actor: s.actor, Detail: note}, s.st.Now()); err == nil {
			_, _ = s.st.Write(ctx, n, rev) // a conflict means someone moved it: they decide
		}
	}
	if s.predecessorFinished(ctx, rec.Account, rec.After) {
		_ = s.wake(ctx, env.Account, env.ID) // if it fails, the parking schedule fires later
	}
	_ = m.Ack()
	zerolog.Ctx(ctx).Debug().Str("after", rec.After).Msg("waiting in its lane")
	return true
}

func (s *Service) predecessorFinished(ctx context.Context, account, id string) bool {
	p, _, err := s.st.Get(ctx, account, id)
	if errors.Is(err, store.ErrNotFound) {
		return true // expired or removed: nothing to wait for
	}
	return err == nil && state.Finished(p.Status)
}

// advanceLane runs after rec finished: it wakes the event waiting behind
// it, or releases the lane if rec was its last event. An error means the
// wake may not have happened: the caller keeps its message unacked, and
// the redelivery, finding rec finished, advances the lane again.
func (s *Service) advanceLane(ctx context.Context, rec state.Record) error {
	switch {
	case rec.Next != "":
		return s.wake(ctx, rec.Account, rec.Next)
	case rec.OrderingKey != "":
		if err := s.order.Release(ctx, rec.Account, rec.OrderingKey, rec.ID); err != nil {
			// A lane left behind costs nothing: the next event appended
			// finds its predecessor finished and goes ahead.
			zerolog.Ctx(ctx).Warn().Err(err).Msg("releasing the lane")
		}
	}
	return nil
}

// wake re-publishes a parked event from its schedule subject now and
// cancels the schedule. Only a parking schedule is touched: the event may
// have moved on and hold a retry schedule there, which must keep its time
// (TestWakeLeavesRetryScheduleAlone). An event that has not parked yet
// needs nothing: its own message finds the predecessor finished.
func (s *Service) wake(ctx context.Context, account, id string) error {
	sm, err := s.streamOf(account).GetLastMsgForSubject(ctx, s.subj.Schedule(account, id))
	if err != nil {
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil
		}
		zerolog.Ctx(ctx).Warn().Err(err).Str("next", id).Msg("waking the next event in the lane")
		return err
	}
	if sm.Header.Get(queue.HeaderParked) == "" {
		return nil
	}
	env, err := event.Unmarshal(sm.Data)
	if err != nil {
		return nil
	}
	subj, err := s.subj.Event(env.Account, env.Kind)
	if err != nil {
		return nil
	}
	msg := nats.NewMsg(subj)
	msg.Data = sm.Data
	msg.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("%s/wake/%d", id, sm.Sequence))
	if _, err := s.js.PublishMsg(ctx, msg); err != nil {
		zerolog.Ctx(ctx).Warn().Err(err).Str("next", id).Msg("waking the next event in the lane")
		return err
	}
	// Delete exactly the parking schedule that was fired: by now the event
	// may have run, failed and stored a retry schedule on the same subject,
	// which purging the subject would lose.
	_ = s.streamOf(account).DeleteMsg(ctx, sm.Sequence)
	return nil
}
