package dispatcher

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/tenaz/tenaz/pkg/callbacks"
	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/dead"
	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/logging"
	"github.com/tenaz/tenaz/pkg/outcome"
	"github.com/tenaz/tenaz/pkg/queue"
	"github.com/tenaz/tenaz/pkg/size"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/store"
	"github.com/tenaz/tenaz/pkg/target"
	"github.com/tenaz/tenaz/pkg/tracing"
)

func (s *Service) process(ctx context.Context, m jetstream.Msg, lapses uint64, release func()) {
	meta, err := m.Metadata()
	if err != nil {
		_ = m.Term()
		return
	}
	env, err := event.Unmarshal(m.Data())
	if err != nil {
		s.poison(ctx, m, err)
		return
	}
	ctx = s.eventCtx(ctx, env)
	if lapsed(m, meta) >= maxDeliveries {
		if _, inFlight := s.runs.get(env.ID); !inFlight {
			s.giveUp(ctx, m, env, meta)
			return
		}
	}
	r, ok := s.claim(ctx, m, env, meta.Sequence.Stream)
	if !ok {
		return
	}
	r.lapses = lapses
	s.runs.add(env.ID, r.rec.RunSeq, s.nc.Stats().Reconnects)
	defer s.runs.done(env.ID)
	if h := s.o.Hooks; h != nil && h.AfterClaim != nil {
		if err := h.AfterClaim(env.ID, r.rec.Attempts); err != nil {
			return // as if the process died here
		}
	}
	s.deliver(ctx, r, release)
}

// eventCtx is ctx with the logger of env's event: its id, account, kind
// and trace id on every line, each once.
func (s *Service) eventCtx(ctx context.Context, env event.Envelope) context.Context {
	return logging.WithEvent(tracing.Log(s.log, env.Traceparent).WithContext(ctx), env.ID, env.Account, env.Kind)
}

// run is one claim of an event by this replica: the message that started
// it, the record as its claim wrote it, and the claim's revision, the
// run's fencing token (docs/state-machine.md, "Runs"): every later write
// of the run is a compare-and-set on it, and a run whose write finds
// another revision has lost the event. Its steps: claim starts it (one
// at a time; claimBatch for fresh events, in batches), deliver makes its
// call, finish stores its outcome and settles its message.
type run struct {
	m   jetstream.Msg
	env event.Envelope
	rec state.Record
	rev uint64 // the fencing token
	adm admission
	// lapses is the owners' count when the message was handed out: the
	// call is made only if this replica stayed current since (cleared).
	lapses uint64
	// stage is what the run calls (set by deliver), and hasFallback
	// whether a fallback stage follows it.
	stage       config.Stage
	hasFallback bool
}

// poison keeps an undecodable message in DEAD, as its account's, and
// terminates it. Its entry's message id is the one deadletter gives a
// terminated message (its stream and sequence: each partition numbers its
// own), so that a re-send dedups and another partition's does not.
func (s *Service) poison(ctx context.Context, m jetstream.Msg, cause error) {
	e := dead.Entry{Reason: dead.ReasonRejected, Class: "malformed_message", Error: cause.Error(),
		At: time.Now().UTC(), Raw: m.Data(), RawSubject: m.Subject(), RawHeader: m.Headers()}
	e.Account, e.Kind, _ = s.subj.ParseEvent(m.Subject())
	var msgID string
	if meta, err := m.Metadata(); err == nil {
		msgID = fmt.Sprintf("terminated/%s/%d", meta.Stream, meta.Sequence.Stream)
	}
	if _, err := s.dead.Keep(ctx, e, msgID); err != nil {
		_ = m.NakWithDelay(time.Second)
		return
	}
	s.log.Error().Err(cause).Str("subject", m.Subject()).Msg("undecodable message kept in DEAD")
	_ = m.TermWithReason("malformed message")
}

// maxDeliveries is how many deliveries of one message may lapse (their
// worker died on them, or hung) before the dispatcher keeps the event in
// DEAD (reason max_deliveries): a message that kills its worker every
// time before the claim counts an attempt (a crash in the claim's own
// path) ends there. A delivery handed back (NAK: the store did not
// answer, the account may be another replica's) is no lapse: an event
// that waited out an outage never failed. Its consumer never gives it up
// itself (pkg/dead, GiveUp).
const maxDeliveries = 10

// giveUps is how this replica gives events up to DEAD.
func (s *Service) giveUps() dead.GiveUp {
	return dead.GiveUp{Dead: s.dead, Conn: s.nc, Subj: s.subj, Store: s.st, Actor: s.actor, Order: s.order}
}

// giveUp keeps in DEAD the event of a message delivered more than
// maxDeliveries times, and settles the message.
func (s *Service) giveUp(ctx context.Context, m jetstream.Msg, env event.Envelope, meta *jetstream.MsgMetadata) {
	n := lapsed(m, meta)
	moved, err := s.giveUps().Crash(ctx, env, meta.Stream, meta.Sequence.Stream, n)
	if err != nil {
		s.retryLater(ctx, m, err)
		return
	}
	if moved {
		zerolog.Ctx(ctx).Error().Uint64("deliveries", n).Msg("workers failed on this event's message every time: kept in DEAD")
	}
	_ = m.Ack()
}

