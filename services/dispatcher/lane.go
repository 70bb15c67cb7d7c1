package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/tenaz"
)

// lane consumes one account's consumer with the account's concurrency.
type lane struct {
	account string
	cc      jetstream.ConsumeContext
	sem     chan struct{}
	wg      sync.WaitGroup
}

func (s *Service) startLane(account string) (*lane, error) {
	acct := s.cfg.Account(account)
	conc := acct.Concurrency
	if conc <= 0 {
		conc = 8
	}
	ctx, cancel := context.WithTimeout(s.runCtx, 10_000_000_000)
	defer cancel()
	cons, err := s.stream.Consumer(ctx, tenaz.ConsumerName(account))
	if err != nil {
		return nil, fmt.Errorf("consumer of %s: %w", account, err)
	}
	l := &lane{account: account, sem: make(chan struct{}, conc)}
	l.cc, err = cons.Consume(func(m jetstream.Msg) {
		select {
		case l.sem <- struct{}{}:
		case <-s.runCtx.Done():
			return // stopping hard: leave it unacked for redelivery
		}
		l.wg.Add(1)
		go func() {
			defer func() { <-l.sem; l.wg.Done() }()
			s.process(s.runCtx, m)
		}()
	}, jetstream.PullMaxMessages(conc), jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		if !errors.Is(err, jetstream.ErrNoHeartbeat) && s.runCtx.Err() == nil {
			s.log.Debug().Err(err).Str("account", account).Msg("consume")
		}
	}))
	if err != nil {
		return nil, fmt.Errorf("consume %s: %w", account, err)
	}
	return l, nil
}
