package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/failsafe-go/failsafe-go/ratelimiter"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/quota"
	"github.com/tenaz/tenaz/pkg/target"
)

// guard is the in-process protection around every call of one account to
// one target (or handler): the account's rate (pace), then, innermost and
// right before the call, the target's provider-wide limit, shared with
// every other account and replica (see limit), with the account's rate
// checked again once the target has room (see run). Retrying is not one
// of them: that is JetStream's job.
type guard struct {
	pace  *pacer       // the account's, shared by its targets
	limit *targetLimit // nil: the target has no provider-wide limit
	// calls is the Service's: done once a stop leaves no time for a
	// call to end. A call waiting for its account's pace is not made
	// after that (errNotCalled), as one waiting for its target's slot.
	calls context.Context
	// replaced is closed when a reload changes the target (configChanged):
	// a call still waiting here for its account's pace goes on through
	// current(), the guard of the config in force. Through this one it
	// would go by the old limit (none, or the old one put back in force on
	// the target's line for every caller).
	replaced chan struct{}
	current  func() *guard
}

// isReplaced reports whether a reload replaced g.
func (g *guard) isReplaced() bool {
	select {
	case <-g.replaced:
		return true
	default:
		return false
	}
}

// pacer spaces an account's calls at its rate, shared by the account's
// targets. failsafe-go's smooth rate limiter hands out one permit every
// interval. Two rules hold the rate at the provider when the process
// stalls (a starved CPU, a long pause), where calls whose permits passed
// meanwhile would otherwise go out together:
//   - a call that wakes late for its permit takes another, at most
//     repace more, so a process that is always late still calls;
//   - whatever the permits said, two calls never go less than an
//     interval apart: a call that would waits for the gap. So any
//     second holds at most rate + 1 calls' starts (one at each end), and
//     a call that went late, after all its permits, cannot pair up with
//     the next one on time.
//
// A change of rate (setRate) holds for the calls already waiting too:
// they wait again at the new rate, and the gap to the last call is the
// new interval. Waiters left on the old limiter went out beside the new
// one's calls, past either rate, for as long as the old permits lasted.
type pacer struct {
	// until sleeps until t, or until ctx ends or changed closes (with
	// errRateChanged); tests stall it.
	until  func(ctx context.Context, t time.Time, changed <-chan struct{}) error
	repace int // the permits a late call takes again, at most

	mu        sync.Mutex
	perSecond float64                                  // 0: unlimited
	rl        ratelimiter.RateLimiter[target.Response] // nil: unlimited
	interval  time.Duration
	changed   chan struct{} // closed and replaced by setRate
	went      time.Time     // the last call's go, or the booked one's
	booked    *booking      // the call booked to go next, waiting for its target's slot; nil: none
}

// booking is the account's next go, held by a call that got its target's
// slot less than an interval after the account's last call: it gives the
// slot back, waits for its time without it, and goes as soon as it has a
// slot again (see guard.run). Until then, for an interval at most, the
// account's other calls wait for it, so it is not outpaced, and no slot
// of the target is held for the gap. A booking that got no slot by then
// lapses: the account's other targets are not held up for as long as
// this one is busy, and the call claims again once it has a slot.
type booking struct {
	at    time.Time     // when it may go
	until time.Time     // when it lapses: at + an interval
	prev  time.Time     // went before it was booked, for unbook
	done  chan struct{} // closed once it went, was given up or replaced, or the rate changed
}

// errRateChanged ends a wait whose account's rate changed meanwhile: the
// call waits again at the new rate.
var errRateChanged = errors.New("the account's rate changed")

// newPacer paces at perSecond; 0 lets every call go at once.
func newPacer(perSecond float64) *pacer {
	p := &pacer{until: sleepUntil, repace: 3}
	p.setRate(perSecond)
	return p
}

// setRate puts perSecond in force for the calls to come and those
// waiting. The same rate again changes nothing: a limiter made afresh
// has no memory of the calls just made.
func (p *pacer) setRate(perSecond float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.changed != nil && perSecond == p.perSecond {
		return
	}
	p.perSecond, p.rl, p.interval = perSecond, nil, 0
	if perSecond > 0 {
		// Config refuses rates outside these bounds; held here too, since
		// past them the interval overflows or rounds to zero and the
		// limiter panics.
		perSecond = min(max(perSecond, config.MinRate), config.MaxRate)
		p.interval = time.Duration(float64(time.Second) / perSecond)
		// Smooth: one call every 1/rate, waiting (within the account's own
		// concurrency slots, so no other account waits) rather than failing.
		p.rl = ratelimiter.NewSmoothBuilderWithMaxRate[target.Response](p.interval).WithMaxWaitTime(24 * time.Hour).Build()
	}
	if p.changed != nil {
		close(p.changed)
	}
	p.changed = make(chan struct{})
	p.endBookingLocked() // booked at the old rate: its call claims again
}