// undecodable keeps in DEAD the event whose stored record does not
// decode (cause), made again from its message m (dead.GiveUp.Undecodable),
// and settles m: handed back, it would come back to the same record for
// ever, the event unseen.
func (s *Service) undecodable(ctx context.Context, m jetstream.Msg, env event.Envelope, seq uint64, cause error) {
	moved, err := s.giveUps().Undecodable(ctx, env, fmt.Sprintf("undecodable/%s/%d", env.ID, seq))
	if err != nil {
		s.retryLater(ctx, m, err)
		return
	}
	if moved {
		zerolog.Ctx(ctx).Error().Err(cause).Msg("the event's stored record does not decode: made again from its message and kept in DEAD")
	}
	_ = m.Ack()
}

// claim moves the event to running for this message, by compare-and-set,
// reading the record and deciding from its state. (Fresh events are
// claimed without a read, in batches, by claimBatch; this is the path for
// everything else: retries, redeliveries, conflicts.) ok is false when the
// message was settled (dropped as stale) or must come back later.
func (s *Service) claim(ctx context.Context, m jetstream.Msg, env event.Envelope, seq uint64) (*run, bool) {
	if r, ok := s.runs.get(env.ID); ok {
		if r.seq != 0 && seq > r.seq && queue.LookAgainLater(m) {
			// A newer message (the run's own retry, fired before the
			// run stored its outcome): as for another replica's run
			// (see the running case below), looked at again soon, not
			// left to AckWait.
			zerolog.Ctx(ctx).Debug().Msg("a newer message while a run of this event is in flight here: looked at again")
			return nil, false
		}
		// A copy of a message whose run is in flight here (the server
		// missed its in-progress signals): the run settles the message;
		// reclaiming would run the event twice at once.
		zerolog.Ctx(ctx).Debug().Msg("a run of this event is in flight here: copy left alone")
		return nil, false
	}
	var adm admission
	admitted := false
	for range 16 {
		// Each try reads the clock again: a write that waited out a
		// nats-server restart and lost would otherwise stamp the next
		// try's claim before the entry it follows.
		now := s.st.Now()
		rec, rev, err := s.st.Get(ctx, env.Account, env.ID)
		if errors.Is(err, store.ErrNotFound) {
			zerolog.Ctx(ctx).Warn().Msg("no record for this event (expired or removed); dropping the message")
			_ = m.Ack()
			return nil, false
		}
		if errors.Is(err, store.ErrUndecodable) {
			s.undecodable(ctx, m, env, seq, err)
			return nil, false
		}
		if err != nil {
			s.retryLater(ctx, m, err)
			return nil, false
		}
		var actions []state.Action
		claim := state.Action{Name: state.Claim, Seq: seq, Actor: s.actor}
		if rec.After != "" && rec.Attempts == 0 && (rec.Status == state.Pending || rec.Status == state.Scheduled) {
			if s.waitInLane(ctx, m, env, rec, rev) {
				return nil, false
			}
		}
		switch rec.Status {
		case state.Pending:
			actions = []state.Action{claim}
		case state.Retrying, state.Scheduled:
			if rec.RunSeq != 0 && seq <= rec.RunSeq {
				// A copy of the message of a run that has ended (the
				// server redelivered it while the run was calling, and
				// the run has stored its outcome and acked it): claimed,
				// it would run the event once more, and nothing would
				// bring the event back if that run died, its message
				// being acked. Its next step is the outcome's.
				if err := s.q.EnsureNext(ctx, env, rec, now); err != nil {
					s.retryLater(ctx, m, err)
					return nil, false
				}
				s.drop(ctx, m, rec, "a copy of an ended run's message")
				return nil, false
			}
			if queue.Early(now, rec.NextRunAt) {
				// Fired early: a schedule that replaced the event's own
				// (a late outcome's retry). Dropped with the event's own
				// schedule gone, it would leave the event retrying with
				// no message (docs/chaos.md, bug 10).
				if err := s.q.EnsureNext(ctx, env, rec, now); err != nil {
					s.retryLater(ctx, m, err)
					return nil, false
				}
				s.drop(ctx, m, rec, "not due yet: a stale message")
				return nil, false
			}
			if rec.Status == state.Scheduled {
				actions = append(actions, state.Action{Name: state.Due, Actor: s.actor})
			}
			actions = append(actions, claim)
		case state.Running:
			if rec.RunSeq != seq {
				// A message stored after the run's own (a higher
				// sequence) may be that run's next step: it publishes its
				// retry schedule, then stores "retrying", and a schedule
				// whose publish waited out a nats-server restart fires at
				// once. Dropped here, it would leave the event retrying
				// with no message (docs/chaos.md, bug 9); it is looked at again
				// once the run has stored its outcome, and dropped only
				// after that (a run lost meanwhile comes back with its own
				// message).
				if seq > rec.RunSeq && queue.LookAgainLater(m) {
					zerolog.Ctx(ctx).Debug().Msg("a newer message while another owns the run: looked at again once the run has stored its outcome")
					return nil, false
				}
				s.drop(ctx, m, rec, "another message owns the run")
				return nil, false
			}
			actions = []state.Action{{Name: state.Reclaim, Seq: seq, Actor: s.actor, Detail: "message redelivered: the previous run was lost"}}
		default:
			if state.Finished(rec.Status) {
				// In case its finisher died before waking the next.
				if err := s.order.Advance(ctx, rec); err != nil {
					s.retryLater(ctx, m, err)
					return nil, false
				}
			}
			if err := s.q.EnsureNext(ctx, env, rec, now); err != nil {
				s.retryLater(ctx, m, err)
				return nil, false
			}
			s.drop(ctx, m, rec, "event is "+string(rec.Status))
			return nil, false
		}
		if !admitted {
			var ok bool
			var retryAt time.Time
			if adm, retryAt, ok = s.ask(ctx, env, rec.Stage == state.StageFallback); !ok {
				if rec.Status == state.Running && s.giveUpLostRun(ctx, m, env, rec, rev, retryAt) {
					continue // the record moved meanwhile: decide again
				}
				if rec.Status != state.Running {
					s.waitForBreaker(ctx, m, env, retryAt)
				}
				return nil, false
			}
			admitted = true
		}
		next := rec
		for _, a := range actions {
			if next, _, err = state.Apply(next, a, now); err != nil {
				s.drop(ctx, m, rec, err.Error())
				return nil, false
			}
		}
		nrev, err := s.st.Write(ctx, next, rev)
		if err == nil {
			if len(next.Payload) > 0 {
				// The record's payload is the event's: an operator's
				// replay may have edited it, and an older message of the
				// event (not trimmed yet when its owner stopped) may be
				// the one that claims the replayed event.
				env.Payload = next.Payload
			}
			return &run{m: m, env: env, rec: next, rev: nrev, adm: adm}, true
		}
		if errors.Is(err, size.ErrTooLarge) {
			s.tooLarge(ctx, m, env, rec, rev, err)
			return nil, false
		}
		if !errors.Is(err, store.ErrConflict) {
			s.retryLater(ctx, m, err)
			return nil, false
		}
	}
	s.retryLater(ctx, m, errors.New("too many conflicting writes"))
	return nil, false
}

