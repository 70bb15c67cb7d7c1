package dispatcher

import (
	"context"
	"time"

	"github.com/tenaz/tenaz/pkg/owner"
	"github.com/tenaz/tenaz/pkg/queue"
)

// One replica owns an account at a time (pkg/owner), so the account's
// concurrency, rate and breaker count are this process's and hold with any
// number of replicas. Owning takes two things: the account is assigned to
// this replica among the live ones, and this replica holds its lease. The
// lease is taken before the reader's first read and given back only after
// its last call returned, so while a handover is under way the account is
// served by the old owner until it is done, then by the new one.
//
// A replica that may have been taken for dead (its last heartbeat that got
// through was sent more than an Expiry ago: a long stall, SIGSTOP) claims
// nothing until it is current again (owner.Group.Current), so even a
// replica that wakes after the others moved its accounts makes no call
// beside the new owner's.

// ownersChanged is pkg/owner's OnChange: every account is looked at
// again when the live replicas changed, only those whose lease changed
// otherwise.
func (s *Service) ownersChanged(c owner.Change) {
	if c.Replicas {
		s.reconcile()
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.serving {
		return
	}
	for _, account := range c.Leases {
		if s.known[account] {
			s.reconcileLocked(account)
		}
	}
}

// reconcile starts the readers of the accounts this replica now owns and
// hands over those it no longer does: after the live replicas changed,
// and after a handover, which the account may have come back from.
func (s *Service) reconcile() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.serving {
		return
	}
	for account := range s.known {
		s.reconcileLocked(account)
	}
}

// reconcileLocked is reconcile's step for one account. Callers hold s.mu.
func (s *Service) reconcileLocked(account string) {
	l, running := s.readers[account]
	switch {
	case running && !s.owners.Holds(account):
		// Taken over while this replica was taken for dead: stop at
		// once; the lease is the new owner's.
		delete(s.readers, account)
		s.handOver(account, l, false)
	case running && !s.owners.Assigned(account):
		delete(s.readers, account)
		s.handOver(account, l, true)
	case !running:
		s.ensureReaderLocked(account)
		s.releaseStrayLocked(account)
	}
}

// releaseStrayLocked gives account back if this replica holds its lease
// with no reader, none starting or being handed over, and the account is
// another replica's now: a lease kept past its reader (a reload's
// restart of the reader, a release that failed) would otherwise keep the
// next owner out for as long as this replica lives. Callers hold s.mu.
func (s *Service) releaseStrayLocked(account string) {
	_, running := s.readers[account]
	_, handing := s.handing[account]
	if running || handing || s.starting[account] || !s.owners.Holds(account) || s.owners.Assigned(account) {
		return
	}
	s.handOver(account, nil, true)
}

// releaseStrays is releaseStrayLocked for every lease this replica
// holds: the sweep's backstop for an account it no longer knows of (an
// idle one retired, whose release failed).
func (s *Service) releaseStrays() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.serving {
		return
	}
	for _, account := range s.owners.Held() {
		s.releaseStrayLocked(account)
	}
}

// handOver stops l (if any) in the background and, when release is set,
// gives the account back once its last call returned: it releases the
// lease, so the next owner starts at once. Callers hold s.mu.
func (s *Service) handOver(account string, l *reader, release bool) {
	done := make(chan struct{})
	s.handing[account] = done
	s.log.Debug().Str("account", account).Bool("release", release).Msg("handing the account over")
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		if l != nil {
			l.stop()
		}
		if release {
			s.giveBackUntilDone(account)
		}
		s.mu.Lock()
		delete(s.handing, account)
		if s.serving {
			s.reconcileLocked(account) // it may have come back to this replica meanwhile
		}
		s.mu.Unlock()
		close(done)
		s.log.Info().Str("account", account).Bool("released", release).Msg("account handed over")
	}()
}

// giveBack releases account's lease; its reader is stopped and its calls
// have returned.
func (s *Service) giveBack(account string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var err error
	if h := s.o.Hooks; h != nil && h.BeforeRelease != nil {
		err = h.BeforeRelease(account)
	}
	if err == nil {
		err = s.owners.Release(ctx, account)
	}
	if err != nil {
		s.log.Warn().Err(err).Str("account", account).Msg("releasing the account's lease")
	}
	return err
}

// giveBackUntilDone gives back an account handed over to another replica,
// trying again while the release fails: the lease of a live replica is
// never taken from it, so until this one releases it the account's new
// owner cannot start, and nothing else would tell it to. It stops trying
// once the account is this replica's again or the replica stops (its
// leases are then taken as a dead replica's).
func (s *Service) giveBackUntilDone(account string) {
	for n := 0; s.giveBack(account) != nil; n++ {
		s.mu.Lock()
		again := s.serving && !s.owners.Assigned(account)
		s.mu.Unlock()
		if !again || !queue.SleepUntil(s.runCtx, time.Now().Add(retryWait(n))) {
			return
		}
	}
}

// Owner returns the replica that holds account's lease ("" when none does).
func (s *Service) Owner(account string) string {
	if s.owners == nil {
		return ""
	}
	return s.owners.Holder(account)
}
