package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/tenaz/tenaz/pkg/breaker"
	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/outcome"
	"github.com/tenaz/tenaz/pkg/target"
)

// admission is a breaker's permission for one call (zero: no breaker).
type admission struct {
	b *breaker.Breaker
	p breaker.Permit
}

// ask asks the breaker of the event's account + target whether a call may
// go; when it may not, retryAt is when to ask again.
func (s *Service) ask(ctx context.Context, env event.Envelope, fallback bool) (adm admission, retryAt time.Time, ok bool) {
	kind, ok := s.cfg.Kind(env.Kind)
	if !ok {
		return admission{}, time.Time{}, true
	}
	stage, _ := kind.StageFor(fallback)
	if stage.Target == "" { // a Go handler: no remote to protect
		return admission{}, time.Time{}, true
	}
	cfg := s.conf()
	acct := cfg.Account(env.Account)
	t, _ := cfg.Target(stage.Target)
	b := s.breakers.For(env.Account, stage.Target, breaker.Config{
		Failures: acct.Breaker.Failures, Cooldown: acct.Breaker.Cooldown.D(), ProbeTimeout: t.Timeout.D() + 10*time.Second,
	})
	p, err := b.Allow(ctx)
	switch {
	case err != nil && p.RetryAt.IsZero():
		// No breaker to ask (its bucket could not be opened): a missing
		// breaker must not stop every call.
		zerolog.Ctx(ctx).Warn().Err(err).Msg("breaker unavailable; calling anyway")
		return admission{}, time.Time{}, true
	case err != nil:
		// It refuses (tripped here, or its cooldown is over) but could
		// not store so: the refusal holds, and so does one probe per
		// cooldown, which its bucket decides.
		zerolog.Ctx(ctx).Warn().Err(err).Time("until", p.RetryAt).Msg("breaker refuses, but its state could not be stored; waiting")
		return admission{}, p.RetryAt, false
	}
	if p.OK {
		return admission{b: b, p: p}, time.Time{}, true
	}
	return admission{}, p.RetryAt, false
}

// waitForBreaker re-enters the event through its schedule at retryAt and
// acks m.
func (s *Service) waitForBreaker(ctx context.Context, m jetstream.Msg, env event.Envelope, retryAt time.Time) {
	if err := s.q.ScheduleAt(ctx, env, retryAt, ""); err != nil {
		s.retryLater(ctx, m, err)
		return
	}
	_ = m.Ack()
	zerolog.Ctx(ctx).Debug().Time("until", retryAt).Msg("breaker open: waiting")
}

// errBreakerOpened is the outcome of a call that was allowed, then waited
// for a concurrency slot while the breaker opened: it is not made.
var errBreakerOpened = errors.New("the breaker opened before the call was made")

// errProbeLost is errBreakerOpened for a call that was to be the
// breaker's probe, and whose claim another call took first (or the
// breaker moved on, or its bucket did not answer).
var errProbeLost = fmt.Errorf("%w: another call probes it", errBreakerOpened)

// openedSince reports whether the breaker opened after the call was
// allowed, and until when.
func (a admission) openedSince() (time.Time, bool) {
	if a.b == nil {
		return time.Time{}, false
	}
	return a.b.OpenedSince(a.p)
}

// admitted makes call check its admission right before it goes, its
// wait for its turn (the target's slot, the account's pace) over: a call
// allowed while the breaker was closed is not made once it opened (the
// cooldown may be over by then, and the probe under way), and a call that
// is to be the probe claims it (breaker.Claim), so the claim covers the
// call, not the wait.
func (a *admission) admitted(call func(context.Context) (target.Response, error)) func(context.Context) (target.Response, error) {
	if a.b == nil {
		return call
	}
	return func(ctx context.Context) (target.Response, error) {
		if !a.p.Probe {
			if until, opened := a.openedSince(); opened {
				return target.Response{}, outcome.RetryAfter(time.Until(until), errBreakerOpened)
			}
			return call(ctx)
		}
		p, err := a.b.Claim(ctx, a.p)
		if err != nil {
			return target.Response{}, fmt.Errorf("%w: %w", errProbeLost, err)
		}
		a.p = p
		return call(ctx)
	}
}

// record tells the breaker how the call went: transient failures and
// timeouts count against the target; a success or a permanent rejection
// shows it is up.
func (a admission) record(ctx context.Context, callErr error) {
	if a.b == nil {
		return
	}
	c := outcome.ClassOf(callErr)
	_ = a.b.Record(ctx, a.p, c == outcome.ClassSuccess || c == outcome.ClassPermanent)
}

// onBreaker wakes the tail of an account whose breaker opened or closed:
// while one of its breakers is open its tail reads nothing (no
// deliveries, no attempts burnt), and once it closes the tail goes on at
// once, unless an operator's pause or another open breaker of the account
// holds it (pausedUntil).
func (s *Service) onBreaker(c breaker.Change) {
	if c.State != breaker.Open && c.State != breaker.Closed {
		return
	}
	s.log.Info().Str("account", c.Account).Str("target", c.Target).Str("state", string(c.State)).Time("open_until", c.OpenUntil).Msg("breaker")
	// Not here: the registry reports the breakers it loads while Start
	// holds s.mu.
	go s.wakeTail(c.Account)
}