// giveUpLostRun handles the message that owns a lost run (rec is running
// with its sequence: its dispatcher died) when the breaker refuses the
// call: the event waits for the breaker on its schedule like any other,
// but first the run is given up (running → retrying, due at retryAt) and
// only then is m acked. The copy the schedule brings back has another
// sequence and would otherwise be dropped as a stale message, leaving the
// event running with no message at all (docs/chaos.md, bug 1). It reports
// true when the record changed meanwhile (decide again), false when m was
// settled (acked, or handed back for a redelivery).
func (s *Service) giveUpLostRun(ctx context.Context, m jetstream.Msg, env event.Envelope, rec state.Record, rev uint64, retryAt time.Time) bool {
	if err := s.q.ScheduleAt(ctx, env, retryAt, ""); err != nil {
		s.retryLater(ctx, m, err)
		return false
	}
	at := queue.DueTime(retryAt)
	next, _, err := state.Apply(rec, state.Action{Name: state.Recover, Actor: s.actor, NextRunAt: &at,
		Detail: "message redelivered: the previous run was lost; waiting for the breaker until " + at.Format(time.RFC3339)}, s.st.Now())
	if err != nil {
		s.retryLater(ctx, m, err)
		return false
	}
	if _, err := s.st.Write(ctx, next, rev); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return true
		}
		s.retryLater(ctx, m, err)
		return false
	}
	_ = m.Ack()
	zerolog.Ctx(ctx).Debug().Time("until", at).Msg("lost run given up; breaker open: waiting")
	return false
}

func (s *Service) drop(ctx context.Context, m jetstream.Msg, rec state.Record, why string) {
	zerolog.Ctx(ctx).Debug().Str("status", string(rec.Status)).Str("why", why).Msg("message dropped")
	_ = m.Ack()
}

// retryLater hands the message back for a later redelivery after an
// infrastructure error (the store or stream did not answer).
func (s *Service) retryLater(ctx context.Context, m jetstream.Msg, err error) {
	if ctx.Err() == nil {
		zerolog.Ctx(ctx).Warn().Err(err).Msg("store unavailable; message will be redelivered")
		_ = m.NakWithDelay(2 * time.Second)
	}
}

// keepDead stores e, a dying event's entry, in DEAD, or, while DEAD has no
// room for it (full, or its account at its bound: dead.ErrAccountFull),
// in the waiting room, from which ingest moves it into DEAD once there is
// room (dead.Writer.Keep): the event dies and its account's other events
// go on. Only when neither can take it does the run wait where it is, its
// message kept in progress: handed back, the message would count
// deliveries until the event was given up as a crash (max_deliveries)
// instead of dying for its own reason. It looks again every few seconds
// (at most 5: room an operator frees is taken soon). Other errors are
// returned at once.
func (s *Service) keepDead(ctx context.Context, m jetstream.Msg, e dead.Entry, msgID string) error {
	waiting, err := s.dead.Keep(ctx, e, msgID)
	if waiting {
		zerolog.Ctx(ctx).Warn().Msg("DEAD has no room for this event's entry: it waits for room")
	}
	if !store.IsFull(err) {
		return err
	}
	zerolog.Ctx(ctx).Warn().Err(err).Msg("neither DEAD nor its waiting room has room for this event's entry: it waits, running, until there is some")
	stop := s.keepAlive(m)
	defer stop()
	for wait := time.Second; store.IsFull(err); wait = min(2*wait, 5*time.Second) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		_, err = s.dead.Keep(ctx, e, msgID)
	}
	return err
}

