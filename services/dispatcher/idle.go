package dispatcher

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/accounts"
	"github.com/tenaz/tenaz/pkg/names"
)

// Many accounts: a reader whose account has been idle for IdleAfter (nothing
// received, nothing pending or unacked) is stopped and its consumer
// deleted, so 10,000 mostly quiet accounts do not keep 10,000 consumers
// and pull loops. Ingest is told (AccountGone) and provisions the consumer
// again before the account's next event; as a backstop every sweep adopts
// any account with messages waiting in EVENTS and no consumer.

// idleLocked takes the idle readers out of service and returns them; the
// caller retires them (retire) after releasing s.mu. Callers hold s.mu.
func (s *Service) idleLocked(ctx context.Context) []*reader {
	if s.o.IdleAfter < 0 {
		return nil
	}
	var idle []*reader
	for account, l := range s.readers {
		if time.Since(time.Unix(0, l.last.Load())) < s.o.IdleAfter {
			continue
		}
		name := names.ConsumerName(account)
		c, err := s.streamOf(account).Consumer(ctx, name)
		if err != nil {
			continue
		}
		if info := c.CachedInfo(); info.NumPending > 0 || info.NumAckPending > 0 {
			continue
		}
		delete(s.readers, account)
		idle = append(idle, l)
	}
	return idle
}

// retire stops idle readers, trims their accounts, deletes their
// consumers and tells ingest.
func (s *Service) retire(ctx context.Context, idle []*reader) {
	for _, l := range idle {
		l.stop()
		s.trimAccount(ctx, l) // what stays would come again to the account's next consumer
		err := s.streamOf(l.account).DeleteConsumer(ctx, names.ConsumerName(l.account))
		if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			s.log.Warn().Err(err).Str("account", l.account).Msg("deleting an idle consumer")
			continue
		}
		s.mu.Lock()
		delete(s.known, l.account)
		delete(s.startFails, l.account)
		s.mu.Unlock()
		if err := s.owners.Release(ctx, l.account); err != nil {
			s.log.Warn().Err(err).Str("account", l.account).Msg("releasing an idle account's lease")
		}
		_ = s.nc.Publish(s.subj.AccountGone(), []byte(l.account))
		s.log.Debug().Str("account", l.account).Msg("idle account retired")
	}
}

// adoptOrphans gives every account with events waiting in EVENTS a
// consumer and a reader: an event published while its account's consumer was
// being retired is never stranded. It holds s.mu only to read and update
// the readers, not across the server calls.
func (s *Service) adoptOrphans(ctx context.Context, skipKnown bool) error {
	seen := map[string]bool{}
	var orphans []string
	for p, st := range s.streams {
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(s.subj.EventsIn(p)))
		if err != nil {
			return err
		}
		prefix := strings.TrimSuffix(s.subj.EventsIn(p), ">")
		s.mu.Lock()
		for subject := range info.State.Subjects {
			account, _, _ := strings.Cut(strings.TrimPrefix(subject, prefix), ".")
			if _, ok := s.readers[account]; ok || s.starting[account] || skipKnown && s.known[account] || seen[account] || names.ValidateAccount(account) != nil {
				continue
			}
			seen[account] = true
			orphans = append(orphans, account)
		}
		s.mu.Unlock()
	}
	for _, account := range orphans {
		// Most have a consumer: accounts whose announcement is still on
		// its way (ingest makes the consumer before it enqueues), or, on
		// a trimmed EVENTS, whose settled messages are not trimmed yet
		// (another replica's accounts among them). One look, and they are
		// known; the announcement or the owner's relist starts the reader.
		_, err := s.streamOf(account).Consumer(ctx, names.ConsumerName(account))
		if err == nil {
			s.mu.Lock()
			s.known[account] = true
			s.mu.Unlock()
			if !skipKnown {
				s.ensureReader(account)
			}
			continue
		}
		if !errors.Is(err, jetstream.ErrConsumerNotFound) {
			continue
		}
		if err := s.adopt(ctx, account); err != nil {
			s.log.Warn().Err(err).Str("account", account).Msg("adopting an account with waiting events")
		}
	}
	return nil
}

// adopt makes account's consumer and starts its reader.
func (s *Service) adopt(ctx context.Context, account string) error {
	cc, err := accounts.ConsumerConfig(s.conf(), s.subj.Parts(), account)
	if err != nil {
		return err
	}
	if _, err := accounts.Put(ctx, s.streamOf(account).CreateOrUpdateConsumer, cc); err != nil {
		return err
	}
	s.ensureReader(account)
	return nil
}

// consumerLost handles a reader whose pulls found no consumer to answer
// them: a memory-backed consumer is lost with its server (a restart, a
// node down). If it is gone, the reader stops and the account is adopted
// again at once, its messages kept in the stream; a consumer that is
// still there was a passing gap (a leader moving).
func (s *Service) consumerLost(account string, l *reader) {
	ctx, cancel := context.WithTimeout(s.runCtx, 10*time.Second)
	defer cancel()
	_, err := s.streamOf(account).Consumer(ctx, names.ConsumerName(account))
	if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return
	}
	s.readerGone(account, l)
	if err := s.adopt(ctx, account); err != nil && s.runCtx.Err() == nil {
		s.log.Warn().Err(err).Str("account", account).Msg("making a lost consumer again (the next sweep tries again)")
	}
}

// readerGone forgets a reader whose consumer was deleted (by another replica
// retiring it) or lost; the next announcement or sweep starts it again,
// once its calls have returned: until then the account is handing, so no
// other reader of it starts here (an announcement, the adoption sweep),
// whose calls its concurrency would not count with these.
func (s *Service) readerGone(account string, l *reader) {
	s.mu.Lock()
	if s.readers[account] != l {
		s.mu.Unlock()
		return
	}
	delete(s.readers, account)
	delete(s.known, account)
	delete(s.startFails, account)
	done := make(chan struct{})
	s.handing[account] = done
	s.mu.Unlock()
	l.stop()
	s.giveBack(account)
	s.mu.Lock()
	delete(s.handing, account)
	s.mu.Unlock()
	close(done)
}
