package ingest

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/dead"
	"github.com/tenaz/tenaz/pkg/outcome"
)

// INTAKE is trimmed (pkg/queue, Trim), not emptied message by message:
// ingest purges it, a few times a second, up to the ingest consumer's ack
// floor. Under fsync always a work queue's delete on each ack costs as
// much as the publish (measured here: 20,000 small messages published and
// acked moved at ~2,800/s through a work queue and ~4,500/s through a
// trimmed stream). The consumer never gives a message up (max_deliver
// -1): ingest settles every message itself, accepted, refused into DEAD,
// or kept in DEAD after maxDeliveries failed deliveries, before it acks or
// terminates it. A store from before has a work-queue INTAKE: there its
// acks delete and nothing is trimmed.

// trimEvery is how often INTAKE is purged to the floor: often enough that
// a backlog of settled submissions stays a few hundred messages, rarely
// enough that the purges cost nothing next to the publishes.
const trimEvery = 250 * time.Millisecond

// maxDeliveries is how many deliveries of one submission ingest attempts
// before it keeps it in DEAD (reason max_deliveries), as the server gives
// up the other consumers' messages.
const maxDeliveries = 20

// giveUp keeps in DEAD a submission ingest failed on maxDeliveries times
// (it died on it, or the store kept refusing it), and settles it.
func (s *Service) giveUp(ctx context.Context, m jetstream.Msg, meta *jetstream.MsgMetadata) {
	why := fmt.Sprintf("ingest failed on it %d times", meta.NumDelivered-1)
	e := dead.Entry{Reason: dead.ReasonCrash, Class: string(outcome.ClassCrash), Error: why,
		At: time.Now().UTC(), Raw: m.Data(), RawSubject: m.Subject(), RawHeader: m.Headers()}
	if acct, kind, err := s.subj.ParseIntake(m.Subject()); err == nil {
		e.Account, e.Kind = acct, kind
	}
	msgID := fmt.Sprintf("maxdeliver/%s/%d", meta.Stream, meta.Sequence.Stream)
	waiting, err := s.dead.Keep(ctx, e, msgID)
	if err != nil {
		s.log.Warn().Err(err).Msg("keeping an undeliverable submission failed; will retry")
		_ = m.NakWithDelay(retryDelay(m, err))
		return
	}
	where := "kept in DEAD"
	if waiting {
		where = "waiting for room in DEAD"
	}
	s.log.Error().Str("subject", m.Subject()).Uint64("intake_seq", meta.Sequence.Stream).Str("reason", why).
		Msg("submission " + where)
	_ = m.TermWithReason(dead.ReasonCrash)
}
