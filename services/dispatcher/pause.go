package dispatcher

import (
	"context"
	"time"

	"github.com/tenaz/tenaz/pkg/accounts"
)

// An account is paused by an operator (pkg/accounts.Pause, in tenaz_ops),
// by an open breaker of one of its targets, or while its stored
// definition is left out (config.Config.LeftOut): its tail then reads
// nothing (no call, no attempt burnt) and its events wait in EVENTS. Each
// replica watches the operators' pauses, and a pause or a breaker's change
// wakes the account's tail, so a resumed account goes on at once; a
// left-out account is looked at again every leftOutWait.

// PausedUntil is until when account's dispatch is paused on this replica
// (zero: it runs), by an operator's pause, an open breaker or its stored
// definition left out.
func (s *Service) PausedUntil(account string) time.Time { return s.pausedUntil(account) }

// pausedUntil is until when account's dispatch is paused (zero: it runs).
func (s *Service) pausedUntil(account string) time.Time {
	now := time.Now()
	if _, out := s.conf().LeftOut[account]; out {
		return now.Add(leftOutWait)
	}
	p, ok := s.paused.Get(account)
	return accounts.Want(p, ok, s.breakers.OpenUntil(account), now)
}

// leftOutWait is how often a left-out account's tail looks whether its
// definition is in force again.
const leftOutWait = time.Second

// watchPauses keeps s.paused current and wakes the tail of each account
// whose pause changed; it returns once the pauses held now are known.
func (s *Service) watchPauses(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, accounts.FollowWait)
	defer cancel()
	stop, err := s.pauses.Follow(ctx, &s.paused, func(account string) {
		go s.wakeTail(account) // not here: Start holds s.mu while the pauses held now are passed
	})
	if err != nil {
		return err
	}
	context.AfterFunc(s.runCtx, stop)
	return nil
}

// wakeTail wakes account's tail, if this replica runs one.
func (s *Service) wakeTail(account string) {
	s.mu.Lock()
	l := s.readers[account]
	s.mu.Unlock()
	if l != nil {
		l.tail.poke()
	}
}