// lateAfter is how late a call may wake for its permit and still go: a
// quarter of interval, and never under the few milliseconds timers are
// late by on a busy machine (at a high rate, a call taking its permit
// again for that would cut the rate, not hold it).
func lateAfter(interval time.Duration) time.Duration { return max(interval/4, 10*time.Millisecond) }

// wait returns when the call may go, counted as gone, or with ctx's
// error.
func (p *pacer) wait(ctx context.Context) error { return p.await(ctx, true) }

// ready returns when a call could go, or with ctx's error, without
// counting it: a call that waits for something else next (its target's
// slot) counts itself once that is done, with claim.
func (p *pacer) ready(ctx context.Context) error { return p.await(ctx, false) }

// await is wait (count) or ready.
func (p *pacer) await(ctx context.Context, count bool) error {
	for {
		if err := p.waitOnce(ctx, count); !errors.Is(err, errRateChanged) {
			return err
		}
	}
}

// waitOnce is await at the rate in force when it starts, ended by
// errRateChanged when the rate changes before the call may go.
func (p *pacer) waitOnce(ctx context.Context, count bool) error {
	p.mu.Lock()
	rl, interval, changed := p.rl, p.interval, p.changed
	p.mu.Unlock()
	if rl == nil {
		return nil
	}
	for i := 0; ; i++ {
		due := time.Now().Add(rl.ReservePermit())
		if err := p.until(ctx, due, changed); err != nil {
			return err
		}
		if i == p.repace || time.Since(due) <= lateAfter(interval) {
			break
		}
	}
	for {
		free, booked, err := p.take(time.Now(), changed, count)
		if err != nil {
			return err
		}
		if booked != nil { // another call goes first, or its booking lapses at free
			if err := waitBooked(ctx, free, booked, changed); err != nil {
				return err
			}
			continue
		}
		if free.IsZero() {
			return nil
		}
		if err := p.until(ctx, free, changed); err != nil {
			return err
		}
	}
}

// slotHoldMax is the longest gap a call waits out holding its target's
// slot (claim): giving the slot back and taking it again costs two
// compare-and-sets, about as long.
const slotHoldMax = 10 * time.Millisecond

// claim books the account's next call for a call that holds its
// target's slot, at the rate in force: at now if the account's last call
// went an interval ago or more, else an interval after it; the account's
// other calls then go after it. It returns when the call may go, and, for
// a go more than slotHoldMax away, its booking: the caller gives its slot
// back meanwhile, and ends the booking with gone or unbook. ok is false
// when another call is booked already.
func (p *pacer) claim(now time.Time) (at time.Time, b *booking, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bookedLocked(now) != nil || p.went.After(now) {
		return time.Time{}, nil, false
	}
	p.endBookingLocked() // lapsed
	at = laterOf(now, p.went.Add(p.interval))
	if at.Sub(now) > slotHoldMax {
		b = &booking{at: at, until: at.Add(p.interval), prev: p.went, done: make(chan struct{})}
		p.booked = b
	}
	p.went = at
	return at, b, true
}

// bookedLocked is the booking in force at now: nil when none is, or it
// lapsed. Callers hold p.mu.
func (p *pacer) bookedLocked(now time.Time) *booking {
	if b := p.booked; b != nil && now.Before(b.until) {
		return b
	}
	return nil
}

// endBookingLocked ends the booking, if any, its call not made: the
// account's next call is paced by the one before it again. Callers hold
// p.mu.
func (p *pacer) endBookingLocked() {
	if b := p.booked; b != nil {
		if p.went.Equal(b.at) {
			p.went = b.prev
		}
		p.booked = nil
		close(b.done)
	}
}

