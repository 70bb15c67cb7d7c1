package ingest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/directget"
	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/store"
)

// drainBudget is how much of an anchor's drain its loop does before the
// other accounts of the loop take their turn: a batch of unordered
// submissions (accepted together), or orderedCost's worth of ordered ones
// (each several round trips one after another).
const (
	drainBudget = maxBatch
	orderedCost = maxBatch / 4
)

// orderedLoop accepts one queue's submissions, each account's in order,
// the accounts in turn.
func (s *Service) orderedLoop(ctx context.Context, in *orderedQueue) {
	defer s.wg.Done()
	done := make(chan struct{})
	defer close(done)
	go func() {
		t := time.NewTicker(queuedProgressEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				in.progress()
			}
		}
	}()
	for {
		e, ok := in.pop()
		if !ok {
			return
		}
		switch {
		case s.take(ctx, e):
		case in.closing() && !e.notBefore.IsZero():
			_ = e.m.Nak() // stopping: what waits goes to another replica, which drains behind it
		default:
			in.putBack(e)
		}
	}
}

// take accepts an entry, or the next chunk of an anchor's drain, and
// reports whether the entry is done; an anchor with more to read is not.
func (s *Service) take(ctx context.Context, e *orderedEntry) (done bool) {
	if !e.accepted {
		m := &heldMsg{Msg: e.m}
		s.acceptOrdered(ctx, m, e.ordered)
		if m.handedBack {
			if ctx.Err() != nil {
				_ = e.m.Nak() // stopping: delivered again, it drains its account
				return true
			}
			e.later() // kept here rather than handed back, which would hold its slot in the ack window all the same
			return false
		}
		e.wait, e.notBefore = 0, time.Time{}
		e.accepted, e.settle = true, m.settle
		if e.redelivered {
			// Maybe an anchor whose ingest died: nothing says how far it
			// reached, so read what INTAKE holds of the account after it.
			s.scanMu.Lock()
			e.next = max(e.seq, s.drained[e.account]) + 1 // read already by a drain like this one
			s.scanMu.Unlock()
			e.through = max(e.through, s.intakeEnd(ctx))
		}
	}
	if e.draining() {
		if !s.drain(ctx, e) {
			_ = e.m.Nak() // stopping: delivered again, it drains its account
			return true
		}
		if e.draining() {
			return false
		}
	}
	if e.redelivered {
		s.scanMu.Lock()
		s.drained[e.account] = max(s.drained[e.account], e.through)
		s.scanMu.Unlock()
	}
	if e.settle != nil {
		_ = e.settle()
	}
	return true
}

// intakeEnd is INTAKE's last sequence, or, when it cannot be read, one
// past any there will be (a drain then ends at the account's last
// message; the one past it still fits a sequence).
func (s *Service) intakeEnd(ctx context.Context) uint64 {
	info, err := s.intake.Info(ctx)
	if err != nil {
		return math.MaxUint64 / 2
	}
	return info.State.LastSeq
}

// drain accepts the next chunk of the submissions an anchor stands for,
// read from INTAKE by its account's subjects: those delegated to it, or,
// for a message delivered again, every one not settled yet. Ordered ones
// are accepted one at a time (after the older ones of their account still
// in INTAKE, as any), the others together as a batch. What fails (a
// read, a refusal DEAD has no room for) waits at the head of the anchor's
// submissions, and the anchor waits (later). False when the service
// stops.
func (s *Service) drain(ctx context.Context, e *orderedEntry) bool {
	filter := s.subj.IntakeOf(e.account)
	var batch []jetstream.Msg
	var again []*jetstream.RawStreamMsg // handed back, taken again after a wait
	failed := false                     // a read failed
	for budget := drainBudget; budget > 0 && e.draining() && len(again) == 0 && !failed; {
		if len(e.ahead) == 0 {
			msgs, err := s.readBack(ctx, filter, e.next, maxBatch)
			if h := s.o.Hooks; err == nil && h != nil && h.StaleRead != nil && h.StaleRead(e.account) {
				msgs = nil
			}
			if err != nil {
				if ctx.Err() != nil {
					return false
				}
				s.log.Warn().Err(err).Str("account", e.account).Msg("reading submissions behind an anchor failed; will retry")
				failed = true
				continue
			}
			if len(msgs) == 0 && e.owes(e.next) {
				// A submission delegated to the anchor was acked for it and
				// is still in INTAKE (the anchor holds the ack floor): a
				// replica behind its stream's leader answered the direct
				// get. Read again, rather than take it for none.
				s.log.Debug().Str("account", e.account).Uint64("from", e.next).Msg("a replica behind its leader answered the read behind an anchor; will read again")
				failed = true
				continue
			}
			e.next = e.through + 1 // nothing more of the account up to through, unless read
			for _, raw := range msgs {
				if raw.Sequence > e.through {
					break
				}
				e.ahead = append(e.ahead, raw)
				e.next = raw.Sequence + 1
			}
			continue
		}
		raw := e.ahead[0]
		e.ahead[0] = nil
		e.ahead = e.ahead[1:]
		if _, mine := e.delegated[raw.Sequence]; !mine && (!e.redelivered || s.settled(ctx, raw)) {
			continue // another's: a replica's or a batch loop's that has it unacked
		}
		m := &storedMsg{raw: raw, anchor: e.m}
		if _, ordered := s.orderedSubmission(raw.Subject, raw.Header); !ordered {
			batch = append(batch, m)
			budget--
			continue
		}
		budget -= orderedCost
		if s.acceptOrdered(ctx, m, true); m.handedBack {
			again = append(again, raw)
		}
	}
	s.acceptBatch(ctx, batch)
	for _, m := range batch {
		if m := m.(*storedMsg); m.handedBack {
			again = append(again, m.raw)
		}
	}
	if len(again) > 0 && ctx.Err() != nil {
		return false
	}
	if len(again) == 0 && !failed {
		e.wait, e.notBefore = 0, time.Time{}
		return true
	}
	slices.SortFunc(again, func(a, b *jetstream.RawStreamMsg) int { return cmp.Compare(a.Sequence, b.Sequence) })
	e.ahead = append(again, e.ahead...)
	e.later()
	return true
}

