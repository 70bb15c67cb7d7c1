package dispatcher

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/queue"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/store"
)

// reader serves one account with the account's concurrency: its tail
// reads the account's messages, and at most that many target calls are in
// flight on this replica. A slot is freed as soon as the call returns,
// while its outcome is still being stored. With "concurrency: auto" the
// reader takes up to concurrency_max messages and each call also waits
// for a slot of the learned limit (auto). (An ordering lane, of events
// sharing a key, is pkg/lane's.)
type reader struct {
	account  string
	tail     *tail
	in       chan held
	draining atomic.Bool  // a drain goroutine is taking what waits in in
	last     atomic.Int64 // unix nanos of the last message taken
	sem      chan struct{}
	auto     *autoLimit // the learned limit; nil for a fixed concurrency
	wg       sync.WaitGroup
	trim     trimmer
}

func (s *Service) startReader(account string) (*reader, error) {
	acct := s.conf().Account(account)
	conc := acct.MaxConcurrency()
	if conc <= 0 {
		conc = 8
	}
	ctx, cancel := context.WithTimeout(s.runCtx, 10*time.Second)
	defer cancel()
	var auto *autoLimit
	if acct.Concurrency.Auto() {
		auto = s.newAutoLimitFor(ctx, account, acct)
	}
	l := &reader{account: account, in: make(chan held, conc), sem: make(chan struct{}, conc), auto: auto}
	l.last.Store(time.Now().UnixNano())
	l.tail = s.newTail(account, unsettledPerSlot*conc, func(h held) bool {
		now := time.Now()
		l.last.Store(now.UnixNano())
		l.trim.took(h.meta.Sequence.Stream, now)
		select {
		case l.in <- h:
			s.wakeDrain(l)
			return true
		case <-l.tail.quit:
			h.stop()
			return false
		}
	})
	l.tail.start()
	return l, nil
}

// unsettledPerSlot is how many unsettled messages a tail may hold per unit
// of concurrency: a call may start while the previous outcome is still
// being stored.
const unsettledPerSlot = 2

// stop stops reading and waits for what was taken to finish; the learned
// limit is then stored for the account's next owner.
func (l *reader) stop() {
	l.tail.stop() // the tail hands nothing out from here: no drain starts
	l.wg.Wait()
	if l.auto != nil {
		l.auto.flush()
	}
}

// wakeDrain makes sure a drain takes what waits in l.in. Only the tail's
// loop calls it, after each message it hands out.
func (s *Service) wakeDrain(l *reader) {
	if l.draining.CompareAndSwap(false, true) {
		l.wg.Add(1)
		go s.drain(l)
	}
}

// drain takes the messages waiting for the reader and claims fresh events
// together: the claims of a batch are sent pipelined and cost one round
// trip, not one each. Each claimed event is then delivered in its own
// goroutine once a concurrency slot is free; anything that is not a fresh
// claim (a retry, a redelivery, a conflict) takes the one-at-a-time path.
// It returns once nothing waits, so that an idle reader costs no
// goroutine, and no stack (4 KB each, 40 MB at 10,000 live accounts).
func (s *Service) drain(l *reader) {
	defer l.wg.Done()
	var batch []held
	for {
		batch = queue.Take(l.in, batch, cap(l.in))
		if len(batch) == 0 {
			// A message handed out since the reads above found this
			// drain on and started none: look once more, unless one
			// handed out since this Store has started another.
			l.draining.Store(false)
			if len(l.in) == 0 || !l.draining.CompareAndSwap(false, true) {
				return
			}
			continue
		}
		lapses := s.owners.Lapses()
		if !s.owners.CurrentSince(lapses) || !s.owners.Holds(l.account) {
			// Its lease may be another replica's by now (owners.go):
			// the tail hands these out again once it is sure.
			for _, h := range batch {
				h.stop()
				_ = h.m.Nak()
			}
		} else {
			for i := range batch {
				batch[i].lapses = lapses
			}
			s.claimBatch(l, batch)
		}
		clear(batch) // hold no message while waiting
		batch = batch[:0]
	}
}

// held is a message the reader took, with the stop of its keepAlive: the
// server hears that it is being worked on from the moment the reader takes
// it until its call returns (or its handling ends without a call),
// including while it waits for a concurrency slot behind slow calls. Kept
// alive only during its call, a message that waited longer than AckWait
// would be redelivered to another replica, which would take the run over
// and call the target a second time (docs/chaos.md, bug 10). What follows
// the call (storing the outcome) takes milliseconds.
type held struct {
	m    jetstream.Msg
	meta *jetstream.MsgMetadata // nil when m has none
	stop func()
	// lapses is the owners' count when the reader handed the message out
	// (owner.Group.Lapses): its call is made only if none came since.
	lapses uint64
}