// gone reports whether booking b's call may go at now, and counts it
// gone if so: b is still the account's booking, or lapsed with no call
// gone since it was due. Otherwise it claims again.
func (p *pacer) gone(b *booking, now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.booked != b {
		return false // replaced, given up, or the rate changed
	}
	p.booked = nil
	close(b.done)
	if p.went.After(b.at) && now.Before(p.went.Add(p.interval)) {
		return false // lapsed, and another call went since
	}
	p.went = laterOf(p.went, now)
	return true
}

// unbook gives booking b up, its call not made. Once b went, lapsed and
// was replaced, or ended with a change of rate, it does nothing.
func (p *pacer) unbook(b *booking) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.booked == b {
		p.endBookingLocked()
	}
}

// limited reports whether the pacer holds calls to a rate.
func (p *pacer) limited() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rl != nil
}

// takenOver books the account's last call at since, unless one is booked
// later: a replica taking the account's lease over does not know when
// the previous owner's last call went, only that none went after since
// (a graceful handover gives the lease back as soon as its calls are
// done), so its first call waits an interval after since, as if that
// call had gone then.
func (p *pacer) takenOver(since time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.went = laterOf(p.went, since)
}

// take returns the zero time, having counted a call going at now if
// count; or, when the last call went (or is booked) less than an
// interval before now, the time it may; or, while a call is booked to go
// next (claim), a channel closed once it went, and when its booking
// lapses. It returns errRateChanged if the rate is no longer the one of
// changed.
func (p *pacer) take(now time.Time, changed chan struct{}, count bool) (time.Time, <-chan struct{}, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if changed != p.changed {
		return time.Time{}, nil, errRateChanged
	}
	if b := p.bookedLocked(now); b != nil {
		return b.until, b.done, nil
	}
	if free := p.went.Add(p.interval); now.Before(free) {
		return free, nil, nil
	}
	if count {
		p.went = now
	}
	return time.Time{}, nil, nil
}

// waitBooked waits until another call's booking ends (booked closes) or
// lapses (at t), or until ctx ends (its error) or changed closes
// (errRateChanged).
func waitBooked(ctx context.Context, t time.Time, booked, changed <-chan struct{}) error {
	tm := time.NewTimer(time.Until(t))
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-booked:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-changed:
		return errRateChanged
	}
}

// sleepUntil sleeps until t, or until ctx ends (with its error) or
// changed closes (errRateChanged).
func sleepUntil(ctx context.Context, t time.Time, changed <-chan struct{}) error {
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
	case <-changed:
		return errRateChanged
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
	s       *Service
	account string // whose calls: the target's line serves its accounts in rounds
	name    string
	key     string // its record: the target's, or an account's own (config.OwnTarget)
	lim     quota.Limit
	local   *autoLimit // under "auto": this replica's latency-learned share; nil otherwise
	// replaced is its guard's (guard.replaced): a call that waited for
	// its local share through a reload goes on through the new guard.
	replaced <-chan struct{}
}

// errNotCalled is the outcome of a call that was not made: it waited for
// its target's limit or its account's pace until the stop left no time to
// make it (see Stop),
// or its account may have gone to another replica meanwhile
// (errNotOwner). Its message comes back, and its claim is given back
// (giveAttemptBack).
var errNotCalled = errors.New("the call was not made")

// errNotOwner is errNotCalled for a call whose replica lapsed (stalled,
// or its heartbeats failed) since it took the message, or lost the
// account's lease: see cleared.
var errNotOwner = fmt.Errorf("%w: the account may be another replica's", errNotCalled)

// errPaused is errNotCalled for a call whose account an operator paused
// while it waited: see cleared.
var errPaused = fmt.Errorf("%w: the account was paused", errNotCalled)

// cleared makes r's call only if it may still go out, the last step
// before it: a claimed run waits for its account's slot, its rate and its
// target's limit, and meanwhile
//   - this replica may have lost the account: it makes the call only if
//     it holds the lease and has been current, with no lapse, since it
//     took r's message (owner.Group.CurrentSince). A replica stopped
//     (SIGSTOP, a long pause) longer than the owners' expiry may wake
//     after another one took the account over, and its call would go out
//     beside the new owner's, past the account's limits, for an event the
//     new owner may have finished;
//   - an operator may have paused the account: the pause stops the
//     account's reads, and this stops what they had handed out, so only
//     the calls already made when it is known finish.
func (s *Service) cleared(r *run, call func(context.Context) (target.Response, error)) func(context.Context) (target.Response, error) {
	return func(ctx context.Context) (target.Response, error) {
		if !s.owners.CurrentSince(r.lapses) || !s.owners.Holds(r.env.Account) {
			return target.Response{}, errNotOwner
		}
		if !s.pausedUntil(r.env.Account).IsZero() {
			return target.Response{}, errPaused
		}
		return call(ctx)
	}
}

