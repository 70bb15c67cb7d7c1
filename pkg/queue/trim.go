package queue

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// Trimmed streams keep their messages (limits retention) until they are
// purged up to a consumer's ack floor, where a work queue deletes each
// message on its ack: one purge removes many settled messages, and a work
// queue also checks each ack and each new consumer against every other
// consumer of the stream (nats-server's checkForInterest and
// partitionUnique), which cost in proportion to the consumers (one per
// account on EVENTS). INTAKE (ingest) and EVENTS (the dispatchers, per
// account, and the poller, for timers) are trimmed in a new store; a store
// from before keeps its work queues, which the server cannot change.
//
// Trimming to the floor is safe only when every message below it was
// settled by its consumer: tenaz's consumers of trimmed streams never let
// the server give a message up (max_deliver -1), since a message given up
// counts as settled for the floor. Each gives up on a message itself,
// after keeping it in DEAD (dead.GiveUp).

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
	f := ci.AckFloor.Stream
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