// deliver is a run's call: it calls the target (or handler) of the run's
// stage, under the account's and the target's limits, and finishes the
// run with the answer.
func (s *Service) deliver(ctx context.Context, r *run, release func()) {
	env, rec, adm := r.env, r.rec, r.adm
	kind, ok := s.cfg.Kind(env.Kind)
	stage, _ := kind.StageFor(rec.Stage == state.StageFallback)
	ctx, span := tracing.Attempt(ctx, env, rec.Attempts, rec.Stage, cmp.Or(stage.Target, stage.Handler))
	defer span.End()
	if !ok {
		r.stage = config.Stage{Attempts: 1}
		s.finish(ctx, r, outcome.Permanent(fmt.Errorf("kind %q is no longer configured", env.Kind)), target.Response{})
		return
	}
	r.stage, r.hasFallback = stage, kind.Fallback != nil && rec.Stage == state.StagePrimary
	if stage.Attempts > 0 && rec.Attempts > stage.Attempts {
		// A reclaim past the stage's attempts: every run so far was lost
		// (a worker that dies on this event, whichever replica takes it
		// over, never reaches the tail's count of deliveries). No call
		// beyond what attempts allows: the event moves on as failed.
		s.finish(ctx, r, fmt.Errorf("%w (attempt %d of %d)", outcome.ErrRunLost, rec.Attempts, stage.Attempts), target.Response{})
		return
	}
	var call func(context.Context) (target.Response, error)
	guardName := stage.Target
	if stage.Handler != "" {
		guardName = "handler:" + stage.Handler
		h := s.o.Handlers[stage.Handler]
		if h == nil {
			s.finish(ctx, r, outcome.Permanent(fmt.Errorf("%w: %q", ErrHandlerNotRegistered, stage.Handler)), target.Response{})
			return
		}
		d := Delivery{Event: env, Attempt: rec.Attempts, Stage: rec.Stage, Reference: rec.Reference}
		call = func(ctx context.Context) (target.Response, error) { return s.callHandler(ctx, h, d, stage.Timeout.D()) }
	} else {
		tgt, err := s.target(env.Account, stage.Target)
		if err != nil {
			s.finish(ctx, r, outcome.Permanent(err), target.Response{})
			return
		}
		req := target.Request{Event: env, Attempt: rec.Attempts, Reference: rec.Reference, Replay: rec.Replays}
		call = func(ctx context.Context) (target.Response, error) { return tgt.Call(ctx, req) }
	}
	mx := s.o.Metrics
	if rec.Attempts == 1 && rec.Stage == state.StagePrimary {
		due := env.CreatedAt
		if env.NotBefore != nil && env.NotBefore.After(due) {
			due = *env.NotBefore
		}
		for i := len(rec.History) - 1; i >= 0; i-- {
			if e := rec.History[i]; e.Action == state.Replay {
				due = e.At // a replayed cycle waits from the replay, not from the accept
				break
			}
		}
		mx.WaitTime(env.Account, env.Kind, s.st.Now().Sub(due), ctx)
	}
	slot, ok := s.autoSlot(ctx, env.Account) // concurrency: auto
	if !ok {
		release()
		if ctx.Err() == nil {
			s.giveAttemptBack(ctx, r, errNotCalled)
		}
		return // stopping: no slot of the learned limit came free in time; the message comes back
	}
	if until, opened := adm.openedSince(); opened {
		// Allowed, then held back by the account's concurrency while
		// the breaker opened: the call would be one more failure past
		// the threshold. The attempt is given back (yield) and the
		// event waits for the cooldown.
		slot.drop()
		release()
		s.finish(ctx, r, outcome.RetryAfter(time.Until(until), errBreakerOpened), target.Response{})
		return
	}
	call = adm.admitted(call)
	call = s.cleared(r, call)
	call = s.metered(env.Account, call)
	call = slot.timed(call)
	began := time.Now()
	resp, callErr := s.guardFor(env.Account, guardName).run(ctx, call)
	slot.done(callErr, ctx.Err() == nil && !notMade(callErr))
	if errors.Is(callErr, errPaused) || errors.Is(callErr, errBreakerOpened) {
		// Given back: the attempt was not made, and the event waits in
		// EVENTS until the resume, or for the breaker's cooldown or the
		// probe another call makes.
		release()
		s.finish(ctx, r, callErr, target.Response{})
		return
	}
	if errors.Is(callErr, errNotCalled) {
		release()
		s.giveAttemptBack(ctx, r, callErr)
		if errors.Is(callErr, errNotOwner) {
			// The tail hands it out again once this replica is sure of
			// the account, or the handover stops the tail.
			_ = r.m.Nak()
		}
		return // not made: stopping, or the account may be another replica's; the message comes back
	}
	took := time.Since(began)
	if ctx.Err() == nil {
		mx.DeliveryLatency(env.Account, env.Kind, guardName, took, ctx)
		cls := outcome.ClassSuccess
		if callErr != nil {
			cls = outcome.ClassOf(callErr)
		}
		mx.Attempt(env.Account, env.Kind, cls)
	}
	if ctx.Err() == nil {
		adm.record(ctx, callErr)
	}
	release()
	if ctx.Err() != nil {
		return // stopping hard: the message comes back
	}
	if h := s.o.Hooks; h != nil && h.AfterCall != nil {
		if err := h.AfterCall(env.ID, rec.Attempts); err != nil {
			return
		}
	}
	s.finish(ctx, r, callErr, resp)
}

// giveAttemptBack stores r's claim as not made (yield), by
// compare-and-set on the claim's revision, for a call that was not made
// and whose message comes back (see errNotCalled): taken up again, here
// or by another replica, the run counts only the calls made, where a
// reclaim counts one for each claim, as it must after a crash (the lost
// run may have called). A write refused because the record moved on
// (another replica's reclaim of the message) or not answered changes
// nothing: the reclaim counts the attempt.
func (s *Service) giveAttemptBack(ctx context.Context, r *run, why error) {
	now := s.st.Now()
	at := queue.DueTime(now)
	next, _, err := state.Apply(r.rec, state.Action{Name: state.Yield, Actor: s.actor, NextRunAt: &at, Detail: why.Error()}, now)
	if err == nil {
		_, err = s.st.Write(ctx, next, r.rev)
	}
	if err != nil {
		zerolog.Ctx(ctx).Debug().Err(err).Msg("the attempt not made was not given back: its next claim counts it")
	}
}

