package dispatcher

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/queue"
)

// Many accounts: a reader whose account has been idle for IdleAfter
// (nothing read, nothing unsettled) is stopped, its account trimmed and
// its lease released, so 10,000 mostly quiet accounts keep no reader. The
// account's next message starts one again (the watch), and the sweep
// (adoptOrphans) starts one for any account with messages waiting in
// EVENTS and none running.

// idleLocked takes the idle readers out of service and returns them; the
// caller retires them (retire) after releasing s.mu. Callers hold s.mu.
func (s *Service) idleLocked() []*reader {
	if s.o.IdleAfter < 0 {
		return nil
	}
	var idle []*reader
	for account, l := range s.readers {
		if time.Since(time.Unix(0, l.last.Load())) < s.o.IdleAfter || !l.tail.idle() {
			continue
		}
		delete(s.readers, account)
		s.handing[account] = make(chan struct{})
		idle = append(idle, l)
	}
	return idle
}

// retire stops idle readers, trims their accounts and releases their
// leases. Until then each account is handing, so no second reader of it
// starts here; a message that came meanwhile is found by the next sweep.
func (s *Service) retire(ctx context.Context, idle []*reader) {
	for _, l := range idle {
		l.stop()
		s.trimAccount(ctx, l)
		if err := s.owners.Release(ctx, l.account); err != nil {
			s.log.Warn().Err(err).Str("account", l.account).Msg("releasing an idle account's lease")
		}
		s.mu.Lock()
		done := s.handing[l.account]
		delete(s.handing, l.account)
		delete(s.known, l.account)
		delete(s.startFails, l.account)
		s.mu.Unlock()
		close(done)
		s.log.Debug().Str("account", l.account).Msg("idle account retired")
	}
}

// adoptOrphans starts a reader for every account of this replica with
// messages in EVENTS and none running: the accounts with events from
// before this replica started (the watch reports only what is stored
// after it started), and any whose start was missed. A running reader
// whose tail read and trimmed everything it knows of looks again (a
// report the watch never gave); on a work queue every running one does
// (watch.go). It holds s.mu only to read and update the readers, not
// across the server calls.
func (s *Service) adoptOrphans(ctx context.Context) error {
	for p, st := range s.streams {
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(s.subj.EventsIn(p)))
		if err != nil {
			return err
		}
		accountOf := s.accountIn(p)
		s.mu.Lock()
		watched := queue.Trims(st)
		for subject := range info.State.Subjects {
			account := accountOf(subject)
			if l, ok := s.readers[account]; ok {
				// The backstop to the watch: a tail that read everything it
				// knows of and trimmed it, whose account still has messages,
				// missed a report. A work queue has no watch (watch.go).
				if !watched || l.tail.readAllBelow(l.trim.floor.Load()) {
					l.tail.lookAgain()
				}
				continue
			}
			if !s.starting[account] && s.serving {
				s.ensureReaderLocked(account)
			}
		}
		s.mu.Unlock()
	}
	return nil
}
