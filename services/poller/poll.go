package poller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/metrics"
	"github.com/tenaz/tenaz/pkg/outcome"
	"github.com/tenaz/tenaz/pkg/queue"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/target"
	"github.com/tenaz/tenaz/pkg/tracing"
)

// pollRun is one poll of an event whose timer fired: the record the
// timer found and its revision (every write of the poll is a
// compare-and-set on it), the stage and the target it polls. Its steps:
// poll finds the target, putOff keeps a poll that may not go now from
// going, ask makes the request, and the answer decides: complete on a
// final one, escalate (manual review) on a permanent refusal or past the
// poll SLA, else repoll.
type pollRun struct {
	env   event.Envelope
	rec   state.Record
	rev   uint64
	stage config.Stage
	tgt   *target.Target
	every time.Duration // the target's poll interval
	n     int           // this poll's number
}

// poll asks the target once and moves the event: done on a final answer,
// manual review past the poll SLA or on a permanent refusal, else the
// next poll.
func (s *Service) poll(ctx context.Context, env event.Envelope, rec state.Record, rev uint64) error {
	kind, ok := s.cfg.Kind(rec.Kind)
	if !ok {
		return s.escalate(ctx, env, rec, rev, s.st.Now(), fmt.Sprintf("kind %q is no longer configured", rec.Kind), "", nil)
	}
	p := &pollRun{env: env, rec: rec, rev: rev, n: rec.Polls + 1}
	p.stage, _ = kind.StageFor(rec.Stage == state.StageFallback)
	p.every = s.live.Load().TargetFor(env.Account, p.stage.Target).PollEvery().D()
	tgt, err := s.target(env.Account, p.stage.Target)
	if err != nil {
		return s.escalate(ctx, env, rec, rev, s.st.Now(), err.Error(), "", nil)
	}
	p.tgt = tgt
	release, off, err := s.putOff(ctx, env, rec, p.stage.Target, p.every)
	if off || err != nil {
		return err
	}
	ctx, span := tracing.Poll(ctx, env, p.n, rec.Stage, p.stage.Target)
	defer span.End()
	ans, perr := s.ask(ctx, p)
	release(perr)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	now := s.st.Now()
	if perr == nil && ans.Done {
		return s.complete(ctx, p, ans, now)
	}
	answer := "not final"
	var errInfo *state.ErrorInfo
	switch {
	case perr != nil:
		cls := outcome.ClassOf(perr)
		errInfo = &state.ErrorInfo{Class: string(cls), Message: perr.Error(), HTTPStatus: outcome.StatusOf(perr)}
		answer = "error: " + perr.Error()
		if cls == outcome.ClassPermanent {
			return s.escalate(ctx, env, rec, rev, now, fmt.Sprintf("poll %d refused", p.n), ": "+perr.Error(), errInfo)
		}
	case ans.Value != "":
		answer = fmt.Sprintf("%s is %q", tgt.DoneField(), ans.Value)
	}
	if rec.Deadline != nil && !now.Before(*rec.Deadline) {
		s.o.Metrics.Poll(p.stage.Target, metrics.PollExpired)
		tracing.Record(ctx, tracing.Result{Outcome: metrics.PollExpired})
		return s.escalate(ctx, env, rec, rev, now,
			fmt.Sprintf("poll SLA passed (%s) after %d polls", rec.Deadline.Format(time.RFC3339), p.n), "; last answer: "+answer, errInfo)
	}
	return s.repoll(ctx, p, answer, perr, now)
}

// ask makes the poll's request and counts its answer: done, pending or
// an error.
func (s *Service) ask(ctx context.Context, p *pollRun) (target.PollAnswer, error) {
	mx, name := s.o.Metrics, p.stage.Target
	began := time.Now()
	ans, err := p.tgt.Poll(ctx, target.Request{Event: p.env, Attempt: p.rec.Attempts, Reference: p.rec.Reference, Replay: p.rec.Replays})
	if ctx.Err() != nil {
		return ans, err
	}
	mx.DeliveryLatency(p.env.Account, p.env.Kind, name, time.Since(began), ctx)
	switch {
	case err != nil:
		mx.Poll(name, metrics.PollError)
		tracing.Record(ctx, tracing.Result{Outcome: metrics.PollError, Class: string(outcome.ClassOf(err)), HTTPStatus: outcome.StatusOf(err), Error: err.Error()})
	case ans.Done:
		mx.Poll(name, metrics.PollDone)
		tracing.Record(ctx, tracing.Result{Outcome: metrics.PollDone, Class: string(outcome.ClassSuccess)})
	default:
		mx.Poll(name, metrics.PollPending)
		tracing.Record(ctx, tracing.Result{Outcome: metrics.PollPending, Class: string(outcome.ClassSuccess)})
	}
	return ans, err
}

// complete stores the final answer as the event's result (when it is
// JSON that fits a record) and wakes what waits behind the event.
func (s *Service) complete(ctx context.Context, p *pollRun, ans target.PollAnswer, now time.Time) error {
	a := state.Action{Name: state.Complete, Actor: s.actor, Detail: fmt.Sprintf("poll %d: %s", p.n, ans.Value)}
	if json.Valid(ans.Body) {
		a.Result = json.RawMessage(ans.Body) // one too large is dropped with a note (state.Action)
	}
	next, _, err := state.Apply(p.rec, a, now)
	if err != nil {
		return err
	}
	if _, err := s.write(ctx, next, p.rev); err != nil {
		return err
	}
	s.o.Metrics.Outcome(p.env.Account, p.env.Kind, next.Status)
	zerolog.Ctx(ctx).Debug().Int("polls", p.n).Msg("poll brought the result")
	return s.order.Advance(ctx, next)
}

// repoll schedules the next poll, one interval on (longer when the
// provider's refusal asked for a longer wait, never past the poll SLA),
// then records this one: its timer is durable before the record says
// when it comes.
func (s *Service) repoll(ctx context.Context, p *pollRun, answer string, perr error, now time.Time) error {
	every := p.every
	if ra, ok := errors.AsType[*outcome.RetryAfterError](perr); ok && ra.After > every {
		every = ra.After // the provider asked for a longer wait (a 429's or 503's Retry-After)
	}
	at := queue.DueTime(now.Add(every))
	if p.rec.Deadline != nil && at.After(*p.rec.Deadline) {
		at = queue.DueTime(*p.rec.Deadline) // one last poll at the SLA
	}
	if err := s.q.Timer(ctx, p.env, at, queue.TimerPoll, fmt.Sprintf("%s/poll/%d/%d", p.env.ID, p.rec.Step(), p.n)); err != nil {
		return err
	}
	next, _, err := state.Apply(p.rec, state.Action{Name: state.Repoll, Actor: s.actor, NextRunAt: &at,
		Detail: fmt.Sprintf("poll %d: %s; next at %s", p.n, answer, at.Format(time.RFC3339))}, now)
	if err != nil {
		return err
	}
	_, err = s.write(ctx, next, p.rev)
	return err
}