// keepAlive tells the server the message is still being worked on while
// this replica holds it (see held), so AckWait does not redeliver it
// meanwhile. A timer, not a goroutine: most messages are settled long
// before the first tick.
func (s *Service) keepAlive(m jetstream.Msg) func() {
	a := &alive{m: m, every: progressEvery(s.cfg.Streams.AckWait.D())}
	a.mu.Lock()
	a.t = time.AfterFunc(a.every, a.tick)
	a.mu.Unlock()
	return a.stop
}

// alive is one message's keepAlive: one allocation for what the closures
// of each message captured one by one.
type alive struct {
	mu      sync.Mutex // guards t and stopped, also against the first tick
	stopped bool
	t       *time.Timer
	m       jetstream.Msg
	every   time.Duration
}

func (a *alive) tick() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.stopped {
		_ = a.m.InProgress()
		a.t.Reset(a.every)
	}
}

func (a *alive) stop() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stopped = true
	a.t.Stop()
}

// progressEvery is how often a running call reports progress: a third of
// AckWait (the first step of the tail's redelivery backoff), at
// most every 10s, so that a call slower than AckWait is never taken for a
// lost one and redelivered (a second, concurrent call to the target).
func progressEvery(ackWait time.Duration) time.Duration {
	every := ackWait / 3
	if every <= 0 || every > 10*time.Second {
		every = 10 * time.Second
	}
	return every
}

