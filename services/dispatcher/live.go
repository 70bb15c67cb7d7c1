package dispatcher

import (
	"reflect"
	"strings"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/quota"
)

// conf is the config in force: the accounts' limits and target overrides
// and the targets come from it, per call, so that a reload (pkg/live)
// takes effect without a restart. What cannot change live (kinds,
// streams, …) is read from s.cfg.
func (s *Service) conf() *config.Config { return s.live.Load() }

// configChanged puts cfg in force in what was built from the config
// before: an account's pacer takes its new rate at once, for the calls
// waiting in it too; a guard whose target changed is dropped (the one
// built at the next call takes the new target), and the calls waiting
// for the target's provider-wide limit take its new one. Targets
// (URLs, headers, secrets) are built again from cfg on their next call. A
// call already under way ends with what it has. An account whose
// concurrency changed has its reader stopped and started again: its calls
// under way finish under the old limit, then its consumer and its slots
// take the new one. Breaker settings apply at each breaker's next call
// (breaker.Registry.For takes them with every call).
//
// What did not change is kept: a limiter made afresh has no memory of
// the calls just made, so dropping it at every reload (a watch of the
// accounts bucket delivers its values again after a reconnect) let an
// account's calls through at twice its rate for a moment. A pacer is kept
// even when its rate changes: the calls waiting in it wait again at the
// new rate (setRate), where a new pacer beside them let both go.
func (s *Service) configChanged(cfg *config.Config) {
	s.mu.Lock()
	old := s.built
	s.built = cfg
	if old == nil {
		s.guards = map[string]*guard{}
		s.pacers = map[string]*pacer{}
	}
	for key, g := range s.guards {
		account, name, _ := strings.Cut(key, "\x00")
		if !reflect.DeepEqual(old.Targets[name], cfg.Targets[name]) || old.OwnTarget(account, name) != cfg.OwnTarget(account, name) {
			delete(s.guards, key)
			close(g.replaced)
			if g.limit != nil && old.OwnTarget(account, name) == cfg.OwnTarget(account, name) {
				// The calls waiting for the target's token or slot take
				// its new limit now (none: they all go).
				var l quota.Limit
				if t, ok := cfg.Targets[name]; ok && t.Limited() {
					l = quota.OfTarget(t)
				}
				s.quotas.SetLimit(g.limit.key, l)
			}
		}
	}
	for account, p := range s.pacers {
		p.setRate(cfg.Account(account).Rate.PerSecond)
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
