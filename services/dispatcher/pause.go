package dispatcher

import (
	"context"
	"sync"
	"time"

	"github.com/tenaz/tenaz/pkg/accounts"
)

// An account is paused by an operator (pkg/accounts.Pause, in tenaz_ops)
// or by an open breaker of one of its targets: its tail then reads
// nothing (no call, no attempt burnt) and its events wait in EVENTS. Each
// replica watches the operators' pauses, and a pause or a breaker's change
// wakes the account's tail, so a resumed account goes on at once.

// pauseBook is the operators' pauses as this replica last heard them.
type pauseBook struct {
	mu sync.Mutex
	m  map[string]accounts.Pause
}

func (b *pauseBook) get(account string) (accounts.Pause, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p, ok := b.m[account]
	return p, ok
}

func (b *pauseBook) set(account string, p accounts.Pause, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if ok {
		b.m[account] = p
	} else {
		delete(b.m, account)
	}
}

// PausedUntil is until when account's dispatch is paused on this replica
// (zero: it runs), by an operator's pause or an open breaker.
func (s *Service) PausedUntil(account string) time.Time { return s.pausedUntil(account) }

// pausedUntil is until when account's dispatch is paused (zero: it runs).
func (s *Service) pausedUntil(account string) time.Time {
	p, ok := s.paused.get(account)
	return accounts.Want(p, ok, s.breakers.OpenUntil(account), time.Now())
}

// watchPauses keeps s.paused current and wakes the tail of each account
// whose pause changed; it returns once the pauses held now are known.
func (s *Service) watchPauses(ctx context.Context) error {
	return s.pauses.Watch(ctx, func(account string, p accounts.Pause, ok bool) {
		s.paused.set(account, p, ok)
		go s.wakeTail(account) // not here: Start holds s.mu while the pauses held now are passed
	})
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
