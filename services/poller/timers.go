package poller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/dead"
	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/metrics"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/queue"
	"github.com/tenaz/tenaz/pkg/quota"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/store"
	"github.com/tenaz/tenaz/pkg/target"
	"github.com/tenaz/tenaz/pkg/tracing"
)

// errConflict asks handle to look at the record again: it changed while
// this replica decided.
var errConflict = errors.New("record changed meanwhile")

// handle acts on one fired timer. The record decides, not the message: a
// timer for an event that moved on (a callback arrived, an operator
// acted) is dropped. The message is acked only once the next step is
// durable (the next poll's schedule, the fallback's message, the review).
func (s *Service) handle(ctx context.Context, m jetstream.Msg, env event.Envelope) {
	log := tracing.Log(s.log.With().Str("event_id", env.ID).Str("account", env.Account).Str("kind", env.Kind).Logger(), env.Traceparent)
	ctx = log.WithContext(ctx)
	var seq uint64
	if md, err := m.Metadata(); err == nil {
		if md.NumDelivered > maxDeliveries {
			s.giveUp(ctx, m, env, md)
			return
		}
		seq = md.Sequence.Stream
	}
	var err error
	for range 8 {
		err = s.step(ctx, env, seq)
		if !errors.Is(err, errConflict) {
			break
		}
	}
	if errors.Is(err, store.ErrUndecodable) {
		// Read again it never would: the event goes to DEAD, its record
		// made again from the timer's envelope, as the dispatcher does.
		var moved bool
		if moved, err = s.giveUps().Undecodable(ctx, env, fmt.Sprintf("undecodable/%s/%d", env.ID, seq)); moved {
			log.Error().Msg("the event's stored record does not decode: made again from its timer and kept in DEAD")
		}
	}
	if errors.Is(err, errRunInFlight) {
		// A run that gets a 2xx publishes the first poll's (or the
		// deadline's) timer, then stores "polling"; a timer whose publish
		// waited out a nats-server restart fires at once, before that.
		// Dropped, the event would wait with no timer (docs/chaos.md,
		// bug 9): looked at again.
		if queue.LookAgainLater(m) {
			log.Debug().Msg("timer fired while the run that set it is storing its outcome: looked at again")
			return
		}
		err = nil // looked at often enough: dropped, as for any event that moved on
	}
	if store.IsFull(err) && ctx.Err() == nil {
		// Neither DEAD nor its waiting room has room for the event's
		// review entry (dead.Writer.Keep: the server's storage is full).
		// NAKed, the timer would hold a slot of the poller's ack window,
		// which every account's timers share, for as long as that lasts,
		// and be given up as a crash after its deliveries: it is set
		// again instead.
		if err := s.q.Timer(ctx, env, time.Now().Add(roomWait), m.Headers().Get(names.HeaderTimer), ""); err == nil {
			log.Warn().Msg("neither DEAD nor its waiting room has room for this event's entry: its timer is set again")
			_ = m.Ack()
			return
		}
	}
	if err != nil {
		if ctx.Err() == nil {
			log.Warn().Err(err).Msg("timer not handled; it will be redelivered")
			_ = m.NakWithDelay(2 * time.Second)
		}
		return
	}
	_ = m.Ack()
}

// roomWait is how long a timer whose event's entry nothing has room for
// waits before it is looked at again.
const roomWait = 5 * time.Second

// errRunInFlight: the event is running, claimed for a message stored
// before this timer: the timer may be that run's own next step, fired
// before the run stored the state that waits for it.
var errRunInFlight = errors.New("the run that set this timer has not stored its outcome yet")

// step reads the record and takes the step its state asks for; seq is the
// timer's stream sequence (0 when unknown).
func (s *Service) step(ctx context.Context, env event.Envelope, seq uint64) error {
	rec, rev, err := s.st.Get(ctx, env.Account, env.ID)
	if errors.Is(err, store.ErrNotFound) {
		return nil // expired or removed: nothing waits
	}
	if err != nil {
		return err
	}
	now := s.st.Now()
	switch rec.Status {
	case state.AwaitingCallback:
		if queue.Early(now, rec.Deadline) {
			// Fired early (a stale copy): make sure the real deadline waits.
			return s.q.EnsureNext(ctx, env, rec, now)
		}
		return s.deadlinePassed(ctx, env, rec, rev, now)
	case state.Polling:
		if queue.Early(now, rec.NextRunAt) {
			// Fired early: a stale copy, or a timer that replaced the
			// event's own (a late outcome's first poll, published after
			// the winner's). Dropped with the event's own timer gone, the
			// event was left polling with nothing to poll it.
			return s.q.EnsureNext(ctx, env, rec, now)
		}
		return s.poll(ctx, env, rec, rev)
	case state.Running:
		if seq > rec.RunSeq {
			return errRunInFlight
		}
	case state.Pending:
		if step, ok := fallbackWithoutRun(rec); ok {
			// This timer's deadline moved the event to its fallback stage,
			// and the fallback's message may never have been published (a
			// crash, or nats-server down, between the write and the
			// publish): publish it again under the same message id (a copy
			// within the stream's duplicate window is dropped, a later one
			// by the dispatcher's claim).
			_, err := s.q.Enqueue(ctx, env, fmt.Sprintf("%s/%s/%d", env.ID, state.StageFallback, step))
			return err
		}
	}
	if state.Finished(rec.Status) {
		// Its finisher may have failed to wake its lane's next event (this
		// poller, whose timer comes back for that, or a webhook).
		if err := s.order.Advance(ctx, rec); err != nil {
			return err
		}
	}
	if err := s.q.EnsureNext(ctx, env, rec, now); err != nil {
		return err
	}
	zerolog.Ctx(ctx).Debug().Str("status", string(rec.Status)).Msg("timer for an event that moved on: dropped")
	return nil
}

