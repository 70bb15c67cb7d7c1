package lane

import (
	"context"
	"errors"
	"fmt"

	"github.com/rs/zerolog"

	"github.com/tenaz/tenaz/pkg/queue"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/store"
)

// Order keeps the events of lanes in order, whichever service finishes
// them: the dispatcher (a run's outcome), ingest (a callback, a cancel),
// the poller (a poll's answer, an escalation), an operator (a cancelled
// wait) or a consumer giving a message up. Each of them calls Advance
// after it stores a finished event; the dispatcher asks Blocker before it
// runs an ordered event.
type Order struct {
	Lanes   *Lanes
	Records *store.Store
	Queue   *queue.Queue
}

// maxSkip bounds the walk over cancelled events in a row, both ways: an
// event behind more of them than that goes ahead without looking further
// back, which costs its lane's order only when over maxSkip events of one
// lane were cancelled while the one before them still ran.
const maxSkip = 256

// Blocker returns the event rec must wait for in its lane, "" when it may
// run: its predecessor if that is not finished. A cancelled predecessor
// never ran, or ran only after the one before it had finished, so it
// holds nobody back: the event waits for whatever it was waiting for in
// turn. Without that, cancelling the middle of three would let the third
// run alongside the first. An error leaves rec waiting for its
// predecessor.
func (o Order) Blocker(ctx context.Context, rec state.Record) (string, error) {
	id := rec.After
	for range maxSkip {
		if id == "" {
			return "", nil
		}
		p, _, err := o.Records.Get(ctx, rec.Account, id)
		if errors.Is(err, store.ErrNotFound) {
			return "", nil // expired or removed: nothing to wait for
		}
		if err != nil {
			return rec.After, fmt.Errorf("lane: predecessor %s: %w", id, err)
		}
		switch {
		case p.Status == state.Cancelled:
			id = p.After
		case state.Finished(p.Status):
			return "", nil
		default:
			return id, nil
		}
	}
	return "", nil
}

// Advance runs after rec finished (state.Finished): it wakes the event
// waiting behind it, or releases the lane if rec was its last event. A
// successor that was cancelled is passed over: the one behind it may wait
// (Blocker), and so is rec when it was cancelled before the event it
// waited for finished. An error means the wake may not have happened: the caller
// lets whatever brought rec's outcome come again (a redelivered message, a
// webhook sent again) if it can, and the parked successor's own schedule
// is the safety net.
func (o Order) Advance(ctx context.Context, rec state.Record) error {
	if rec.Status == state.Cancelled {
		// Cancelled while an event before it had not finished: that
		// event's finisher passes over this one.
		if b, err := o.Blocker(ctx, rec); err != nil || b != "" {
			return err
		}
	}
	for range maxSkip {
		if rec.Next == "" {
			if rec.OrderingKey != "" {
				if err := o.Lanes.Release(ctx, rec.Account, rec.OrderingKey, rec.ID); err != nil {
					// A lane left behind costs nothing: the next event
					// appended finds its predecessor finished and goes ahead.
					zerolog.Ctx(ctx).Warn().Err(err).Msg("releasing the lane")
				}
			}
			return nil
		}
		scheduled, err := o.Queue.Wake(ctx, rec.Account, rec.Next)
		if err != nil || scheduled {
			return err
		}
		// Not parked: it has not been looked at yet (its own message finds
		// rec finished), or it left the lane (cancelled).
		next, _, err := o.Records.Get(ctx, rec.Account, rec.Next)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("lane: successor %s: %w", rec.Next, err)
		}
		if next.Status != state.Cancelled {
			return nil
		}
		rec = next
	}
	return nil
}
