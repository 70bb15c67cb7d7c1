package queue

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// Trimmed streams keep their messages (limits retention) until they are
// purged up to a floor, where a work queue deletes each message on its
// ack: one purge removes many settled messages. INTAKE (ingest, to its
// consumer's ack floor) and EVENTS (each account's owner, below its
// lowest unsettled message; the poller, its timers to its consumer's ack
// floor) are trimmed in a new store; a store from before keeps its work
// queues, which the server cannot change.
//
// Trimming to a consumer's ack floor is safe only when every message
// below it was settled by its consumer: tenaz's consumers of trimmed
// streams never let the server give a message up (max_deliver -1), since
// a message given up counts as settled for the floor. Each gives up on a
// message itself, after keeping it in DEAD (dead.GiveUp).

// Trims reports whether st is trimmed (limits retention) rather than a
// work queue whose acks delete.
func Trims(st jetstream.Stream) bool {
	return st.CachedInfo().Config.Retention == jetstream.LimitsPolicy
}

// Trim purges the messages on filter ("": all of st's) at or below cons'
// ack floor, when that floor is above after (the floor of the previous
// trim), and returns the floor it trimmed to (after when nothing was
// purged). Several trimmers of one floor are harmless: a purge to a floor
// already passed removes nothing.
func Trim(ctx context.Context, st jetstream.Stream, cons jetstream.Consumer, filter string, after uint64) (uint64, error) {
	ci, err := cons.Info(ctx)
	if err != nil {
		return after, fmt.Errorf("queue: trim: consumer info: %w", err)
	}
	return TrimTo(ctx, st, filter, ci.AckFloor.Stream, after)
}

// TrimTo purges the messages on filter ("": all of st's) at or below
// floor, when floor is above after, and returns the floor it trimmed to
// (after when nothing was purged). Every message on filter at or below
// floor must be settled.
func TrimTo(ctx context.Context, st jetstream.Stream, filter string, floor, after uint64) (uint64, error) {
	f := floor
	if f <= after {
		return after, nil
	}
	opts := []jetstream.StreamPurgeOpt{jetstream.WithPurgeSequence(f + 1)}
	if filter != "" {
		opts = append(opts, jetstream.WithPurgeSubject(filter))
	}
	if err := st.Purge(ctx, opts...); err != nil {
		return after, fmt.Errorf("queue: trim: purge: %w", err)
	}
	return f, nil
}

// Trimmer trims one stream's filter to one consumer's ack floor every
// interval: ingest's INTAKE, the poller's timers of each partition. (An
// account's dispatch messages are trimmed in batches by their owner
// instead, which calls TrimTo.)
type Trimmer struct {
	Stream   jetstream.Stream
	Consumer jetstream.Consumer
	Filter   string // "": the whole stream
	// Failed, when set, is told of each failed trim of Run (a metric).
	Failed func()
	// floor is the last ack floor trimmed to: every message of Filter at
	// or below it is settled (and gone).
	floor atomic.Uint64
}

// Run trims every interval until ctx ends; a failed trim is logged and
// tried again at the next.
func (t *Trimmer) Run(ctx context.Context, every time.Duration, log zerolog.Logger) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if err := t.Trim(ctx); err != nil && ctx.Err() == nil {
			if t.Failed != nil {
				t.Failed()
			}
			log.Debug().Err(err).Str("stream", t.Stream.CachedInfo().Config.Name).Str("filter", t.Filter).Msg("trim")
		}
	}
}

// Trim trims once.
func (t *Trimmer) Trim(ctx context.Context) error {
	f, err := Trim(ctx, t.Stream, t.Consumer, t.Filter, t.floor.Load())
	t.floor.Store(f)
	return err
}

// Floor is the sequence at or below which every message of Filter is
// settled, as far as this trimmer has seen (0: nothing known, or no
// trimmer).
func (t *Trimmer) Floor() uint64 {
	if t == nil {
		return 0
	}
	return t.floor.Load()
}
