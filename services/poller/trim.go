package poller

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/dead"
	"github.com/tenaz/tenaz/pkg/event"
)

// maxDeliveries is how many deliveries of one timer the poller makes
// before it keeps the event in DEAD (reason max_deliveries): its consumer
// never gives a timer up itself (pkg/dead, GiveUp), since the timers of a
// trimmed EVENTS are purged up to its ack floor.
const maxDeliveries = 20

// trimEvery is how often each partition's timers are purged up to the
// poller's ack floor (a trimmed EVENTS; pkg/queue, Trimmer). Every
// replica trims: a purge to a floor already passed removes nothing.
const trimEvery = 500 * time.Millisecond

// giveUps is how this replica gives events up to DEAD.
func (s *Service) giveUps() dead.GiveUp {
	return dead.GiveUp{Dead: s.dead, Conn: s.nc, Subj: s.subj, Store: s.st, Actor: s.actor, Order: s.order}
}

// giveUp keeps in DEAD the event of a timer delivered more than
// maxDeliveries times, and settles the timer.
func (s *Service) giveUp(ctx context.Context, m jetstream.Msg, env event.Envelope, md *jetstream.MsgMetadata) {
	moved, err := s.giveUps().Crash(ctx, env, md.Stream, md.Sequence.Stream, md.NumDelivered-1)
	if err != nil {
		if ctx.Err() == nil {
			_ = m.NakWithDelay(2 * time.Second)
		}
		return
	}
	if moved {
		s.log.Error().Str("event_id", env.ID).Uint64("deliveries", md.NumDelivered-1).Msg("the poller failed on this event's timer every time: kept in DEAD")
	}
	_ = m.Ack()
}