// fallbackWithoutRun reports whether rec's last step (notes aside) is a
// poller's move to the fallback stage, with no run since, and the step
// count the record had right after it (the message id's).
func fallbackWithoutRun(rec state.Record) (int, bool) {
	for i := len(rec.History) - 1; i >= 0; i-- {
		e := rec.History[i]
		if e.Action == state.Note {
			continue
		}
		if e.Action == state.Fallback && strings.HasPrefix(e.Actor, "poller/") && rec.Stage == state.StageFallback {
			return i + 1 + rec.Truncated, true
		}
		return 0, false
	}
	return 0, false
}

// deadlinePassed: no callback came in time. The kind says what next:
// manual review (default) or the fallback stage.
func (s *Service) deadlinePassed(ctx context.Context, env event.Envelope, rec state.Record, rev uint64, now time.Time) error {
	kind, _ := s.cfg.Kind(rec.Kind)
	stage, _ := kind.StageFor(rec.Stage == state.StageFallback)
	why := fmt.Sprintf("no callback from %s by the deadline %s", stage.Target, rec.Deadline.Format(time.RFC3339))
	if kind.OnCallbackTimeout == config.OnCallbackTimeoutFallback && rec.Stage == state.StagePrimary && kind.Fallback != nil {
		return s.toFallback(ctx, env, rec, rev, now, why+": moving to the fallback stage")
	}
	return s.escalate(ctx, env, rec, rev, now, why, "", nil)
}

func (s *Service) toFallback(ctx context.Context, env event.Envelope, rec state.Record, rev uint64, now time.Time, why string) error {
	next, _, err := state.Apply(rec, state.Action{Name: state.Fallback, Actor: s.actor, Detail: why}, now)
	if err != nil {
		return err
	}
	_, err = s.write(ctx, next, rev)
	if err != nil {
		return err
	}
	// The record says pending at the fallback stage; if this publish is
	// lost, the timer comes back, finds it pending and the reconciler
	// puts it on its way.
	_, err = s.q.Enqueue(ctx, env, fmt.Sprintf("%s/%s/%d", env.ID, next.Stage, next.Step()))
	if err == nil {
		s.o.Metrics.Outcome(env.Account, env.Kind, next.Status)
		zerolog.Ctx(ctx).Info().Str("why", why).Msg("moved to the fallback stage")
	}
	return err
}

// escalate moves the event to manual_review, keeps it in DEAD (the
// operators' feed, with payload and history) and advises. The history,
// DEAD and the advisory say why and what the target answered; the log
// says why alone, since a log never carries a target's answer
// (docs/security.md).
func (s *Service) escalate(ctx context.Context, env event.Envelope, rec state.Record, rev uint64, now time.Time, why, answered string, errInfo *state.ErrorInfo) error {
	logged := why
	why += answered
	a := state.Action{Name: state.Escalate, Actor: s.actor, Detail: why}
	next, _, err := state.Apply(rec, a, now)
	if err != nil {
		return err
	}
	if errInfo != nil {
		next.LastError = errInfo
	}
	e := dead.Entry{ID: env.ID, Account: env.Account, Kind: env.Kind, Reason: dead.ReasonReview, Error: why,
		At: now.UTC(), Event: &env, Record: &next}
	if next.LastError != nil {
		e.Class, e.Status = next.LastError.Class, next.LastError.HTTPStatus
	}
	if _, err := s.dead.Keep(ctx, e, fmt.Sprintf("%s/review/%d", env.ID, next.Step())); err != nil {
		return err
	}
	if _, err := s.write(ctx, next, rev); err != nil {
		return err
	}
	dead.AdviseReview(s.nc, s.subj, next, why)
	s.o.Metrics.Outcome(env.Account, env.Kind, next.Status)
	l := zerolog.Ctx(ctx).Warn().Str("why", logged)
	if errInfo != nil {
		l = l.Str("class", errInfo.Class).Int("http_status", errInfo.HTTPStatus)
	}
	l.Msg("moved to manual review")
	// Failed, the timer comes back and finds the event finished (step).
	return s.order.Advance(ctx, next)
}

