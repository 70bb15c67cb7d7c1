package dead

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/lane"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/outcome"
	"github.com/tenaz/tenaz/pkg/queue"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/store"
)

// GiveUp is what a consumer of events does with a message it has been
// delivered too many times (its workers died on it, or kept failing to
// settle it): the event goes to dead, its DEAD entry keeping the payload
// and the history, unless the event has moved on meanwhile (the message
// is then only a stale copy). The caller settles the message once GiveUp
// returns nil.
//
// The consumers themselves give up, never the server (their max_deliver is
// unlimited): a message the server gives up on counts as settled for its
// consumer's ack floor, and EVENTS is trimmed to that floor, so it could
// be purged before anyone had kept it.
type GiveUp struct {
	Dead  *Writer
	Conn  *nats.Conn
	Subj  names.Subjects
	Store *store.Store
	Actor string
	// Order wakes what waits behind the event in its ordered lane.
	Order lane.Order
}

// Maxed moves env's event to dead with reason, class and why, reporting
// whether it did (false: the event had moved on, or its record is gone);
// msgID dedups the DEAD entry of a retried call. A record that does not
// decode is made again from env (see Undecodable).
func (g GiveUp) Maxed(ctx context.Context, env event.Envelope, reason, class, why, msgID string) (bool, error) {
	for range 16 {
		why := why
		rec, rev, err := g.Store.Get(ctx, env.Account, env.ID)
		if errors.Is(err, store.ErrUndecodable) {
			rec = queue.Initial(env)
			why += "; " + err.Error() + ", so it was made again from the event's message"
		} else if errors.Is(err, store.ErrNotFound) {
			return false, nil
		} else if err != nil {
			return false, err
		}
		if !state.Can(rec.Status, state.DeliveriesMaxed) {
			// It finished meanwhile: the message is only a stale copy. Its
			// finisher may have died before waking its lane's next event.
			if state.Finished(rec.Status) {
				return false, g.Order.Advance(ctx, rec)
			}
			return false, nil
		}
		next, _, err := state.Apply(rec, state.Action{Name: state.DeliveriesMaxed, Actor: g.Actor,
			Error: &state.ErrorInfo{Class: class, Message: why}, Detail: reason + ": " + why}, g.Store.Now())
		if err != nil {
			return false, err
		}
		e := Entry{ID: env.ID, Account: env.Account, Kind: env.Kind, Reason: reason, Class: class,
			Error: why, At: next.UpdatedAt, Event: &env, Record: &next}
		if _, err := g.Dead.Keep(ctx, e, msgID); err != nil {
			return false, err
		}
		if _, err := g.Store.Write(ctx, next, rev); errors.Is(err, store.ErrConflict) {
			continue
		} else if err != nil {
			return false, err
		}
		Advise(g.Conn, g.Subj, next)
		// Failed, the call is made again (the caller keeps its message),
		// and finds the event finished (above).
		return true, g.Order.Advance(ctx, next)
	}
	return false, fmt.Errorf("dead: %s kept changing while being given up", env.ID)
}

// Undecodable moves env's event to dead when its stored record does not
// decode (store.ErrUndecodable): read again, it never would, and
// the event would wait unseen for ever. The record is made again from
// env, the message the event was dispatched from: accepted, then dead
// with reason undecodable_record. It replaces the one that does not
// decode by compare-and-set, the DEAD entry keeps env's payload, and an
// operator can replay it.
func (g GiveUp) Undecodable(ctx context.Context, env event.Envelope, msgID string) (bool, error) {
	return g.Maxed(ctx, env, ReasonUndecodable, ReasonUndecodable, "its history is lost", msgID)
}

// Crash gives env's event up after deliveries failed deliveries of its
// message seq on stream (class crash).
func (g GiveUp) Crash(ctx context.Context, env event.Envelope, stream string, seq, deliveries uint64) (bool, error) {
	why := fmt.Sprintf("workers failed on it %d times", deliveries)
	return g.Maxed(ctx, env, ReasonCrash, string(outcome.ClassCrash), why, fmt.Sprintf("maxdeliver/%s/%d", stream, seq))
}