// finish is a run's last step: it decides what the call's outcome means
// and stores it by compare-and-set on the run's token; the message is
// acked only once everything the decision needs is durable.
func (s *Service) finish(ctx context.Context, r *run, callErr error, resp target.Response) {
	m, env, rec, rev, stage, hasFallback := r.m, r.env, r.rec, r.rev, r.stage, r.hasFallback
	b := outcome.Backoff{Initial: stage.Backoff.Initial.D(), Max: stage.Backoff.Max.D(), Multiplier: stage.Backoff.Multiplier,
		Jitter: stage.Backoff.Jitter, MaxRetryAfter: stage.Backoff.MaxRetryAfter.D()}
	d := outcome.Decide(callErr, rec.Attempts, stage.Attempts, hasFallback, b, s.jitter())
	paused := errors.Is(callErr, errPaused)
	yield := paused || errors.Is(callErr, errBreakerOpened)
	if yield { // no call was made: whatever the attempts left, it waits for the cooldown, or the resume
		d = outcome.Decision{Verdict: outcome.VerdictRetry, Class: outcome.ClassTransient, Delay: b.Delay(rec.Attempts, callErr, s.jitter())}
		switch {
		case paused:
			d.Delay = time.Second // fired into EVENTS, where the paused account's events wait
		case errors.Is(callErr, errProbeLost):
			d.Delay = time.Second // the breaker says, then, how long the other call's probe may take
		}
	}
	log := zerolog.Ctx(ctx)
	var errInfo *state.ErrorInfo
	if callErr != nil {
		errInfo = &state.ErrorInfo{Class: string(d.Class), Message: trimErr(callErr), HTTPStatus: outcome.StatusOf(callErr)}
		tracing.Record(ctx, tracing.Result{Outcome: d.Verdict.String(), Class: errInfo.Class, HTTPStatus: errInfo.HTTPStatus, Error: errInfo.Message})
	} else {
		tracing.Record(ctx, tracing.Result{Outcome: d.Verdict.String(), Class: string(d.Class), HTTPStatus: resp.Status})
	}
	if s.contested(env.ID) {
		// The server may have handed this message to another replica
		// meanwhile (this connection reconnected, or the run is old):
		// the outcome's side effects (a schedule that replaces the
		// event's, a DEAD entry) only if the run is still this one.
		cur, _, err := s.st.Get(ctx, env.Account, env.ID)
		if err != nil {
			s.retryLater(ctx, m, err)
			return
		}
		if !sameRun(cur, rec) {
			s.lateOutcome(ctx, m, env, fmt.Sprint(d.Verdict))
			return
		}
	}
	now := s.st.Now()
	var a state.Action
	var reason string
	switch d.Verdict {
	case outcome.VerdictDone:
		var err error
		if a, reason, err = s.accepted(ctx, env, rec, stage, resp, now); err != nil {
			s.retryLater(ctx, m, err)
			return
		}
		if a.Name == state.Fail {
			errInfo = a.Error
		}
	case outcome.VerdictRetry:
		at := queue.DueTime(now.Add(d.Delay))
		if err := s.q.ScheduleAt(ctx, env, at, fmt.Sprintf("%s/retry/%d", env.ID, rec.Step())); err != nil {
			s.retryLater(ctx, m, err)
			return
		}
		a = state.Action{Name: state.Retry, Actor: s.actor, Error: errInfo, NextRunAt: &at}
		if yield {
			why := errBreakerOpened
			switch {
			case paused:
				why = errPaused
			case errors.Is(callErr, errProbeLost):
				why = errProbeLost
			}
			a = state.Action{Name: state.Yield, Actor: s.actor, NextRunAt: &at, Detail: why.Error()}
		}
	case outcome.VerdictFallback:
		a = state.Action{Name: state.Fallback, Actor: s.actor, Error: errInfo, Detail: fmt.Sprintf("primary failed %d times: %s", rec.Attempts, errInfo.Message)}
	case outcome.VerdictDead:
		reason = dead.ReasonExhausted
		if d.Class == outcome.ClassPermanent {
			reason = dead.ReasonPermanent
		}
		a = state.Action{Name: state.Fail, Actor: s.actor, Error: errInfo, Detail: reason + ": " + errInfo.Message}
	}
	next, effects, err := state.Apply(rec, a, now)
	if err != nil { // cannot happen from running; keep the message for a fresh look
		s.retryLater(ctx, m, err)
		return
	}
	dying := next.Status == state.Dead
	if dying {
		e := dead.Entry{ID: env.ID, Account: env.Account, Kind: env.Kind, Reason: reason, Class: errInfo.Class,
			Error: errInfo.Message, Status: errInfo.HTTPStatus, At: now.UTC(), Event: &env, Record: &next}
		if err := s.keepDead(ctx, m, e, fmt.Sprintf("%s/dead/%d", env.ID, rec.Step())); err != nil {
			if errors.Is(err, size.ErrTooLarge) {
				s.tooLarge(ctx, m, env, rec, rev, err)
				return
			}
			s.retryLater(ctx, m, err)
			return
		}
	}
	if _, err := s.st.Write(ctx, next, rev); err != nil {
		if errors.Is(err, size.ErrTooLarge) {
			// The outcome (a success too) cannot be stored: retried, the
			// message would come back and call the target again.
			s.tooLarge(ctx, m, env, rec, rev, err)
			return
		}
		if !errors.Is(err, store.ErrConflict) {
			s.retryLater(ctx, m, err)
			return
		}
		// Someone moved the event while we called (an operator, the
		// max-deliveries backstop, ingest linking a successor in its lane):
		// re-apply on the current record if it is still our run, else our
		// outcome is only history.
		late := false
		if next, _, err = s.st.Update(ctx, env.Account, env.ID, func(cur state.Record) (state.Record, error) {
			if late = !sameRun(cur, rec); late {
				n, _, err := state.Apply(cur, state.Action{Name: state.Note, Actor: s.actor, Detail: "late outcome ignored: " + string(a.Name)}, now)
				return n, err
			}
			n, _, err := state.Apply(cur, a, now)
			return n, err
		}); err != nil {
			if !errors.Is(err, size.ErrTooLarge) {
				s.retryLater(ctx, m, err)
				return
			}
			if cur, crev, gerr := s.st.Get(ctx, env.Account, env.ID); gerr == nil && sameRun(cur, rec) {
				s.tooLarge(ctx, m, env, cur, crev, err)
			} else if gerr == nil {
				s.settleLate(m, cur) // not even a note fits: the run is another's anyway
			} else {
				s.retryLater(ctx, m, gerr)
			}
			return
		}
		if late {
			// Nothing of this outcome happens (no fallback message, no
			// metrics); the message goes as for any late outcome. Acked
			// here, it would be settled for the run that had taken it
			// over too (docs/chaos.md, bug 10).
			if next.Status.Terminal() && (a.Name == state.AwaitCallback || a.Name == state.Poll) {
				// A webhook (or an operator) finished the event during the
				// call: the timer accepted published waits for nothing.
				if err := s.q.CancelSchedule(ctx, env.Account, env.ID); err != nil {
					log.Debug().Err(err).Msg("a finished event's timer not purged; it will find the event finished")
				}
			}
			s.settleLate(m, next)
			return
		}
	}
	for _, e := range effects {
		if e == state.EffectEnqueue {
			if _, err := s.q.Enqueue(ctx, env, fmt.Sprintf("%s/%s/%d", env.ID, next.Stage, next.Step())); err != nil {
				// The record is pending and this message unacked: its
				// redelivery claims the fallback stage itself.
				s.retryLater(ctx, m, err)
				return
			}
		}
	}
	if h := s.o.Hooks; h != nil && h.AfterStore != nil {
		if err := h.AfterStore(env.ID, next.Status); err != nil {
			return // as if the process died here
		}
	}
	// The lane advances before the ack: if the wake fails (or this
	// process dies first), the redelivery finds the event finished and
	// wakes the next one; acked first, the next would wait for its
	// parking schedule's safety net (docs/chaos.md, bug 6).
	if state.Finished(next.Status) {
		if err := s.order.Advance(ctx, next); err != nil {
			s.retryLater(ctx, m, err)
			return
		}
	}
	_ = m.Ack()
	s.o.Metrics.Outcome(env.Account, env.Kind, next.Status)
	if d.Verdict == outcome.VerdictRetry && !yield {
		s.o.Metrics.Retry(env.Account, env.Kind, d.Class)
	}
	switch {
	case dying:
		// The error's message is the target's answer, which a log never
		// carries (docs/security.md): its class and status say enough,
		// and the record and DEAD keep the rest.
		log.Warn().Int("attempt", rec.Attempts).Str("class", errInfo.Class).Int("http_status", errInfo.HTTPStatus).Str("reason", reason).Msg("dead-lettered")
		s.adviseDead(next)
	case d.Verdict == outcome.VerdictDone:
		log.Debug().Int("attempt", rec.Attempts).Msg("delivered")
	case d.Verdict == outcome.VerdictRetry:
		log.Info().Int("attempt", rec.Attempts).Str("class", string(d.Class)).Dur("delay", d.Delay).Msg("will retry")
	case d.Verdict == outcome.VerdictFallback:
		log.Info().Int("attempt", rec.Attempts).Msg("moving to the fallback stage")
	}
}

