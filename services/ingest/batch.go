package ingest

import (
	"context"
	"errors"
	"hash/fnv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/queue"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/store"
	"github.com/tenaz/tenaz/pkg/tracing"
)

// maxBatch bounds how many intake messages one batch accepts together.
const maxBatch = 128

// batchLoop takes whatever intake messages are waiting (up to maxBatch)
// and accepts them together: all record creates are sent pipelined, then
// all EVENTS publishes, so a batch costs two round trips instead of two
// per message. Each message is still acked only after its record and its
// EVENTS message are stored; anything unusual (a duplicate, a delay, an
// error) takes the one-at-a-time path.
func (s *Service) batchLoop(ctx context.Context) {
	defer s.wg.Done()
	queue.Batches(s.in, maxBatch, func(batch []jetstream.Msg) { s.acceptBatch(ctx, batch) })
}

type item struct {
	m       jetstream.Msg
	env     event.Envelope
	rec     state.Record
	rev     uint64
	pending store.Pending
	fut     jetstream.PubAckFuture
	err     error
	traced  context.Context // holds the accept's span, span
	span    tracing.Span
}

func (s *Service) acceptBatch(ctx context.Context, msgs []jetstream.Msg) {
	items := make([]*item, 0, len(msgs))
	for _, m := range msgs {
		env, ok := s.parseIntake(ctx, m)
		if !ok {
			continue
		}
		if env.NotBefore != nil {
			s.handleIntake(ctx, m)
			continue
		}
		it := &item{m: m, env: env}
		it.traced, it.span = tracing.Accept(ctx, &it.env)
		it.rec = queue.Initial(it.env)
		it.pending, it.err = s.st.CreateAsync(it.rec)
		items = append(items, it)
	}
	fresh := items[:0]
	for _, it := range items {
		if it.err == nil {
			it.rev, it.err = it.pending.Wait(ctx)
		}
		switch {
		case errors.Is(it.err, store.ErrExists):
			// A duplicate: answered with the existing event, under the
			// accept span of that path (this one is never ended, so
			// never exported).
			s.handleIntake(ctx, it.m)
		case it.err != nil:
			s.settle(ctx, it.m, it.env, it.rec, false, it.err)
			it.span.End()
		default:
			fresh = append(fresh, it)
		}
	}
	for _, it := range fresh {
		if h := s.o.Hooks; h != nil && h.AfterCreate != nil {
			if it.err = h.AfterCreate(it.env.ID); it.err != nil {
				continue
			}
		}
		it.fut, it.err = s.q.EnqueueAsync(it.env, it.rev, it.env.ID)
	}
	for _, it := range fresh {
		if it.err == nil {
			select {
			case <-it.fut.Ok():
			case it.err = <-it.fut.Err():
			case <-ctx.Done():
				it.err = context.Cause(ctx)
			}
		}
		s.settle(ctx, it.m, it.env, it.rec, true, it.err)
		if it.err == nil {
			tracing.Record(it.traced, tracing.Result{Outcome: "created"})
		}
		it.span.End()
	}
}

// route sends an intake message to the batch loops, or — if it may belong
// to an ordered lane — to the ordered loop of its account, which accepts
// one message at a time in stream order, so that a lane's events are
// appended in the order they were submitted.
func (s *Service) route(m jetstream.Msg) {
	if h := s.o.Hooks; h != nil && h.BeforeIntake != nil {
		f, _ := s.fieldsOf(m.Subject(), m.Headers())
		if err := h.BeforeIntake(event.ID(f.Account, f.IdempotencyKey)); err != nil {
			_ = m.Nak()
			return
		}
	}
	account, kind, err := s.subj.ParseIntake(m.Subject())
	ordered := headerOf(m.Headers(), names.HeaderOrderingKey) != "" || cePartitioned(m.Headers())
	if err == nil && !ordered {
		k, ok := s.cfg.Kind(kind)
		ordered = ok && k.OrderedBy != ""
	}
	if !ordered {
		s.in <- m
		return
	}
	h := fnv.New32a()
	h.Write([]byte(account))
	s.ordered[h.Sum32()%uint32(len(s.ordered))].push(m)
}

func (s *Service) closeIn() {
	close(s.in)
	for _, q := range s.ordered {
		q.close()
	}
}

// orderedLoop accepts ordered submissions one at a time, in order. A
// failure is retried in place (with progress sent, so the message is not
// redelivered meanwhile) rather than handed back, which would let the next
// submission overtake it; the ones queued behind it are kept in progress
// too.
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
		m, ok := in.pop()
		if !ok {
			return
		}
		env, ok := s.parseIntake(ctx, m)
		if !ok {
			continue
		}
		wait := 100 * time.Millisecond
		for {
			err := s.acceptOlder(ctx, m, env)
			var rec state.Record
			var created bool
			if err == nil {
				rec, created, err = s.accept(ctx, env)
			}
			if serr := (*submitError)(nil); err == nil || ctx.Err() != nil || errors.As(err, &serr) {
				s.settle(ctx, m, env, rec, created, err) // a refusal is final: it is not retried in place
				break
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
}

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
	filter := s.subj.Prefix + ".intake." + env.Account + ".>"
	for from < seq {
		raw, err := s.intake.GetMsg(ctx, from, jetstream.WithGetMsgSubject(filter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
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
		if _, _, err := s.accept(ctx, older); errors.As(err, new(*submitError)) {
			continue // refused (its key names another submission): its own delivery settles it
		} else if err != nil {
			return err
		}
		s.log.Info().Str("event_id", older.ID).Uint64("intake_seq", raw.Sequence).Str("before", env.ID).
			Msg("accepted an older ordered submission still waiting in INTAKE first")
	}
	s.scanMu.Lock()
	if s.scanned[env.Account] < seq-1 {
		s.scanned[env.Account] = seq - 1
	}
	s.scanMu.Unlock()
	return nil
}
