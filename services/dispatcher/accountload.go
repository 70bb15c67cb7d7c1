package dispatcher

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenaz/tenaz/pkg/metrics"
	"github.com/tenaz/tenaz/pkg/quota"
	"github.com/tenaz/tenaz/pkg/target"
)

// The account metrics (tenaz_account_*): each replica reports the
// accounts it owns — those whose lease it holds — with their limits, the
// calls in flight and the calls held back by a limit. An account is owned
// by one replica at a time, so these are the account's numbers over the
// cluster, and each account has its series on one replica only.

// accountLoads counts, per account, this replica's calls in flight and
// the calls that waited for a limit, since the replica started (a counter
// may not go back when an account leaves and comes back).
type accountLoads struct {
	mu sync.Mutex
	m  map[string]*accountLoad
}

type accountLoad struct {
	inFlight  atomic.Int64
	slotWaits atomic.Uint64 // waited for a free slot of the account's concurrency
	rateWaits atomic.Uint64 // waited in its guard for the account's rate
}

func (a *accountLoads) of(account string) *accountLoad {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m == nil {
		a.m = map[string]*accountLoad{}
	}
	l, ok := a.m[account]
	if !ok {
		l = &accountLoad{}
		a.m[account] = l
	}
	return l
}

// rateWaitAfter is how long a call must wait in its guard to count as
// held back by the account's rate: a permit that is free at once takes
// microseconds.
const rateWaitAfter = 5 * time.Millisecond

// watchLoads makes this replica a source of the account metrics until it
// stops. Called from Start, after the owners group is joined.
func (s *Service) watchLoads() {
	remove := s.o.Metrics.WatchAccounts(s.accountMetrics)
	removeTargets := s.o.Metrics.WatchTargets(s.targetMetrics)
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		<-s.runCtx.Done()
		remove()
		removeTargets()
	}()
}

// targetMetrics is what the metrics export for the targets with a
// provider-wide concurrency that this replica has called: their records
// as it last read them, without a read of its own.
func (s *Service) targetMetrics() []metrics.TargetLoad {
	if s.quotas == nil {
		return nil
	}
	var out []metrics.TargetLoad
	for name, t := range s.conf().Targets {
		if t.Concurrency == 0 {
			continue
		}
		if u, ok := s.quotas.Usage(quota.TargetKey(name)); ok {
			out = append(out, metrics.TargetLoad{Target: name, Concurrency: u.Concurrency, InFlight: u.InFlight})
		}
	}
	return out
}

// accountMetrics is what the metrics export for the accounts this
// replica owns.
func (s *Service) accountMetrics() []metrics.AccountLoad {
	self := s.owners.Self()
	held := s.owners.Held()
	out := make([]metrics.AccountLoad, 0, len(held))
	for _, account := range held {
		acct := s.conf().Account(account)
		l := s.loads.of(account)
		out = append(out, metrics.AccountLoad{
			Account: account, Instance: self, Concurrency: s.concurrencyNow(account, acct), Rate: acct.Rate.PerSecond,
			InFlight: int(l.inFlight.Load()),
			Throttled: map[string]uint64{
				metrics.ThrottleConcurrency: l.slotWaits.Load(),
				metrics.ThrottleRate:        l.rateWaits.Load(),
			},
		})
	}
	return out
}

// readerConcurrency is an account's concurrency as its reader applies it.
func readerConcurrency(configured int) int {
	if configured <= 0 {
		return 8
	}
	return configured
}

// noteSlotWait counts a message of l that must wait for a free slot: all
// of the account's slots are taken as it asks for one.
func (s *Service) noteSlotWait(l *reader) {
	if len(l.sem) == cap(l.sem) {
		s.loads.of(l.account).slotWaits.Add(1)
	}
}

// metered wraps the target call of one delivery of account: it counts the
// call in flight while it is made, and as held back by the account's rate
// if its guard kept it waiting. Wrap right before handing the call to the
// guard.
func (s *Service) metered(account string, call func(context.Context) (target.Response, error)) func(context.Context) (target.Response, error) {
	l := s.loads.of(account)
	rated := s.conf().Account(account).Rate.PerSecond > 0
	enter := time.Now()
	return func(ctx context.Context) (target.Response, error) {
		if rated && time.Since(enter) >= rateWaitAfter {
			l.rateWaits.Add(1)
		}
		l.inFlight.Add(1)
		defer l.inFlight.Add(-1)
		return call(ctx)
	}
}
