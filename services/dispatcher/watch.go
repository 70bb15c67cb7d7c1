package dispatcher

import (
	"context"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/tenaz/tenaz/pkg/names"
)

// Each replica follows the dispatch subjects of every partition with one
// ordered consumer, headers only, from the messages stored after it
// started: the watch. It wakes the tail of the account a message is for,
// or starts one when the account is this replica's and has none (a new
// account, an idle one's next event, a delayed event that fired). What
// was stored before it started is found by the sweep (adoptLoop), which
// lists the accounts with messages in EVENTS. An ordered consumer makes
// itself again after a gap or a lost server, from where it was, so a
// message is reported late, never lost. A tail that has caught up reads
// only when the watch reports a message past its cursor; as a backstop,
// the sweep (adoptOrphans) makes a tail look again when its account has
// messages in EVENTS though the tail read and trimmed all it knew of.
//
// A work-queue EVENTS (a store from before, which the server cannot turn
// into a trimmed one) takes no watch: the server refuses a consumer that
// does not acknowledge on a work queue, and an acknowledged message would
// be deleted. There a subscription to the dispatch subjects hears what is
// published to them (watchPublishes), and the sweep that adopts accounts
// (every Adopt, 1 s) also makes the tails of the accounts with messages
// look again, for what the server itself stores there: the schedules that
// fire.

// watch follows partition p's dispatch subjects until ctx ends.
func (s *Service) watch(ctx context.Context, p int) (jetstream.ConsumeContext, error) {
	c, err := s.js.OrderedConsumer(ctx, s.subj.EventsStreamOf(p), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{s.subj.EventsIn(p)},
		DeliverPolicy:  jetstream.DeliverNewPolicy,
		HeadersOnly:    true,
		NamePrefix:     names.ConsumerWatchPrefix + nuid.Next(), // the store's users can tell whose it is
	})
	if err != nil {
		return nil, fmt.Errorf("watching partition %d: %w", p, err)
	}
	accountOf := s.accountIn(p)
	return c.Consume(func(m jetstream.Msg) {
		meta, err := m.Metadata()
		if err != nil {
			return
		}
		s.seen(accountOf(m.Subject()), meta.Sequence.Stream)
	})
}

// watchPublishes follows what is published to a work-queue partition p's
// dispatch subjects (see above).
func (s *Service) watchPublishes(p int) (*nats.Subscription, error) {
	accountOf := s.accountIn(p)
	sub, err := s.nc.Subscribe(s.subj.EventsIn(p), func(m *nats.Msg) { s.seen(accountOf(m.Subject), 0) })
	if err != nil {
		return nil, fmt.Errorf("watching partition %d: %w", p, err)
	}
	return sub, nil
}

// accountIn returns the account of one of partition p's dispatch subjects
// (<root>.events.<account>.<kind>).
func (s *Service) accountIn(p int) func(subject string) string {
	prefix := strings.TrimSuffix(s.subj.EventsIn(p), ">")
	return func(subject string) string {
		account, _, _ := strings.Cut(strings.TrimPrefix(subject, prefix), ".")
		return account
	}
}

// seen is the watch's news that account has message seq (0: a message
// published now, whose sequence is not known).
func (s *Service) seen(account string, seq uint64) {
	s.mu.Lock()
	l, ok := s.readers[account]
	if !ok && s.serving {
		s.ensureReaderLocked(account)
	}
	s.mu.Unlock()
	if ok {
		l.tail.notify(seq)
	}
}
