package dispatcher

import (
	"context"
	"errors"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/failsafe-go/failsafe-go/adaptivelimiter"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/outcome"
	"github.com/tenaz/tenaz/pkg/target"
)

// "concurrency: auto": the account's limit is learned from its targets'
// answers, between concurrency_min and concurrency_max. It is the lower
// of two limits:
//
//   - failsafe-go's adaptive limiter, which learns from latency: it grows
//     while the calls' latency holds and backs off when it rises over its
//     recent baseline (the provider queueing them).
//   - an overload ceiling, which a refusal (429 or 503, any answer with a
//     Retry-After, or a timeout) cuts at once to 90% of the calls in
//     flight when the refused call was made (or answered, if more), and
//     which grows back by one a second (doubling while under half the
//     level that was refused) once the Retry-After has passed, without
//     further refusals.
//
// The adaptive limiter takes no failures (a refusal recorded as a sample
// is a fast answer, read as a provider getting faster), hence the
// ceiling. One of its permits is always left free: its throughput
// correlation rules, which apply only while it is full, were made for a
// server's own CPU; against a provider whose latency follows its load
// (the bench's, simulated) they walked the limit from 39 down to 8 of a
// capacity of 40. Its latency gradient applies either way.
//
// One replica owns an account at a time (see owners.go), so the learned
// limit is the account's over the cluster. The owner stores it in
// tenaz_owners (l.<account>) at once when it is cut, its growth at most
// every autoSaveEvery, and when it hands the account over; the next
// owner starts from it. A cut not stored before a kill would have the
// next owner start from the limit the provider refused.

const (
	autoCut       = 0.9         // the ceiling after a refusal, of the calls in flight then
	autoGrowEvery = time.Second // the ceiling's growth step
	autoHold      = time.Second // no growth for this long after a refusal, or its Retry-After
	// autoHoldMax bounds the hold of one Retry-After: one answer to one
	// account's call must not keep a target's limit down for every
	// account this replica calls it for (quota's learnHoldMax, locally).
	autoHoldMax      = 10 * time.Minute
	autoSaveEvery    = 5 * time.Second // how often the learned limit's growth is stored, at most
	autoSampleWindow = 500 * time.Millisecond
	autoSamples      = 50
	learnedPrefix    = "l."
	autoStart        = 8 // where a learned limit starts with none stored: the default concurrency
)

// autoLimit is one account's learned concurrency, for its reader.
type autoLimit struct {
	min, max int
	al       adaptivelimiter.AdaptiveLimiter[target.Response]
	save     func(limit int) // stores the learned limit; nil: not stored
	saveMu   sync.Mutex      // one save at a time, the latest last

	mu sync.Mutex
	// waiting are the callers waiting for a slot, by account, each in
	// arrival order, and turns the accounts with callers waiting, in the
	// order they are served: one caller of each in turn (serveLocked).
	// A target's learned share serves every account's calls on this
	// replica; served to whoever woke first, an account with a backlog
	// took nearly every slot freed, and another's one call waited behind
	// all of it.
	waiting  map[string][]chan *autoPermit
	turns    []string
	inFlight int
	peak     int // the most in flight since the ceiling last grew
	ceiling  float64
	refused  int       // in flight when the last refused call was made; 0: none yet
	holdTill time.Time // the ceiling does not grow before
	grownAt  time.Time
	saved    int
	savedAt  time.Time
	saving   bool
}

// newAutoLimit starts at start (clamped to the bounds). learned says
// start is the limit the account's last owner learned: the ceiling then
// starts there too, and grows from it one step at a time.
func newAutoLimit(minimum, maximum, start int, learned bool, save func(int)) *autoLimit {
	minimum = max(minimum, 1)
	maximum = max(maximum, minimum)
	start = min(max(start, minimum), maximum)
	a := &autoLimit{min: minimum, max: maximum, save: save, waiting: map[string][]chan *autoPermit{},
		ceiling: float64(maximum), saved: start, savedAt: time.Now(), grownAt: time.Now()}
	if learned {
		a.ceiling, a.refused = float64(start), start+1
	}
	// Its bounds are one higher than the account's: one permit stays free.
	a.al = adaptivelimiter.NewBuilder[target.Response]().
		WithLimits(uint(minimum+1), uint(maximum+1), uint(start+1)).
		WithMaxLimitFactor(2).
		WithRecentWindow(autoSampleWindow, 30*time.Second, autoSamples).
		OnLimitChanged(func(adaptivelimiter.LimitChangedEvent) { a.wake() }).
		Build()
	return a
}

// Limit is the calls allowed in flight now.
func (a *autoLimit) Limit() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.limitLocked()
}

func (a *autoLimit) limitLocked() int {
	return max(a.min, min(int(a.ceiling), a.al.Limit()-1))
}