// readBack reads up to n of INTAKE's messages on filter from sequence
// from, in one direct get (one at a time from a store whose INTAKE
// answers none: applied before it did).
func (s *Service) readBack(ctx context.Context, filter string, from uint64, n int) ([]*jetstream.RawStreamMsg, error) {
	msgs, _, err := s.gets.Get(ctx, s.intake.CachedInfo().Config.Name, directget.Request{Seq: from, NextFor: filter, Batch: n})
	if errors.Is(err, directget.ErrNoDirect) {
		raw, err := s.intake.GetMsg(ctx, from, jetstream.WithGetMsgSubject(filter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		return []*jetstream.RawStreamMsg{raw}, nil
	}
	if err != nil {
		return nil, err
	}
	out := make([]*jetstream.RawStreamMsg, 0, len(msgs))
	for _, m := range msgs {
		raw, err := directget.Stored(m)
		if err != nil {
			return nil, err
		}
		out = append(out, raw)
	}
	return out, nil
}

// settled reports whether a submission behind a message delivered again
// is another path's to settle: one an HTTP handler may wait for (never
// delegated, see answered), or one not ordered that is accepted already
// (a batch loop's). One that is not ordered under the config of now but
// has no record may have been delegated (or ordered under the config
// before a reload), so it is accepted here; should a batch loop have it
// too, the accept is idempotent.
func (s *Service) settled(ctx context.Context, raw *jetstream.RawStreamMsg) bool {
	if s.replies.answered(raw.Header) {
		return true // never delegated: its own delivery settles it
	}
	if _, ordered := s.orderedSubmission(raw.Subject, raw.Header); ordered {
		return false
	}
	f, serr := s.fieldsOf(raw.Subject, raw.Header)
	if serr != nil {
		return false
	}
	env, serr := s.build(f, raw.Data, raw.Time)
	if serr != nil {
		return false
	}
	_, _, err := s.st.Get(ctx, env.Account, env.ID)
	return err == nil
}

// acceptOrdered accepts one ordered submission, after the older ones of
// its account still waiting in INTAKE when older is set. A failure is
// retried in place (with progress sent, so the message is not redelivered
// meanwhile) rather than handed back, which would let the next submission
// overtake it.
func (s *Service) acceptOrdered(ctx context.Context, m jetstream.Msg, older bool) {
	env, ok := s.parseIntake(ctx, m)
	if !ok {
		return
	}
	wait := 100 * time.Millisecond
	for {
		var err error
		if older {
			err = s.acceptOlder(ctx, m, env)
		}
		var rec state.Record
		var created bool
		if err == nil {
			rec, created, err = s.accept(ctx, env)
		}
		if serr := (*submitError)(nil); err == nil || ctx.Err() != nil || errors.As(err, &serr) {
			s.settle(ctx, m, env, rec, created, err) // a refusal is final: it is not retried in place
			if err == nil && older {
				// It and every older one are accepted: the next scan
				// starts after it, not at it again.
				if meta, merr := m.Metadata(); merr == nil {
					s.scannedTo(env.Account, meta.Sequence.Stream)
				}
			}
			return
		}
		s.log.Warn().Err(err).Str("event_id", env.ID).Msg("accepting an ordered event failed; retrying in place")
		_ = m.InProgress()
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// heldMsg is an entry's own message while it is accepted: its ack or
// termination is kept for the entry's settle (an anchor's waits for its
// drain), and a hand-back is noted for the entry to be taken again later
// (take), not made.
type heldMsg struct {
	jetstream.Msg
	settle     func() error
	handedBack bool
}

func (h *heldMsg) Ack() error  { h.settle = h.Msg.Ack; return nil }
func (h *heldMsg) Term() error { h.settle = h.Msg.Term; return nil }
func (h *heldMsg) TermWithReason(reason string) error {
	h.settle = func() error { return h.Msg.TermWithReason(reason) }
	return nil
}
func (h *heldMsg) DoubleAck(context.Context) error  { return h.Ack() }
func (h *heldMsg) Nak() error                       { h.handedBack = true; return nil }
func (h *heldMsg) NakWithDelay(time.Duration) error { h.handedBack = true; return nil }

// storedMsg is a submission an anchor stands for, read back from INTAKE.
// It was acked when it arrived, so its settling is a no-op; a hand-back is
// noted for the drain to retry it, and progress is the anchor's.
type storedMsg struct {
	raw        *jetstream.RawStreamMsg
	anchor     jetstream.Msg
	handedBack bool
}

var _ jetstream.Msg = (*storedMsg)(nil)

func (m *storedMsg) Metadata() (*jetstream.MsgMetadata, error) {
	return &jetstream.MsgMetadata{Sequence: jetstream.SequencePair{Stream: m.raw.Sequence}, NumDelivered: 1, Timestamp: m.raw.Time}, nil
}
func (m *storedMsg) Data() []byte                     { return m.raw.Data }
func (m *storedMsg) Headers() nats.Header             { return m.raw.Header }
func (m *storedMsg) Subject() string                  { return m.raw.Subject }
func (m *storedMsg) Reply() string                    { return "" }
func (m *storedMsg) Ack() error                       { return nil }
func (m *storedMsg) DoubleAck(context.Context) error  { return nil }
func (m *storedMsg) Term() error                      { return nil }
func (m *storedMsg) TermWithReason(string) error      { return nil }
func (m *storedMsg) InProgress() error                { return m.anchor.InProgress() }
func (m *storedMsg) Nak() error                       { m.handedBack = true; return nil }
func (m *storedMsg) NakWithDelay(time.Duration) error { m.handedBack = true; return nil }

// acceptOlder accepts, before an ordered submission, the older ordered
// submissions of its account that are still in INTAKE and not accepted
// yet: taken by an ingest that died (they come back only after the
// consumer's AckWait, 30s) or by another replica that has not got to them.
// Without it a lane's later submission overtakes them and they join the
// lane at its tail (docs/chaos.md, bug 3). What INTAKE still holds of the
// account below this submission and above the trimmed floor is what may
// not be settled (a work queue holds only that; a trimmed INTAKE also what
// was settled since the last trim, which the record lookup skips); the
// next scan of the account starts where this one ended.
func (s *Service) acceptOlder(ctx context.Context, m jetstream.Msg, env event.Envelope) error {
	meta, err := m.Metadata()
	if err != nil {
		return nil
	}
	seq := meta.Sequence.Stream
	s.scanMu.Lock()
	from := max(s.scanned[env.Account], s.trim.Floor()) + 1
	s.scanMu.Unlock()
	filter := s.subj.IntakeOf(env.Account)
	for from < seq {
		var raw *jetstream.RawStreamMsg
		var err error = jetstream.ErrMsgNotFound // as a store behind would answer (StaleRead)
		if h := s.o.Hooks; h == nil || h.StaleRead == nil || !h.StaleRead(env.Account) {
			raw, err = s.intake.GetMsg(ctx, from, jetstream.WithGetMsgSubject(filter))
		}
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			// This submission (seq) is one of the account's, so a store
			// that has none from `from` on is a replica behind its
			// stream's leader (a direct get). Scanned past, the older
			// ones it did not have would join their lane behind this one.
			return fmt.Errorf("reading the account's older submissions: a replica behind its leader answered: %w", err)
		}
		if err != nil {
			return err
		}
		if raw.Sequence >= seq {
			break
		}
		from = raw.Sequence + 1
		f, serr := s.fieldsOf(raw.Subject, raw.Header)
		var older event.Envelope
		if serr == nil {
			older, serr = s.build(f, raw.Data, raw.Time)
		}
		if serr != nil || older.OrderingKey == "" {
			continue // not ordered, or refused: its own delivery settles it
		}
		if _, _, err := s.st.Get(ctx, older.Account, older.ID); err == nil {
			continue
		} else if !errors.Is(err, store.ErrNotFound) {
			return err
		}
		_, created, err := s.accept(ctx, older)
		if errors.As(err, new(*submitError)) {
			continue // refused (its key names another submission): its own delivery settles it
		} else if err != nil {
			return err
		}
		if created { // its own delivery finds the record, and counts nothing
			s.metrics.Accepted(older.Account, older.Kind)
		}
		s.log.Info().Str("event_id", older.ID).Uint64("intake_seq", raw.Sequence).Str("before", env.ID).
			Msg("accepted an older ordered submission still waiting in INTAKE first")
	}
	s.scannedTo(env.Account, seq-1)
	return nil
}

// scannedTo records that account's ordered submissions up to INTAKE
// sequence seq are accepted (acceptOlder's next scan starts after it).
func (s *Service) scannedTo(account string, seq uint64) {
	s.scanMu.Lock()
	s.scanned[account] = max(s.scanned[account], seq)
	s.scanMu.Unlock()
}
