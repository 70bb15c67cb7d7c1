package dispatcher

import (
	"context"
	"errors"
	"time"

	"github.com/failsafe-go/failsafe-go/ratelimiter"

	"github.com/tenaz/tenaz/pkg/quota"
	"github.com/tenaz/tenaz/pkg/target"
)

// guard is the in-process protection around every call of one account to
// one target (or handler): the account's rate (pace), then, innermost and
// right before the call, the target's provider-wide limit, shared with
// every other account and replica (see limit). Retrying is not one of
// them: that is JetStream's job.
type guard struct {
	pace  *pacer       // nil: the account's rate is unlimited
	limit *targetLimit // nil: the target has no provider-wide limit
}

// pacer spaces an account's calls at its rate with failsafe-go's smooth
// rate limiter (one permit every interval, shared by the account's
// targets), and takes another permit when a call wakes late for its own:
// calls whose permits passed while the process stalled (a starved CPU, a
// long pause) would otherwise go out together, over the rate at the
// provider. It takes at most maxRepace more, so a process that is always
// late still calls.
type pacer struct {
	rl       ratelimiter.RateLimiter[target.Response]
	interval time.Duration
	// until sleeps until t, or ctx ends; tests stall it.
	until func(ctx context.Context, t time.Time) error
}

// maxRepace bounds the permits one call takes again when it is late.
const maxRepace = 3

// lateAfter is how late a call may wake for its permit and still go: half
// the interval, and never under the few milliseconds timers are late by
// on a busy machine (at a high rate, a call taking its permit again for
// that would cut the rate, not hold it).
func (p *pacer) lateAfter() time.Duration { return max(p.interval/2, 10*time.Millisecond) }

// wait returns when the call may go, or with ctx's error.
func (p *pacer) wait(ctx context.Context) error {
	for i := 0; ; i++ {
		due := time.Now().Add(p.rl.ReservePermit())
		if err := p.until(ctx, due); err != nil {
			return err
		}
		if i == maxRepace || time.Since(due) <= p.lateAfter() {
			return nil
		}
	}
}

// sleepUntil sleeps until t, or until ctx ends.
func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// targetLimit is a target's provider-wide rate and concurrency
// (targets.<t>.rate and .concurrency), counted in tenaz_quotas over every
// account and every replica (pkg/quota): one compare-and-set takes a
// token and a slot before the call, one gives the slot back after it.
//
// Under "concurrency: auto" the record holds the learned concurrency,
// which every replica's refusals cut and its successes grow, and each
// replica also learns from latency with its own adaptive limiter (local),
// as an account's "auto" does: a provider that slows down is eased off
// before it refuses. A call needs a slot of both.
type targetLimit struct {
	s     *Service
	name  string
	lim   quota.Limit
	local *autoLimit // under "auto": this replica's latency-learned share; nil otherwise
}

// errNotCalled is the outcome of a call that waited for its target's
// limit until the stop left no time to make it (see Stop): it was not
// made, and its message comes back.
var errNotCalled = errors.New("stopping: the call was not made")

// rateLimiter returns the account's limiter (shared by its targets), or
// nil when the account's rate is unlimited. Callers hold s.mu.
func (s *Service) rateLimiterLocked(account string) ratelimiter.RateLimiter[target.Response] {
	if rl, ok := s.limiters[account]; ok {
		return rl
	}
	var rl ratelimiter.RateLimiter[target.Response]
	if r := s.conf().Account(account).Rate; r.PerSecond > 0 {
		// Smooth: one call every 1/rate, waiting (within the account's own
		// concurrency slots, so no other account waits) rather than failing.
		rl = ratelimiter.NewSmoothBuilderWithMaxRate[target.Response](time.Duration(float64(time.Second) / r.PerSecond)).
			WithMaxWaitTime(24 * time.Hour).Build()
	}
	s.limiters[account] = rl
	return rl
}

// guardFor returns the guard of account + target name.
func (s *Service) guardFor(account, name string) *guard {
	key := account + "\x00" + name
	s.mu.Lock()
	defer s.mu.Unlock()
	if g, ok := s.guards[key]; ok {
		return g
	}
	g := &guard{}
	if rl := s.rateLimiterLocked(account); rl != nil {
		interval := time.Duration(float64(time.Second) / s.conf().Account(account).Rate.PerSecond)
		g.pace = &pacer{rl: rl, interval: interval, until: sleepUntil}
	}
	if t, ok := s.conf().Targets[name]; ok && t.Limited() && s.quotas != nil {
		g.limit = &targetLimit{s: s, name: name, lim: quota.OfTarget(t)}
		if l := g.limit.lim.Learn; l != nil {
			g.limit.local = s.targetAutoLocked(name, l)
		}
	}
	s.guards[key] = g
	return g
}

// run calls fn at the account's pace, the target's limit innermost.
func (g *guard) run(ctx context.Context, fn func(context.Context) (target.Response, error)) (target.Response, error) {
	if g.pace != nil {
		if err := g.pace.wait(ctx); err != nil {
			return target.Response{}, err
		}
	}
	if g.limit != nil {
		return g.limit.around(ctx, fn)
	}
	return fn(ctx)
}

// around makes fn's call once the target has a token and a free slot for
// it. While it has none the call waits, in its account's concurrency slot
// (so no other account waits with it, and other targets' calls go on),
// without failing: a throttled call is counted, never an error. The
// account's own policies let the call go first, so the target's token
// and slot are taken right before the call, and the slot is given back
// as soon as it returns.
func (tl *targetLimit) around(ctx context.Context, fn func(context.Context) (target.Response, error)) (target.Response, error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-tl.s.noCalls:
			cancel()
		case <-wctx.Done():
		}
	}()
	var local *autoPermit
	if tl.local != nil {
		p, waited, err := tl.local.acquire(wctx, tl.s.noCalls)
		if waited {
			tl.s.o.Metrics.TargetThrottled(tl.name)
		}
		if err != nil {
			if ctx.Err() != nil {
				return target.Response{}, ctx.Err()
			}
			return target.Response{}, errNotCalled
		}
		local = p
	}
	release, waited, err := tl.s.quotas.Acquire(wctx, quota.TargetKey(tl.name), tl.lim)
	if waited {
		tl.s.o.Metrics.TargetThrottled(tl.name)
	}
	if err != nil {
		local.drop()
		if ctx.Err() != nil {
			return target.Response{}, ctx.Err() // stopping hard
		}
		return target.Response{}, errNotCalled
	}
	select {
	case <-tl.s.noCalls:
		release(quota.Answer{})
		local.drop()
		return target.Response{}, errNotCalled
	default:
	}
	resp, err := local.timed(fn)(ctx)
	local.done(err, ctx.Err() == nil)
	release(answerOf(err, ctx.Err() == nil))
	return resp, err
}

// answerOf is what a call's outcome says of its target's capacity.
func answerOf(err error, made bool) quota.Answer {
	if !made {
		return quota.Answer{}
	}
	if refused, after := overloaded(err); refused {
		return quota.Answer{Refused: true, RetryAfter: after}
	}
	return quota.Answer{OK: err == nil}
}

// targetAutoLocked is this replica's latency-learned share of target
// name's "auto" concurrency, shared by every account. Callers hold s.mu.
func (s *Service) targetAutoLocked(name string, l *quota.Learn) *autoLimit {
	if a, ok := s.targetAuto[name]; ok {
		return a
	}
	a := newAutoLimit(1, l.Max, l.Start, false, nil)
	s.targetAuto[name] = a
	return a
}