// learnedLocked is the limit to store for the next owner: the limit now,
// but never more than the last level refused, which a probe above it may
// have reached (the next owner probes again from there).
func (a *autoLimit) learnedLocked() int {
	l := a.limitLocked()
	if a.refused > 0 {
		l = max(a.min, min(l, a.refused-1))
	}
	return l
}

// wake serves the callers waiting once the limit moved.
func (a *autoLimit) wake() {
	a.mu.Lock()
	a.serveLocked()
	a.mu.Unlock()
}

// serveLocked hands the slots free to the callers waiting, one account's
// at a time in turn. Callers hold a.mu.
func (a *autoLimit) serveLocked() {
	for len(a.turns) > 0 && a.inFlight < a.limitLocked() {
		account := a.turns[0]
		a.turns = a.turns[1:]
		q := a.waiting[account]
		ch := q[0]
		if q = q[1:]; len(q) > 0 {
			a.waiting[account] = q
			a.turns = append(a.turns, account) // its next caller waits for the others' turns
		} else {
			delete(a.waiting, account)
		}
		ch <- a.grantLocked()
	}
}

// grantLocked takes a slot. Callers hold a.mu.
func (a *autoLimit) grantLocked() *autoPermit {
	a.inFlight++
	a.peak = max(a.peak, a.inFlight)
	return &autoPermit{a: a, n: a.inFlight}
}

// errNoSlot is acquire's answer when the dispatcher stops before a slot
// came free: the call is not made.
var errNoSlot = errors.New("stopping: no slot of the learned limit came free")

// acquire waits for a slot under the limit for a call of account, its
// turn among the accounts waiting (serveLocked), until ctx ends or stop
// is closed; waited says whether it had to.
func (a *autoLimit) acquire(ctx context.Context, stop <-chan struct{}, account string) (p *autoPermit, waited bool, err error) {
	a.mu.Lock()
	if len(a.turns) == 0 && a.inFlight < a.limitLocked() {
		p := a.grantLocked()
		a.mu.Unlock()
		return p, false, nil
	}
	ch := make(chan *autoPermit, 1)
	if len(a.waiting[account]) == 0 {
		a.turns = append(a.turns, account)
	}
	a.waiting[account] = append(a.waiting[account], ch)
	a.serveLocked()
	a.mu.Unlock()
	select {
	case p := <-ch:
		return p, true, nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-stop:
		err = errNoSlot
	}
	if !a.leave(account, ch) {
		(<-ch).drop() // served as it gave up
	}
	return nil, true, err
}

// leave takes ch out of account's callers waiting; false when it was
// served meanwhile.
func (a *autoLimit) leave(account string, ch chan *autoPermit) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	q := a.waiting[account]
	i := slices.Index(q, ch)
	if i < 0 {
		return false
	}
	if q = slices.Delete(q, i, i+1); len(q) > 0 {
		a.waiting[account] = q
		return true
	}
	delete(a.waiting, account)
	a.turns = slices.DeleteFunc(a.turns, func(t string) bool { return t == account })
	return true
}

// autoPermit is one call's slot. Its methods do nothing on nil (the
// account has a fixed concurrency).
type autoPermit struct {
	a *autoLimit
	n int // in flight when it was taken, itself included
	p adaptivelimiter.Permit
}

// timed wraps the call so that the adaptive limiter times the call itself,
// not the waits for the account's rate or the target's limit before it.
func (p *autoPermit) timed(call func(context.Context) (target.Response, error)) func(context.Context) (target.Response, error) {
	if p == nil {
		return call
	}
	return func(ctx context.Context) (target.Response, error) {
		if lp, ok := p.a.al.TryAcquirePermit(); ok {
			p.p = lp
		}
		return call(ctx)
	}
}

// drop gives the slot back for a call that was not made.
func (p *autoPermit) drop() { p.done(nil, false) }

// done gives the slot back after the call: err is its outcome. made is
// false when no call was made or the dispatcher stopped hard meanwhile.
func (p *autoPermit) done(err error, made bool) {
	if p == nil {
		return
	}
	a := p.a
	refused, retryAfter := outcome.Overloaded(err)
	if p.p != nil {
		if made && !refused && answered(err) {
			p.p.Record()
		} else {
			p.p.Drop()
		}
	}
	now := time.Now()
	a.mu.Lock()
	// A refusal is taken at the calls in flight when it was made or when
	// it was answered, if more: one made early in a burst is refused for
	// the calls that came after it.
	n := max(p.n, a.inFlight)
	a.inFlight--
	if made && refused {
		a.refused = n
		if c := math.Max(float64(a.min), math.Floor(autoCut*float64(n-1))); c < a.ceiling {
			a.ceiling = c
		}
		a.holdTill = laterOf(a.holdTill, now.Add(min(max(autoHold, retryAfter), autoHoldMax)))
		a.peak, a.grownAt = 0, now
	} else if made && err == nil && a.ceiling < float64(a.max) && now.After(a.holdTill) &&
		now.Sub(a.grownAt) >= autoGrowEvery && a.peak >= int(a.ceiling) {
		// Grows only while it is what holds the calls back.
		if a.ceiling < float64(a.refused)/2 {
			a.ceiling *= 2
		} else {
			a.ceiling++
		}
		a.ceiling = math.Min(a.ceiling, float64(a.max))
		a.peak, a.grownAt = 0, now
	}
	limit := a.learnedLocked()
	save := a.save != nil && !a.saving && limit != a.saved && (limit < a.saved || now.Sub(a.savedAt) >= autoSaveEvery)
	if save {
		a.saving, a.saved, a.savedAt = true, limit, now
	}
	a.serveLocked()
	a.mu.Unlock()
	if save {
		go a.store(limit)
	}
}