// tooLarge ends an event whose next record (or DEAD entry) NATS refuses
// for its size (size.ErrTooLarge), from rec as stored at rev: the same
// write would fail on every redelivery, and a redelivery after a call
// would call the target again. The event goes dead with reason
// too_large, without its result and, if the record still does not fit,
// with its payload kept in the DEAD entry only; the message is acked.
func (s *Service) tooLarge(ctx context.Context, m jetstream.Msg, env event.Envelope, rec state.Record, rev uint64, cause error) {
	now := s.st.Now()
	errInfo := &state.ErrorInfo{Class: string(outcome.ClassPermanent), Message: "too large for NATS: " + trimErr(cause)}
	next := rec
	var err error
	if next.Status == state.Scheduled {
		next, _, err = state.Apply(next, state.Action{Name: state.Due, Actor: s.actor}, now)
	}
	if err == nil {
		next, _, err = state.Apply(next, state.Action{Name: state.Fail, Actor: s.actor, Error: errInfo, Detail: dead.ReasonTooLarge + ": " + errInfo.Message}, now)
	}
	if err != nil { // a state Fail cannot leave: someone moved it; decide afresh
		s.retryLater(ctx, m, err)
		return
	}
	next.Result = nil
	e := dead.Entry{ID: env.ID, Account: env.Account, Kind: env.Kind, Reason: dead.ReasonTooLarge, Class: errInfo.Class,
		Error: errInfo.Message, At: now.UTC(), Event: &env, Record: &next}
	msgID := fmt.Sprintf("%s/dead/%d", env.ID, rec.Step())
	err = s.keepDead(ctx, m, e, msgID)
	if errors.Is(err, size.ErrTooLarge) {
		// Not even DEAD takes it: the entry without the payload, which
		// stays in the record if that fits.
		bare := env
		bare.Payload = nil
		e.Event, e.Error = &bare, e.Error+fmt.Sprintf("; the payload (%d bytes) is not in this entry", len(env.Payload))
		err = s.keepDead(ctx, m, e, msgID)
	}
	if err != nil {
		s.retryLater(ctx, m, err)
		return
	}
	_, err = s.st.Write(ctx, next, rev)
	if errors.Is(err, size.ErrTooLarge) {
		next.Payload = nil
		_, err = s.st.Write(ctx, next, rev)
	}
	if errors.Is(err, size.ErrTooLarge) {
		zerolog.Ctx(ctx).Error().Err(err).Msg("not even the dead record of a too-large event fits in NATS; the message is terminated")
		_ = m.TermWithReason(dead.ReasonTooLarge)
		return
	}
	if err != nil {
		s.retryLater(ctx, m, err)
		return
	}
	if err := s.order.Advance(ctx, next); err != nil {
		s.retryLater(ctx, m, err)
		return
	}
	_ = m.Ack()
	s.o.Metrics.Outcome(env.Account, env.Kind, next.Status)
	zerolog.Ctx(ctx).Warn().Int("attempt", rec.Attempts).Str("reason", dead.ReasonTooLarge).Str("error", errInfo.Message).Msg("dead-lettered")
	s.adviseDead(next)
}

// contested reports whether the message of the event's run here may have
// been redelivered to another replica since the claim: this connection
// reconnected (the server missed in-progress signals while it was away),
// or the run is older than half the AckWait (it waited long before its
// call). Unknown runs count as contested.
func (s *Service) contested(id string) bool {
	r, ok := s.runs.get(id)
	return !ok || s.nc.Stats().Reconnects != r.reconnects || time.Since(r.claimedAt) > s.cfg.Streams.AckWait.D()/2
}

// sameRun reports whether cur is still the run rec was claimed for: a
// reclaim (a redelivery that took the run over) keeps the message's
// sequence but counts a new attempt.
func sameRun(cur, rec state.Record) bool {
	return cur.Status == state.Running && cur.RunSeq == rec.RunSeq && cur.Attempts == rec.Attempts
}

// lateOutcome records the outcome of a run that is no longer the event's
// (another replica took it over) as a no-op, and settles the message.
func (s *Service) lateOutcome(ctx context.Context, m jetstream.Msg, env event.Envelope, what string) {
	cur, _, err := s.st.Update(ctx, env.Account, env.ID, func(cur state.Record) (state.Record, error) {
		n, _, err := state.Apply(cur, state.Action{Name: state.Note, Actor: s.actor, Detail: "late outcome ignored: " + what + " (the run was taken over)"}, s.st.Now())
		return n, err
	})
	if err != nil {
		s.retryLater(ctx, m, err)
		return
	}
	s.settleLate(m, cur)
}

// settleLate settles the message of a run whose outcome came late: cur is
// the event's record now. If the run that took over holds this same
// message (a redelivery), an ack here would settle it for that run too,
// and if that run then died nothing would bring the event back
// (docs/chaos.md, bug 8): the message is left to its new owner, or to
// AckWait. Any other message is acked.
func (s *Service) settleLate(m jetstream.Msg, cur state.Record) {
	if meta, err := m.Metadata(); err == nil && cur.Status == state.Running && cur.RunSeq == meta.Sequence.Stream {
		return
	}
	_ = m.Ack()
}