type claimed struct {
	adm  admission
	h    held
	env  event.Envelope
	next state.Record
	p    store.Pending
	err  error
}

func (s *Service) claimBatch(l *reader, msgs []held) {
	ctx := s.runCtx
	now := s.st.Now()
	fresh := make([]*claimed, 0, len(msgs))
	for _, h := range msgs {
		m := h.m
		rev, revOK := queue.RevOf(m.Headers(), s.subj.Epoch)
		meta := h.meta
		env, eerr := event.Unmarshal(m.Data())
		if !revOK || meta == nil || eerr != nil || meta.NumDelivered > 1 {
			// A redelivery is no fresh event: its run may have been
			// claimed and lost. The one-message path reads the record.
			s.spawn(l, h, nil, nil)
			continue
		}
		adm, _, ok := s.ask(ctx, env, false)
		if !ok {
			// The breaker refuses: the one-message path asks again and,
			// knowing the record, puts the event on its schedule to wait
			// (never replacing a schedule this message does not own).
			s.spawn(l, h, nil, nil)
			continue
		}
		c := &claimed{h: h, env: env, adm: adm}
		c.next, c.err = freshClaim(queue.Initial(env), meta.Sequence.Stream, s.actor, now)
		if c.err == nil {
			c.p, c.err = s.st.WriteAsync(c.next, rev)
		}
		fresh = append(fresh, c)
	}
	for _, c := range fresh {
		var rev uint64
		if c.err == nil {
			rev, c.err = c.p.Wait(ctx)
		}
		if c.err != nil {
			s.spawn(l, c.h, nil, nil) // conflict or error: decide from the stored record
			continue
		}
		s.runs.add(c.env.ID, c.next.RunSeq, s.nc.Stats().Reconnects)
		r := &run{m: c.h.m, env: c.env, rec: c.next, rev: rev, adm: c.adm, lapses: c.h.lapses}
		s.spawn(l, c.h, func(ctx context.Context, release func()) {
			defer s.runs.done(c.env.ID)
			ctx = s.eventCtx(ctx, c.env)
			if h := s.o.Hooks; h != nil && h.AfterClaim != nil {
				if err := h.AfterClaim(c.env.ID, c.next.Attempts); err != nil {
					return // as if the process died here
				}
			}
			s.deliver(ctx, r, release)
		}, func() {
			defer s.runs.done(c.env.ID)
			s.giveAttemptBack(s.eventCtx(s.runCtx, c.env), r, errNotCalled)
		})
	}
}

// spawn runs fn (or the full one-message path) for h's message in a
// goroutine once a concurrency slot is free. release, which fn calls as
// soon as its call returns, frees the slot and ends h's keepAlive; both
// happen at the latest when fn returns. notRun, if any, is called
// instead of fn when the stop leaves no time for fn's call: fn's claim
// is already stored.
func (s *Service) spawn(l *reader, h held, fn func(ctx context.Context, release func()), notRun func()) {
	s.noteSlotWait(l)
	stopping := func() {
		h.stop()
		if notRun != nil {
			notRun()
		}
	}
	select {
	case l.sem <- struct{}{}:
	case <-s.runCtx.Done():
		h.stop()
		return // stopping hard: leave it unacked for redelivery
	case <-s.calls.Done():
		stopping()
		return // stopping: a call could not end in time (see Stop); left unacked for redelivery
	}
	select {
	case <-s.calls.Done(): // the select above may take a free slot over ended calls
		<-l.sem
		stopping()
		return
	default:
	}
	if fn == nil {
		fn = func(ctx context.Context, release func()) { s.process(ctx, h.m, h.lapses, release) }
	}
	l.wg.Add(1)
	s.pool.Go(func() {
		var once sync.Once
		release := func() { once.Do(func() { h.stop(); <-l.sem }) }
		defer func() { release(); l.wg.Done() }()
		fn(withAutoLimit(s.runCtx, l.auto), release)
	})
}

// freshClaim is the claim of a record as ingest created it: pending, or
// scheduled and fired by its schedule (due, then claim). A scheduled one
// not due yet is refused, for the full path to look at.
func freshClaim(r state.Record, seq uint64, actor string, now time.Time) (state.Record, error) {
	if r.Status == state.Scheduled {
		if queue.Early(now, r.NextRunAt) {
			return r, errNotDue
		}
		var err error
		if r, _, err = state.Apply(r, state.Action{Name: state.Due, Actor: actor}, now); err != nil {
			return r, err
		}
	}
	r, _, err := state.Apply(r, state.Action{Name: state.Claim, Seq: seq, Actor: actor}, now)
	return r, err
}

var errNotDue = errors.New("not due yet")
