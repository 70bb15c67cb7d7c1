package ingest

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/tenaz/tenaz/pkg/dead"
	"github.com/tenaz/tenaz/pkg/outcome"
	"github.com/tenaz/tenaz/pkg/queue"
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

// trimmer purges INTAKE to the ingest consumer's ack floor.
type trimmer struct {
	stream jetstream.Stream
	cons   jetstream.Consumer
	log    zerolog.Logger
	// floor is the last ack floor purged to: every INTAKE message at or
	// below it is settled (and gone).
	floor atomic.Uint64
}

func (t *trimmer) run(ctx context.Context) {
	tick := time.NewTicker(trimEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		t.trim(ctx)
	}
}

// trim purges every message at or below the ack floor. Several replicas
// trimming at once is harmless: a purge to a floor already passed removes
// nothing.
func (t *trimmer) trim(ctx context.Context) {
	// Unfiltered, the server drops whole blocks at once; the keeper's
	// messages below the floor go with them, which is harmless.
	f, err := queue.Trim(ctx, t.stream, t.cons, "", t.floor.Load())
	if err != nil {
		t.log.Debug().Err(err).Msg("intake trim")
		return
	}
	t.floor.Store(f)
}

// settled is the sequence at or below which every INTAKE message is
// settled, as far as this replica has seen (0: nothing known).
func (t *trimmer) settled() uint64 {
	if t == nil {
		return 0
	}
	return t.floor.Load()
}

// giveUp keeps in DEAD a submission ingest failed on maxDeliveries times
// (it died on it, or the store kept refusing it), and settles it.
func (s *Service) giveUp(ctx context.Context, m jetstream.Msg, meta *jetstream.MsgMetadata) {
	why := fmt.Sprintf("ingest failed on it %d times", meta.NumDelivered-1)
	e := dead.Entry{Reason: dead.ReasonCrash, Class: string(outcome.ClassCrash), Error: why,
		At: time.Now().UTC(), Raw: m.Data(), RawSubject: m.Subject()}
	if acct, kind, err := s.subj.ParseIntake(m.Subject()); err == nil {
		e.Account, e.Kind = acct, kind
	}
	msgID := fmt.Sprintf("maxdeliver/%s/%d", meta.Stream, meta.Sequence.Stream)
	if err := dead.Publish(ctx, s.js, s.subj, e, msgID); err != nil {
		s.log.Warn().Err(err).Msg("keeping an undeliverable submission failed; will retry")
		_ = m.NakWithDelay(retryDelay(m, err))
		return
	}
	s.log.Error().Str("subject", m.Subject()).Uint64("intake_seq", meta.Sequence.Stream).Str("reason", why).
		Msg("submission kept in DEAD")
	_ = m.TermWithReason(dead.ReasonCrash)
}
