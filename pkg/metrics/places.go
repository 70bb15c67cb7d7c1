package metrics

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenaz/tenaz/pkg/names"
)

// Defaults and bounds of AccountOptions.
const (
	// DefaultTopAccounts is how many accounts get a place by default.
	DefaultTopAccounts = 100
	// MaxTopAccounts bounds AccountOptions.Top.
	MaxTopAccounts = 10000
	// DefaultKeep is how long an account that lost its place keeps its
	// series by default.
	DefaultKeep = 10 * time.Minute
	// RankEvery is how often the accounts are ranked by their traffic.
	RankEvery = time.Minute
	// RankWindow is the time constant of the traffic an account is ranked
	// by: an exponentially decaying count of its recordings, in which a
	// recording weighs 1/e after RankWindow.
	RankWindow = 10 * time.Minute
	// TakeOverFactor is how much busier than the least busy holder of a
	// place an account must be to take that place.
	TakeOverFactor = 2.0
	// maxTracked bounds the accounts whose traffic is tracked; beyond it a
	// new account is counted as other until the quiet ones are forgotten.
	maxTracked = 100_000
	// forgetBelow is the traffic under which an account without a place is
	// forgotten (one recording, half an hour later).
	forgetBelow = 0.05
)

// AccountOptions bound the account label. An account has its own series
// when it is allowed or holds one of Top places; every other account is
// counted as account="other". See docs/metrics.md#the-account-label for
// the rule a place is won and lost by.
type AccountOptions struct {
	// Top is how many accounts besides Allow may hold a place, on this
	// Set (each replica ranks its own traffic). 0: only Allow. New uses
	// DefaultTopAccounts.
	Top int
	// Allow lists accounts that always have their own series, on every
	// replica, outside the Top places.
	Allow []string
	// Keep is how long the series of an account that lost its place stay,
	// unchanged, before they are removed; its new recordings count as
	// other meanwhile. It must outlast a few scrape intervals, so that
	// every count is scraped. 0: DefaultKeep.
	Keep time.Duration
}

// slot is where an account's recordings go.
type slot uint8

const (
	slotNone   slot = iota // counted as other
	slotPlaced             // its own series
	slotKept               // lost its place: its series stay unchanged until until; counted as other
)

// tracked is one account the places know.
type tracked struct {
	n       atomic.Uint64 // recordings since the last ranking
	score   float64       // decayed recordings as of the last ranking
	slot    slot
	allowed bool
	until   time.Time // slotKept: when its series are removed
}

// places decides, per account, whether a recording carries the account's
// name or Other. The recording path takes a read lock and an atomic add;
// ranking takes the write lock once per RankEvery.
type places struct {
	top  int
	keep time.Duration
	now  func() time.Time
	drop func(account string) // removes every series of account

	next atomic.Int64 // UnixNano of the next ranking

	mu     sync.RWMutex
	accts  map[string]*tracked
	placed int // accounts with slotPlaced, not allowed
	kept   int // accounts with slotKept
	ranked time.Time
}

func newPlaces(o AccountOptions, now func() time.Time, drop func(string)) *places {
	p := &places{top: o.Top, keep: o.Keep, now: now, drop: drop, accts: map[string]*tracked{}}
	if p.keep <= 0 {
		p.keep = DefaultKeep
	}
	for _, a := range o.Allow {
		if names.ValidateAccount(a) == nil {
			p.accts[a] = &tracked{slot: slotPlaced, allowed: true}
		}
	}
	return p
}

// record returns the label of a recording of account (a counter
// increment, a histogram observation) and counts it as traffic.
func (p *places) record(account string) string { return p.label(account, true) }

// gauge returns the label of account for a gauge's value: the same as a
// recording's, without counting traffic.
func (p *places) gauge(account string) string { return p.label(account, false) }

func (p *places) label(account string, traffic bool) string {
	if names.ValidateAccount(account) != nil {
		return Invalid
	}
	if traffic {
		p.maybeRank()
	}
	p.mu.RLock()
	t := p.accts[account]
	if t != nil {
		if traffic {
			t.n.Add(1)
		}
		s, free := t.slot, p.placed < p.top
		p.mu.RUnlock()
		if s == slotPlaced {
			return account
		}
		if !free {
			return Other
		}
		return p.admit(account, false)
	}
	p.mu.RUnlock()
	return p.admit(account, traffic)
}

// admit tracks account (counting a recording when count) and gives it a
// free place if there is one.
func (p *places) admit(account string, count bool) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.accts[account]
	if t == nil {
		if len(p.accts) >= maxTracked {
			return Other
		}
		t = &tracked{}
		p.accts[account] = t
	}
	if count {
		t.n.Add(1)
	}
	if t.slot != slotPlaced && p.placed < p.top {
		p.place(t)
	}
	if t.slot == slotPlaced {
		return account
	}
	return Other
}

// place gives t a place (a kept account gets its series back as they
// are). Under mu.
func (p *places) place(t *tracked) {
	if t.slot == slotKept {
		p.kept--
	}
	t.slot = slotPlaced
	p.placed++
}

// maybeRank ranks when RankEvery has passed since the last ranking. A
// recording that finds another goroutine ranking goes on without waiting.
func (p *places) maybeRank() {
	now := p.now()
	if now.UnixNano() < p.next.Load() || !p.mu.TryLock() {
		return
	}
	defer p.mu.Unlock()
	if now.UnixNano() < p.next.Load() {
		return
	}
	p.rank(now)
	p.next.Store(now.Add(RankEvery).UnixNano())
}

// rank updates every account's traffic, removes the series of kept
// accounts whose time is up, forgets quiet accounts, and hands places
// over: the busiest account without a place takes the place of the least
// busy holder when it is more than TakeOverFactor times as busy, then the
// next pair, and so on, while at most Top accounts are kept. Under mu.
func (p *places) rank(now time.Time) {
	decay := 1.0
	if !p.ranked.IsZero() {
		decay = math.Exp(-now.Sub(p.ranked).Seconds() / RankWindow.Seconds())
	}
	p.ranked = now
	var holders, seekers []*tracked
	for name, t := range p.accts {
		t.score = t.score*decay + float64(t.n.Swap(0))
		if t.allowed {
			continue
		}
		if t.slot == slotKept && !now.Before(t.until) {
			p.drop(name)
			t.slot = slotNone
			p.kept--
		}
		switch {
		case t.slot == slotPlaced:
			holders = append(holders, t)
		case t.slot == slotNone && t.score < forgetBelow:
			delete(p.accts, name)
		case t.score > 0:
			seekers = append(seekers, t)
		}
	}
	if len(seekers) == 0 || len(holders) == 0 {
		return
	}
	slices.SortFunc(holders, func(a, b *tracked) int { return cmpScore(a, b) })
	slices.SortFunc(seekers, func(a, b *tracked) int { return cmpScore(b, a) })
	for i := 0; i < len(seekers) && i < len(holders); i++ {
		s, h := seekers[i], holders[i]
		if s.score <= TakeOverFactor*h.score {
			break
		}
		if s.slot != slotKept && p.kept >= p.top {
			break // as many series kept as there are places: wait for some to go
		}
		h.slot, h.until = slotKept, now.Add(p.keep)
		p.kept++
		p.placed--
		p.place(s)
	}
}

func cmpScore(a, b *tracked) int {
	switch {
	case a.score < b.score:
		return -1
	case a.score > b.score:
		return 1
	}
	return 0
}
