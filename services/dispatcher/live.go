package dispatcher

import (
	"github.com/failsafe-go/failsafe-go/ratelimiter"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/target"
)

// conf is the config in force: the accounts' limits and target overrides
// and the targets come from it, per call, so that a reload (pkg/live)
// takes effect without a restart. What cannot change live (kinds,
// streams, …) is read from s.cfg.
func (s *Service) conf() *config.Config { return s.live.Load() }

// configChanged drops what was built from the config before: each
// account's guards (its rate limiter, its targets' provider-wide limits)
// and targets (URLs, headers, secrets) are built again from cfg on their
// next call. A call already under way ends with what it has. An account's
// concurrency applies when its lane next starts, its breaker settings to
// breakers made from then on.
func (s *Service) configChanged(cfg *config.Config) {
	s.mu.Lock()
	s.guards = map[string]*guard{}
	s.limiters = map[string]ratelimiter.RateLimiter[target.Response]{}
	s.mu.Unlock()
	s.targets.Reset(cfg)
}
