package dispatcher

import (
	"context"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/ratelimiter"

	"github.com/tenaz/tenaz/pkg/target"
)

// guard is the in-process protection around every call of one account to
// one target (or handler). Its policies are composed in one visible
// failsafe.With line; retrying is not one of them — that is JetStream's job.
type guard struct {
	exec failsafe.Executor[target.Response]
}

// rateLimiter returns the account's limiter (shared by its targets), or
// nil when the account's rate is unlimited. Callers hold s.mu.
func (s *Service) rateLimiterLocked(account string) ratelimiter.RateLimiter[target.Response] {
	if rl, ok := s.limiters[account]; ok {
		return rl
	}
	var rl ratelimiter.RateLimiter[target.Response]
	if r := s.cfg.Account(account).Rate; r.PerSecond > 0 {
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
	var policies []failsafe.Policy[target.Response]
	if rl := s.rateLimiterLocked(account); rl != nil {
		policies = append(policies, rl)
	}
	g := &guard{}
	if len(policies) > 0 {
		g.exec = failsafe.With(policies...)
	}
	s.guards[key] = g
	return g
}

// run calls fn under the guard's policies (directly when there are none).
func (g *guard) run(ctx context.Context, fn func(context.Context) (target.Response, error)) (target.Response, error) {
	if g.exec == nil {
		return fn(ctx)
	}
	return g.exec.WithContext(ctx).Get(func() (target.Response, error) { return fn(ctx) })
}
