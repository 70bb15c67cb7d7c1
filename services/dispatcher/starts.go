package dispatcher

import (
	"context"
	"time"
)

// Readers of new accounts are started by startsAtOnce workers, outside
// s.mu. Each start waits on a few server round trips (the lease, the
// auto limit): made one at a time under s.mu they took ~4.5 ms
// an account, half the time 2,000 new accounts took to get their first
// events. The accounts wait in a queue, not in a goroutine each, so that
// 100,000 new accounts cost a slice, not 100,000 goroutines.

// startsAtOnce is how many readers a replica starts at once.
const startsAtOnce = 16

// queueStartLocked queues the start of account's reader. Callers hold s.mu.
func (s *Service) queueStartLocked(account string) {
	s.starting[account] = true
	s.startQueue = append(s.startQueue, account)
	s.wakeStarter()
}

func (s *Service) wakeStarter() {
	select {
	case s.startWake <- struct{}{}:
	default:
	}
}

// dropStartsLocked forgets the queued starts of a replica that stops
// serving; those under way end by themselves (startAccount). Callers hold
// s.mu.
func (s *Service) dropStartsLocked() {
	for _, account := range s.startQueue {
		delete(s.starting, account)
	}
	s.startQueue = nil
}

// startLoop is a worker: woken by a queued start, it starts readers until
// the queue is empty.
func (s *Service) startLoop() {
	defer s.bg.Done()
	for {
		select {
		case <-s.runCtx.Done():
			return
		case <-s.startWake:
		}
		for {
			account, ok := s.nextStart()
			if !ok {
				break
			}
			s.startAccount(account)
		}
	}
}

// nextStart takes the next queued account and counts its start as under
// way; ok is false when none is queued or the replica stops serving. A
// worker that leaves more queued wakes another.
func (s *Service) nextStart() (account string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.serving || len(s.startQueue) == 0 {
		return "", false
	}
	account, s.startQueue = s.startQueue[0], s.startQueue[1:]
	if len(s.startQueue) == 0 {
		s.startQueue = nil // let the backing array go
	} else {
		s.wakeStarter()
	}
	s.starts.Add(1)
	return account, true
}

// startAccount takes account's lease (the reader pulls only once it holds
// it) and starts its reader, then keeps it only if the replica still
// serves; one whose account moved on meanwhile is handed over at once
// (reconcileLocked). A start that failed on a server call is tried again
// (retryStart).
func (s *Service) startAccount(account string) {
	defer s.starts.Done()
	var l *reader
	var failed error
	defer func() {
		s.mu.Lock()
		delete(s.starting, account)
		keep := l != nil && s.serving
		if keep {
			delete(s.startFails, account)
			s.readers[account] = l
			s.reconcileLocked(account)
		} else if failed != nil && s.serving {
			s.retryStartLocked(account)
		}
		s.mu.Unlock()
		if l != nil && !keep { // stopping: the replica gives back what it started
			l.stop()
			s.giveBack(account)
		}
	}()
	ok, err := s.own(account)
	if err != nil {
		s.log.Warn().Err(err).Str("account", account).Msg("taking the account's lease")
		failed = err
	}
	if !ok {
		return
	}
	if h := s.o.Hooks; h != nil && h.BeforeStart != nil {
		if failed = h.BeforeStart(account); failed != nil {
			return
		}
	}
	if l, err = s.startReader(account); err != nil {
		s.log.Warn().Err(err).Str("account", account).Msg("starting account reader")
		failed = err
	}
}

// own reports whether this replica may run account's reader: the account
// is assigned to it and it holds (or now takes) the lease. One it takes
// from another replica paces its first call an interval after that
// replica's last may have gone (pacer.takenOver: when it gave the lease
// back, or now when it died); one nobody held before, or that it gave
// back itself (retired while idle) and nobody held since, is paced by its
// own last call. err is a failed server call: whether it may is then
// unknown.
func (s *Service) own(account string) (bool, error) {
	if !s.owners.Assigned(account) {
		return false, nil
	}
	ctx, cancel := context.WithTimeout(s.runCtx, 5*time.Second)
	defer cancel()
	ok, since, err := s.owners.Acquire(ctx, account)
	if ok && !since.IsZero() {
		s.mu.Lock()
		p := s.pacerLocked(account)
		s.mu.Unlock()
		p.takenOver(since)
	}
	return ok, err
}

// retryWait is the wait before an owner's step (a start, a release) that
// failed n times in a row is tried again: 250 ms, doubling to 8 s.
func retryWait(n int) time.Duration {
	return min(250*time.Millisecond<<min(n, 6), 8*time.Second)
}

// retryStartLocked tries account's start again after a wait (a start
// fails on a server call while the owners' bucket changes leader). The
// watch has no news of an account whose messages are there already, and
// the sweep that would find it runs every Adopt, or much later with many
// accounts. Callers hold s.mu.
func (s *Service) retryStartLocked(account string) {
	n := s.startFails[account]
	s.startFails[account] = n + 1
	time.AfterFunc(retryWait(n), func() {
		if s.runCtx.Err() == nil {
			s.ensureReader(account)
		}
	})
}