// pacerLocked returns the account's pacer, shared by its targets.
// Callers hold s.mu.
func (s *Service) pacerLocked(account string) *pacer {
	p, ok := s.pacers[account]
	if !ok {
		p = newPacer(s.conf().Account(account).Rate.PerSecond)
		s.pacers[account] = p
	}
	return p
}

// guardFor returns the guard of account + target name.
func (s *Service) guardFor(account, name string) *guard {
	key := account + "\x00" + name
	s.mu.Lock()
	defer s.mu.Unlock()
	if g, ok := s.guards[key]; ok {
		return g
	}
	g := &guard{calls: s.calls, replaced: make(chan struct{}), current: func() *guard { return s.guardFor(account, name) }}
	g.pace = s.pacerLocked(account)
	if t, ok := s.conf().Targets[name]; ok && t.Limited() && s.quotas != nil {
		key := quota.KeyOf(s.conf(), account, name)
		g.limit = &targetLimit{s: s, account: account, name: name, key: key, lim: quota.OfTarget(t), replaced: g.replaced}
		if l := g.limit.lim.Learn; l != nil {
			g.limit.local = s.targetAutoLocked(key, l)
		}
	}
	s.guards[key] = g
	return g
}

// run calls fn at the account's pace, the target's limit innermost.
//
// A call that waits for its target's slot goes at the account's pace
// when it has one, not when its permit passed: permits that pass while
// the target is busy would otherwise let the account's calls out together
// once it has room, past the account's rate at the provider. So it books
// its go only with the slot in hand (claim). If another of the account's
// calls went less than an interval before, it gives the slot back, keeping
// its booking, waits out the gap without it, and goes once it has a slot
// again (goBooked): the account's other calls wait for it meanwhile, so
// it is not outpaced. Held through the gap (up to 30 s at 2/m), a slot of
// a target that every account shares stood idle while other accounts
// waited for it. If another call is booked already, it gives the slot
// back, not having called, and waits for its pace again (errOutpaced).
//
// A call whose guard a reload replaced while it waited for its pace goes
// on through the new guard, under the limit in force.
func (g *guard) run(ctx context.Context, fn func(context.Context) (target.Response, error)) (target.Response, error) {
	for {
		if g.isReplaced() {
			g = g.current()
		}
		if g.limit == nil {
			if err := g.paced(ctx, g.pace.wait); err != nil {
				return target.Response{}, err
			}
			if g.isReplaced() && g.current().limit != nil {
				continue // the target has a limit now (the pace was counted: one interval more)
			}
			return fn(ctx)
		}
		if err := g.paced(ctx, g.pace.ready); err != nil {
			return target.Response{}, err
		}
		if g.isReplaced() {
			continue
		}
		var b *booking
		resp, err := g.limit.around(ctx, g.inPace(fn, &b))
		if errors.Is(err, errBooked) {
			resp, err = g.goBooked(ctx, b, fn)
		}
		if !errors.Is(err, errOutpaced) {
			return resp, err
		}
	}
}

// goBooked makes the call of booking b: once its time came, it takes its
// target's slot again and goes at once, or claims again (errOutpaced)
// when its booking ended meanwhile (a change of rate), or lapsed and
// another call went.
func (g *guard) goBooked(ctx context.Context, b *booking, fn func(context.Context) (target.Response, error)) (target.Response, error) {
	defer g.pace.unbook(b) // nothing once it went
	if err := g.paced(ctx, func(ctx context.Context) error { return g.pace.until(ctx, b.at, b.done) }); err != nil {
		select {
		case <-b.done:
			return target.Response{}, errOutpaced
		default:
			return target.Response{}, err
		}
	}
	if g.isReplaced() {
		return target.Response{}, errOutpaced // claims again, through the new guard (run)
	}
	return g.limit.around(ctx, func(ctx context.Context) (target.Response, error) {
		if !g.pace.gone(b, time.Now()) {
			return target.Response{}, errOutpaced
		}
		return fn(ctx)
	})
}