// putOff keeps a poll that may not go now from going: its account is
// paused, its breaker for the target is open, or the target's rate or
// concurrency has no token or slot for it soon (it waits for one
// meanwhile). The poll's timer is set again for when it may, and the
// record stays as it is: no poll was made. off reports that it was put
// off; otherwise release gives back what the poll took of the target's
// limits, with its outcome.
func (s *Service) putOff(ctx context.Context, env event.Envelope, rec state.Record, tgt string, every time.Duration) (release func(error), off bool, err error) {
	until, why := s.heldUntil(env.Account, tgt, every)
	if until.IsZero() {
		g, err := s.paced(ctx, env.Account, tgt, every)
		if err != nil {
			return nil, false, err
		}
		if g.until.IsZero() {
			// The wait for the target took up to waitMax: a pause or an
			// open breaker that came meanwhile holds the poll too, and
			// what it took of the target goes back.
			if until, why = s.heldUntil(env.Account, tgt, every); until.IsZero() {
				return g.release, false, nil
			}
			g.release(target.ErrNotSent)
		} else {
			until, why = g.until, g.why
		}
	}
	s.o.Metrics.PutOff(env.Account, why)
	zerolog.Ctx(ctx).Debug().Time("until", until).Str("reason", why).Msg("poll put off")
	msgID := fmt.Sprintf("%s/poll/%d/%d/off/%d", env.ID, rec.Step(), rec.Polls+1, until.Unix())
	return nil, true, s.q.Timer(ctx, env, queue.DueTime(until), queue.TimerPoll, msgID)
}

// crowded puts off a timer whose account holds all the timers it may
// on this replica (turns): it is set again one poll interval of the
// kind's target later (roomWait for a kind that does not poll), or
// later still behind the rest of the account's crowd (turns.backAt),
// and acked. The record decides when it fires again, as for any timer.
func (s *Service) crowded(m jetstream.Msg, env event.Envelope) {
	wait := roomWait
	cfg := s.live.Load()
	if kind, ok := cfg.Kind(env.Kind); ok {
		if t := cfg.TargetFor(env.Account, kind.Target); t.Poll != nil {
			wait = t.Poll.Interval.D()
		}
	}
	var seq uint64
	if md, err := m.Metadata(); err == nil {
		seq = md.Sequence.Stream
	}
	at := queue.DueTime(s.turns.backAt(env.Account, time.Now().Add(wait), wait))
	msgID := fmt.Sprintf("%s/crowded/%d/%d", env.ID, seq, at.Unix())
	if err := s.q.Timer(s.runCtx, env, at, m.Headers().Get(names.HeaderTimer), msgID); err != nil {
		s.log.Warn().Err(err).Str("event_id", env.ID).Msg("timer of a crowded account not put off; it will be redelivered")
		_ = m.NakWithDelay(wait)
		return
	}
	s.o.Metrics.PutOff(env.Account, metrics.PutOffCrowded)
	s.log.Debug().Str("event_id", env.ID).Str("account", env.Account).Time("until", at).
		Msg("timer put off: its account holds all the timers it may on this replica")
	_ = m.Ack()
}

// heldUntil is when a poll of account's target, held by an operator's
// pause of the account, by the account's open breaker for the target or
// by its stored definition left out (config.Config.LeftOut), is looked
// at again: the pause's or the cooldown's end, or the next poll's time if
// sooner (a resume, or a breaker closed by an operator, is heard, not
// waited for), and why (metrics.PutOffPaused, PutOffBreaker or
// PutOffLeftOut). Zero: nothing holds it. A pause and an open breaker
// stop an account's calls, and a poll is one.
func (s *Service) heldUntil(account, tgt string, every time.Duration) (time.Time, string) {
	now := time.Now()
	var end time.Time
	why := ""
	if _, out := s.live.Load().LeftOut[account]; out {
		return now.Add(every), metrics.PutOffLeftOut
	}
	if p, ok := s.paused.Get(account); ok && p.Holds(now) {
		end, why = p.End(), metrics.PutOffPaused
	} else if end = s.breaker.HeldUntil(account, tgt); !end.IsZero() {
		why = metrics.PutOffBreaker
	} else {
		return time.Time{}, ""
	}
	if next := now.Add(every); next.Before(end) {
		return next, why
	}
	return end, why
}

// paced returns once a poll of account's target may go by the target's
// provider-wide rate and concurrency (see pacer), or the time the poll is
// put off to; every is the target's poll interval.
func (s *Service) paced(ctx context.Context, account, name string, every time.Duration) (gate, error) {
	cfg := s.live.Load()
	t, ok := cfg.Targets[name]
	if !ok || !t.Limited() {
		return gate{release: noSlot}, nil
	}
	return s.pace.wait(ctx, quota.KeyOf(cfg, account, name), quota.OfTarget(t), every, func() { s.o.Metrics.TargetThrottled(name) })
}

// write stores next by compare-and-set; a conflict is errConflict.
func (s *Service) write(ctx context.Context, next state.Record, rev uint64) (uint64, error) {
	nrev, err := s.st.Write(ctx, next, rev)
	if errors.Is(err, store.ErrConflict) {
		return 0, errConflict
	}
	return nrev, err
}