// store saves limit, then again each cut that came while it saved
// (done saves no cut while a save is under way).
func (a *autoLimit) store(limit int) {
	for {
		a.saveMu.Lock()
		a.mu.Lock()
		latest := a.saved == limit // a flush may have stored a later one
		a.mu.Unlock()
		if latest {
			a.save(limit)
		}
		a.saveMu.Unlock()
		a.mu.Lock()
		if l := a.learnedLocked(); l < a.saved {
			limit, a.saved, a.savedAt = l, l, time.Now()
			a.mu.Unlock()
			continue
		}
		a.saving = false
		a.mu.Unlock()
		return
	}
}

// flush stores the limit now if it moved since it was last stored.
func (a *autoLimit) flush() {
	a.saveMu.Lock()
	defer a.saveMu.Unlock()
	a.mu.Lock()
	limit := a.learnedLocked()
	save := a.save != nil && limit != a.saved
	a.saved, a.savedAt = limit, time.Now()
	a.mu.Unlock()
	if save {
		a.save(limit)
	}
}

// answered reports whether the target answered (a success or a status):
// its latency says something about the target, unlike a refused
// connection's.
func answered(err error) bool {
	return err == nil || outcome.StatusOf(err) != 0
}

func laterOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// newAutoLimitFor is the learned limit of account's reader, from the limit
// its last owner stored (or where a fixed account starts). The store
// costs one read here and a write at most every autoSaveEvery.
func (s *Service) newAutoLimitFor(ctx context.Context, account string, acct config.Account) *autoLimit {
	start := autoStart
	kv, err := s.js.KeyValue(ctx, s.subj.Bucket(names.BucketOwners))
	if err != nil {
		s.log.Warn().Err(err).Str("account", account).Msg("learned concurrency: the owners bucket is unavailable; starting afresh, not stored")
		return newAutoLimit(acct.ConcurrencyMin, acct.ConcurrencyMax, start, false, nil)
	}
	key := learnedPrefix + account
	learned := false
	if e, err := kv.Get(ctx, key); err == nil {
		if n, err := strconv.Atoi(string(e.Value())); err == nil && n > 0 {
			start, learned = n, true
		}
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		s.log.Debug().Err(err).Str("account", account).Msg("learned concurrency: reading the last one")
	}
	return newAutoLimit(acct.ConcurrencyMin, acct.ConcurrencyMax, start, learned, func(limit int) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if _, err := kv.Put(ctx, key, []byte(strconv.Itoa(limit))); err != nil {
			s.log.Debug().Err(err).Str("account", account).Msg("learned concurrency: storing it")
		}
	})
}

type autoLimitKey struct{}

// withAutoLimit carries a reader's learned limit to its deliveries.
func withAutoLimit(ctx context.Context, a *autoLimit) context.Context {
	if a == nil {
		return ctx
	}
	return context.WithValue(ctx, autoLimitKey{}, a)
}

// autoSlot waits, in the account's reader only, for a slot of the account's
// learned limit when its concurrency is "auto" (nil, true otherwise). ok
// is false when the dispatcher stops first: the call is not to be made.
func (s *Service) autoSlot(ctx context.Context, account string) (p *autoPermit, ok bool) {
	a, _ := ctx.Value(autoLimitKey{}).(*autoLimit)
	if a == nil {
		return nil, true
	}
	p, waited, err := a.acquire(ctx, s.calls.Done(), account)
	if waited {
		s.loads.of(account).slotWaits.Add(1)
	}
	return p, err == nil
}

// concurrencyNow is the account's concurrency as its reader applies it now:
// under "auto", the learned limit of the reader this replica runs.
func (s *Service) concurrencyNow(account string, acct config.Account) int {
	if acct.Concurrency.Auto() {
		s.mu.Lock()
		l := s.readers[account]
		s.mu.Unlock()
		if l != nil && l.auto != nil {
			return l.auto.Limit()
		}
	}
	return readerConcurrency(acct.MaxConcurrency())
}