// paced runs wait, a wait for the account's pace, until ctx ends (its
// error) or the calls end (errNotCalled): at a slow rate the wait may be
// longer than the stop's time left.
func (g *guard) paced(ctx context.Context, wait func(context.Context) error) error {
	if !g.pace.limited() {
		return wait(ctx) // at once
	}
	wctx, cancel := untilCallsEnd(ctx, g.calls)
	defer cancel()
	if err := wait(wctx); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return errNotCalled
	}
	return nil
}

// untilCallsEnd is ctx, also cancelled once calls is done.
func untilCallsEnd(ctx, calls context.Context) (context.Context, context.CancelFunc) {
	wctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(calls, cancel)
	return wctx, func() { stop(); cancel() }
}

// errOutpaced is errNotCalled for a call that got its target's slot
// while another call of its account was booked to go: it waits for a
// permit again (see run).
var errOutpaced = fmt.Errorf("%w: another call of the account is booked to go first", errNotCalled)

// errBooked is errNotCalled for a call that got its target's slot more
// than slotHoldMax before its account's pace lets it go: it gives the slot
// back and goes at its booking (see run).
var errBooked = fmt.Errorf("%w: booked to go later, without holding the target's slot", errNotCalled)

// inPace makes fn's call once the account's pace lets it go (claim), or
// returns errOutpaced, or errBooked with the booking in *b.
func (g *guard) inPace(fn func(context.Context) (target.Response, error), b **booking) func(context.Context) (target.Response, error) {
	return func(ctx context.Context) (target.Response, error) {
		at, booked, ok := g.pace.claim(time.Now())
		if !ok {
			return target.Response{}, errOutpaced
		}
		if booked != nil {
			*b = booked
			return target.Response{}, errBooked
		}
		if err := g.paced(ctx, func(ctx context.Context) error { return g.pace.until(ctx, at, nil) }); err != nil {
			return target.Response{}, err
		}
		return fn(ctx)
	}
}

// around makes fn's call once the target has a token and a free slot for
// it. While it has none the call waits, in its account's concurrency slot
// (so no other account waits with it, and other targets' calls go on),
// without failing: a throttled call is counted, never an error. The
// account's own policies let the call go first, so the target's token
// and slot are taken right before the call, and the slot is given back
// as soon as it returns.
func (tl *targetLimit) around(ctx context.Context, fn func(context.Context) (target.Response, error)) (target.Response, error) {
	wctx, cancel := untilCallsEnd(ctx, tl.s.calls)
	defer cancel()
	var local *autoPermit
	if tl.local != nil {
		p, waited, err := tl.local.acquire(wctx, tl.s.calls.Done(), tl.account)
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
		select {
		case <-tl.replaced:
			// A reload changed the target while the call waited: through
			// this guard it would put the old limit back in force on the
			// target's line, for every caller (AcquireFor).
			local.drop()
			return target.Response{}, errOutpaced
		default:
		}
	}
	release, waited, err := tl.s.quotas.AcquireFor(wctx, tl.key, tl.account, tl.lim)
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
	case <-tl.s.calls.Done():
		release(quota.Answer{NotMade: true})
		local.drop()
		return target.Response{}, errNotCalled
	default:
	}
	resp, err := local.timed(fn)(ctx)
	made := ctx.Err() == nil && !notMade(err)
	local.done(err, made)
	release(answerOf(err, made))
	return resp, err
}

// notMade reports a call that did not reach its target: not made
// (errNotCalled: outpaced, booked for later, its account lost or paused;
// errBreakerOpened), or its request could not be made (target.ErrNotSent).
func notMade(err error) bool {
	return errors.Is(err, errNotCalled) || errors.Is(err, errBreakerOpened) || errors.Is(err, target.ErrNotSent)
}

// answerOf is what a call's outcome says of its target's capacity. A
// call that did not reach its target gives its token back; one a hard
// stop cut went out, and its token stays spent.
func answerOf(err error, made bool) quota.Answer {
	if !made {
		return quota.Answer{NotMade: notMade(err)}
	}
	return quota.AnswerOf(err)
}

// targetAutoLocked is this replica's latency-learned share of the "auto"
// concurrency of a target's record key: the target's, shared by every
// account, or an account's own. Callers hold s.mu.
func (s *Service) targetAutoLocked(key string, l *quota.Learn) *autoLimit {
	if a, ok := s.targetAuto[key]; ok {
		return a
	}
	a := newAutoLimit(1, l.Max, l.Start, false, nil)
	s.targetAuto[key] = a
	return a
}
