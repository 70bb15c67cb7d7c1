package ingest

import (
	"context"
	"errors"
	"hash/fnv"
	"sync"

	"github.com/nats-io/nats.go"
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
	queue.Batches(s.in, maxBatch, func(batch []jetstream.Msg) {
		s.acceptBatch(ctx, batch)
		for _, m := range batch {
			account, _, _ := s.subj.ParseIntake(m.Subject())
			s.live.add(account, -1)
		}
	})
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
// appended in the order they were submitted. An account that fills the
// batch loops waits in its ordered loop's queue too, behind an anchor
// (orderedEntry), so that route goes on to the next account's
// submissions. A message an anchor now stands for is acked here.
func (s *Service) route(m jetstream.Msg) {
	if h := s.o.Hooks; h != nil && h.BeforeIntake != nil {
		f, _ := s.fieldsOf(m.Subject(), m.Headers())
		if err := h.BeforeIntake(event.ID(f.Account, f.IdempotencyKey)); err != nil {
			_ = m.Nak()
			return
		}
	}
	account, ordered := s.orderedSubmission(m.Subject(), m.Headers())
	q := s.orderedQueueOf(account)
	var anchored bool
	switch {
	case ordered:
		anchored = q.push(account, m)
	case q.extend(account, m):
		anchored = true
	case q.delegate && redelivered(m):
		anchored = q.hold(account, m) // maybe an anchor whose ingest died: its drain reads what INTAKE holds after it
	default:
		s.live.add(account, 1)
		select {
		case s.in <- m:
			return
		default:
		}
		if q.delegate && s.live.add(account, 0) > floodShare {
			s.live.add(account, -1)
			anchored = q.hold(account, m)
			break
		}
		s.in <- m
		return
	}
	if anchored {
		s.metrics.Anchored(account)
		_ = m.Ack()
	}
}

// orderedQueueOf is the queue of account's ordered loop.
func (s *Service) orderedQueueOf(account string) *orderedQueue {
	h := fnv.New32a()
	h.Write([]byte(account))
	return s.ordered[h.Sum32()%uint32(len(s.ordered))]
}

// holdRefusal hands a refused submission that neither DEAD nor its
// waiting room has room for (dead.Writer.Keep) to its account's ordered loop, which
// keeps it in INTAKE until there is room,
// the account's next such refusals behind it as its anchor. Handed back
// to the server instead, each would hold its slot of the ack window while
// it waits, and one producer's refusals would fill the window and stop
// every account's intake. False where nothing is anchored (a work-queue
// INTAKE), and for a message its loop already holds.
func (s *Service) holdRefusal(m jetstream.Msg) bool {
	switch m.(type) {
	case *storedMsg, *heldMsg:
		return false
	}
	if s.replies.answered(m.Headers()) {
		return false // never delegated: handed back, it waits with its slot, as an HTTP producer's rate allows
	}
	account, _, _ := s.subj.ParseIntake(m.Subject())
	q := s.orderedQueueOf(account)
	if !q.delegate {
		return false
	}
	if q.hold(account, m) {
		s.metrics.Anchored(account)
		_ = m.Ack()
	}
	return true
}

// floodShare is how many of one account's submissions the batch loops
// may have (queued or being accepted) when they are full, before the
// account's next ones wait behind an anchor: a few batches, a fraction of
// what they hold (Workers, 256, queued and four batches of maxBatch).
const floodShare = 2 * maxBatch

// redelivered reports whether m was delivered before.
func redelivered(m jetstream.Msg) bool {
	_, again := sequence(m)
	return again
}

// liveCounts counts each account's submissions in the batch loops' hands,
// queued for them or being accepted.
type liveCounts struct {
	mu sync.Mutex
	n  map[string]int
}

// add adds d to account's count and returns it.
func (c *liveCounts) add(account string, d int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	v := c.n[account] + d
	if v <= 0 {
		delete(c.n, account)
		return 0
	}
	c.n[account] = v
	return v
}

// orderedSubmission reports an intake message's account and whether it
// may belong to an ordered lane: an ordering key of its own, or a kind
// ordered by a field.
func (s *Service) orderedSubmission(subject string, h nats.Header) (account string, ordered bool) {
	account, kind, err := s.subj.ParseIntake(subject)
	if headerOf(h, names.HeaderOrderingKey) != "" || cePartitioned(h) {
		return account, true
	}
	if err != nil {
		return account, false
	}
	k, ok := s.cfg.Kind(kind)
	return account, ok && k.OrderedBy != ""
}

func (s *Service) closeIn() {
	close(s.in)
	for _, q := range s.ordered {
		q.close()
	}
}
