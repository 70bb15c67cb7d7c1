package dispatcher

import (
	"reflect"
	"strings"

	"github.com/tenaz/tenaz/pkg/config"
)

// conf is the config in force: the accounts' limits and target overrides
// and the targets come from it, per call, so that a reload (pkg/live)
// takes effect without a restart. What cannot change live (kinds,
// streams, …) is read from s.cfg.
func (s *Service) conf() *config.Config { return s.live.Load() }

// configChanged drops what was built from a config whose inputs changed:
// an account's rate limiter when its rate changed, a guard (the account's
// limiter, its target's provider-wide limit) when either changed. Targets
// (URLs, headers, secrets) are built again from cfg on their next call. A
// call already under way ends with what it has. An account whose
// concurrency changed has its reader stopped and started again: its calls
// under way finish under the old limit, then its consumer and its slots
// take the new one. Breaker settings apply to breakers made from then on.
//
// What did not change is kept: a limiter made afresh has no memory of
// the calls just made, so dropping it at every reload (a watch of the
// accounts bucket delivers its values again after a reconnect) let an
// account's calls through at twice its rate for a moment.
func (s *Service) configChanged(cfg *config.Config) {
	s.mu.Lock()
	old := s.built
	s.built = cfg
	if old == nil {
		s.guards = map[string]*guard{}
		s.pacers = map[string]*pacer{}
	}
	rateChanged := func(account string) bool {
		return old.Account(account).Rate.PerSecond != cfg.Account(account).Rate.PerSecond
	}
	for key := range s.guards {
		account, name, _ := strings.Cut(key, "\x00")
		if rateChanged(account) || !reflect.DeepEqual(old.Targets[name], cfg.Targets[name]) ||
			old.OwnTarget(account, name) != cfg.OwnTarget(account, name) {
			delete(s.guards, key)
		}
	}
	for account := range s.pacers {
		if rateChanged(account) {
			delete(s.pacers, account)
		}
	}
	if old != nil {
		for account, l := range s.readers {
			was, now := old.Account(account), cfg.Account(account)
			if was.MaxConcurrency() != now.MaxConcurrency() || was.Concurrency.Auto() != now.Concurrency.Auto() {
				// Started again once its calls returned (handOver then
				// reconciles), with its consumer put under cfg.
				delete(s.readers, account)
				s.handOver(account, l, false)
			}
		}
	}
	s.mu.Unlock()
	s.targets.Reset(cfg)
}
