package dispatcher

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/names"
)

// One replica owns an account at a time (pkg/owner), so the account's
// concurrency, rate and breaker count are this process's and hold with any
// number of replicas. Owning takes two things: the account is assigned to
// this replica among the live ones, and this replica holds its lease. The
// lease is taken before the reader's first pull and given back only after
// its last call returned, so while a handover is under way the account is
// served by the old owner until it is done, then by the new one.
//
// The consumer's pinned priority group is the server's half of it: of the
// replicas pulling, only the pinned one gets messages, so even a replica
// that was taken for dead while it still ran gets none once the new owner
// is pinned.

// ownerGroup is the priority group of every dispatch consumer.
const ownerGroup = "owner"

// reconcile starts the readers of the accounts this replica now owns and
// hands over those it no longer does. pkg/owner calls it after the live
// replicas or a lease changed; the relist sweep calls it too.
func (s *Service) reconcile() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.serving {
		return
	}
	for account := range s.known {
		l, running := s.readers[account]
		switch {
		case running && !s.owners.Holds(account):
			// Taken over while this replica was taken for dead: stop at
			// once; the lease and the pin are the new owner's.
			delete(s.readers, account)
			s.handOver(account, l, false)
		case running && !s.owners.Assigned(account):
			delete(s.readers, account)
			s.handOver(account, l, true)
		case !running:
			s.ensureReaderLocked(account)
		}
	}
}

// ownLocked reports whether this replica may run account's reader: the
// account is assigned to it, no reader of its own is still handing it over,
// and it holds (or now takes) the lease. Callers hold s.mu.
func (s *Service) ownLocked(account string) bool {
	if _, ok := s.handing[account]; ok || !s.owners.Assigned(account) {
		return false
	}
	ctx, cancel := context.WithTimeout(s.runCtx, 5*time.Second)
	defer cancel()
	ok, err := s.owners.Acquire(ctx, account)
	if err != nil {
		s.log.Warn().Err(err).Str("account", account).Msg("taking the account's lease")
	}
	return ok
}

// handOver stops l in the background and, when release is set, gives the
// account back once its last call returned: it unpins the consumer (so the
// next owner is served at once, not after the pin's TTL) and releases the
// lease. Callers hold s.mu.
func (s *Service) handOver(account string, l *reader, release bool) {
	done := make(chan struct{})
	s.handing[account] = done
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		l.stop()
		if release {
			s.giveBack(account)
		}
		s.mu.Lock()
		delete(s.handing, account)
		s.mu.Unlock()
		close(done)
		s.log.Info().Str("account", account).Bool("released", release).Msg("account handed over")
		s.reconcile() // it may have come back to this replica meanwhile
	}()
}

// giveBack unpins account's consumer and releases its lease; the reader is
// stopped and its calls have returned.
func (s *Service) giveBack(account string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.streamOf(account).UnpinConsumer(ctx, names.ConsumerName(account), ownerGroup)
	if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		s.log.Debug().Err(err).Str("account", account).Msg("unpinning the account's consumer")
	}
	if err := s.owners.Release(ctx, account); err != nil {
		s.log.Warn().Err(err).Str("account", account).Msg("releasing the account's lease")
	}
}

// Owner returns the replica that holds account's lease ("" when none does).
func (s *Service) Owner(account string) string {
	if s.owners == nil {
		return ""
	}
	return s.owners.Holder(account)
}