// accepted is the action for a 2xx answer: done for a sync stage; for a
// callback or poll stage, the wait for the result, whose next step (the
// callback deadline or the first poll) is scheduled before the record
// says so, so that no event ever waits without a pending next step. An
// answer that cannot be waited on fails the event, with the DEAD reason.
func (s *Service) accepted(ctx context.Context, env event.Envelope, rec state.Record, stage config.Stage, resp target.Response, now time.Time) (state.Action, string, error) {
	detail := fmt.Sprintf("target answered %d", resp.Status)
	switch {
	case stage.Handler != "":
		return state.Action{Name: state.Succeed, Actor: s.actor, Detail: "handler " + stage.Handler + " succeeded", Result: result(resp), Reference: resp.Reference}, "", nil
	case stage.Completion == config.CompletionCallback:
		deadline := queue.DueTime(now.Add(stage.CallbackSLA.D()))
		if resp.Unclear != nil {
			detail += "; its reference is not read (" + resp.Unclear.Error() + "), so this event completes only by a webhook naming its event id"
		}
		if resp.Reference != "" {
			ttl := stage.CallbackSLA.D() + s.cfg.Streams.Retention.D()
			err := s.refs.PutRef(ctx, env.Account, stage.Target, resp.Reference, env.ID, ttl)
			// A reference another event holds stays with it: this event
			// still completes by a webhook naming its event id, or meets its
			// deadline like any event whose webhook never comes.
			if c, ok := errors.AsType[*callbacks.ConflictError](err); ok {
				zerolog.Ctx(ctx).Warn().Str("holder", c.Holder).Str("target", stage.Target).Msg("provider reference already held by another event")
				holder := "event " + c.Holder
				if c.Legacy { // maybe another account's: not named in this account's history
					holder = "an event recorded before references were per account"
				}
				detail += "; reference conflict: the provider's reference is held by " + holder +
					" (webhooks naming it go there), so this event completes only by a webhook naming its event id"
			} else if err != nil {
				return state.Action{}, "", err
			}
		}
		if err := s.q.Timer(ctx, env, deadline, queue.TimerDeadline, fmt.Sprintf("%s/deadline/%d", env.ID, rec.Step())); err != nil {
			return state.Action{}, "", err
		}
		return state.Action{Name: state.AwaitCallback, Actor: s.actor, Reference: resp.Reference, NextRunAt: &deadline, Deadline: &deadline,
			Detail: detail + "; callback awaited until " + deadline.Format(time.RFC3339)}, "", nil
	case stage.Completion == config.CompletionPoll:
		if resp.Reference == "" {
			// Without it the poll URL would name no job and be polled,
			// wrongly, until the poll SLA.
			if tgt, err := s.target(env.Account, stage.Target); err == nil && tgt.PollNeedsReference() {
				msg := fmt.Sprintf("%s without a reference in its field %q (targets.%s.reference_field), which the poll url needs, so the event cannot be polled", detail, tgt.RefField(), stage.Target)
				if resp.Unclear != nil {
					msg = fmt.Sprintf("%s: its reference field %q (targets.%s.reference_field), which the poll url needs, is not read: %v; so the event cannot be polled", detail, tgt.RefField(), stage.Target, resp.Unclear)
				}
				return s.cannotWait(dead.ReasonPermanent, msg, resp), dead.ReasonPermanent, nil
			}
		}
		if n := len(resp.Reference); n > state.MaxReference {
			// The record cannot keep it, and the event cannot be polled
			// without it. (A callback stage waits on: the callback index
			// keeps a hash of the reference, and the record notes it.)
			msg := fmt.Sprintf("%s; the provider's reference is %d bytes, over the %d a record keeps, so the event cannot be polled", detail, n, state.MaxReference)
			return s.cannotWait(dead.ReasonTooLarge, msg, resp), dead.ReasonTooLarge, nil
		}
		every := s.conf().TargetFor(env.Account, stage.Target).PollEvery()
		next := queue.DueTime(now.Add(every.D()))
		deadline := now.Add(stage.PollSLA.D()).UTC()
		if err := s.q.Timer(ctx, env, next, queue.TimerPoll, fmt.Sprintf("%s/poll/%d/0", env.ID, rec.Step())); err != nil {
			return state.Action{}, "", err
		}
		return state.Action{Name: state.Poll, Actor: s.actor, Reference: resp.Reference, NextRunAt: &next, Deadline: &deadline,
			Detail: detail + "; polling every " + every.String() + " until " + deadline.Format(time.RFC3339)}, "", nil
	}
	return state.Action{Name: state.Succeed, Actor: s.actor, Detail: detail, Result: result(resp), Reference: resp.Reference}, "", nil
}

// cannotWait fails an event whose 2xx answer cannot be waited on: the
// call was made, so a retry would repeat it; an operator decides.
func (s *Service) cannotWait(reason, msg string, resp target.Response) state.Action {
	return state.Action{Name: state.Fail, Actor: s.actor, Error: &state.ErrorInfo{Class: string(outcome.ClassPermanent), Message: msg, HTTPStatus: resp.Status},
		Detail: reason + ": " + msg}
}

// result is the target's JSON answer as the event's result: the record
// keeps it up to state.MaxResult, and notes a larger one it does not keep.
func result(r target.Response) json.RawMessage {
	if len(r.Body) == 0 || !json.Valid(r.Body) {
		return nil
	}
	return json.RawMessage(r.Body)
}

func (s *Service) adviseDead(r state.Record) {
	dead.Advise(s.nc, s.subj, r)
}
