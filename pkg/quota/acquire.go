package quota

import (
	"cmp"
	"context"
	"errors"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// idle is how long a line's loop sleeps with nothing to do (a kick or a
// watched change wakes it sooner).
const idle = time.Hour

// Acquire waits until key has a token and a free slot of l, takes both,
// and returns the release of the slot, which the caller calls once its
// call returned, with what its answer says of the target (a learned
// limit learns from it; more calls do nothing). waited reports that the
// call was held back. It returns an error only when ctx ends (ctx.Err()) or
// after Close (ErrClosed); while the bucket cannot be reached it waits.
//
// The waiters of one key in this replica are served in order, by one
// loop that folds them into as few compare-and-sets as it can: one takes
// the tokens and slots of every waiter it can serve, and gives back the
// slots released since.
func (q *Quotas) Acquire(ctx context.Context, key string, l Limit) (release func(Answer), waited bool, err error) {
	return q.AcquireFor(ctx, key, "", l)
}

// AcquireFor is Acquire for caller (an account, of the many that share a
// target's key): the waiters are served in rounds, the first of every
// caller in their order of arrival, then the second of each, and so on,
// so that one caller's many calls waiting do not all go before another's
// one.
func (q *Quotas) AcquireFor(ctx context.Context, key, caller string, l Limit) (release func(Answer), waited bool, err error) {
	ln, err := q.line(key, l)
	if err != nil {
		return nil, false, err
	}
	w := &waiter{ready: make(chan struct{}), caller: caller}
	ln.mu.Lock()
	ln.waiting = append(ln.waiting, w)
	ln.mu.Unlock()
	ln.poke()
	select {
	case <-w.ready:
	case <-ctx.Done():
		ln.mu.Lock()
		select {
		case <-w.ready: // served meanwhile: the slot and token go back unused
			if w.err == nil {
				ln.freed++
				ln.unused++
			}
		default:
			w.gone = true
		}
		ln.mu.Unlock()
		ln.poke()
		return nil, true, ctx.Err()
	}
	if w.err != nil {
		return nil, w.waited, w.err
	}
	var once sync.Once
	return func(a Answer) {
		once.Do(func() {
			ln.mu.Lock()
			learns := ln.lim.Learn != nil
			ln.mu.Unlock()
			var counted []string
			if learns {
				counted = ln.q.counted()
			}
			ln.mu.Lock()
			ln.heard(a, w.inFlight, counted)
			ln.freed++
			if a.NotMade {
				ln.unused++
			}
			ln.mu.Unlock()
			ln.poke()
		})
	}, w.waited, nil
}

// heard keeps what a call's answer taught, for the next write. A refusal
// is taken at the calls in flight over every replica when it was served,
// or when it was answered if more: a call served early in a burst is
// refused for the calls that came after it.
func (ln *line) heard(a Answer, served int, counted []string) {
	if ln.lim.Learn == nil {
		return
	}
	inFlight := max(served, ln.rec.othersHeld(counted, ln.q.o.Instance)+ln.held-ln.freed)
	switch {
	case a.Refused:
		if ln.refusedAt == 0 || inFlight < ln.refusedAt {
			ln.refusedAt = inFlight
		}
		ln.holdTill = laterOf(ln.holdTill, time.Now().Add(min(max(learnHold, a.RetryAfter), learnHoldMax)))
	case a.OK:
		ln.answeredOK = true
	}
}

// learn applies to r what the answers since the last write taught; it
// reports whether the learned concurrency grew (the line is no longer
// pressed by it).
func (ln *line) learnInto(r *record, now time.Time) (grew bool) {
	lr := ln.lim.Learn
	if lr == nil {
		return false
	}
	// A hold stored before holds were bounded (a year's Retry-After) is
	// cut to learnHoldMax; the cut is stored with the record's next write.
	r.Hold = min(r.Hold, now.Add(learnHoldMax).UnixNano())
	cur := ln.lim.concurrency(*r)
	switch {
	case ln.refusedAt > 0:
		if c := max(lr.Min, int(math.Floor(learnCut*float64(ln.refusedAt-1)))); c < cur {
			r.Learned, r.Grown = c, now.UnixNano()
			r.Refused = ln.refusedAt
		} else {
			// Refused above the limit in force: a call let through before
			// it came down. It teaches nothing the limit does not know, and
			// must not raise the level regrowth doubles towards (from 10 to
			// 20 against a capacity of 10).
			r.Refused = min(ln.refusedAt, cur)
		}
		r.Hold = max(r.Hold, ln.holdTill.UnixNano())
	case ln.answeredOK && ln.pressed && cur < lr.Max && now.UnixNano() > r.Hold &&
		now.UnixNano()-r.Grown >= int64(learnGrowEvery):
		next := cur + 1
		if float64(cur) < float64(r.Refused)/2 {
			next = 2 * cur
		}
		r.Learned, r.Grown = min(next, lr.Max), now.UnixNano()
		return true
	}
	return false
}

func laterOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// waiter is one Acquire waiting in a line.
type waiter struct {
	caller string        // AcquireFor's
	ready  chan struct{} // closed when served (or failed: err)
	err    error
	waited bool // a step of the loop could not serve it at once
	gone   bool // its context ended before it was served
	// inFlight is the calls in flight over every replica, its own
	// included, when it was served.
	inFlight int
}

// line is one key as this replica uses it through Acquire: its waiters,
// its slots, and the record as last known.
type line struct {
	q    *Quotas
	key  string
	lim  Limit
	kick chan struct{}
	done chan struct{} // closed when the loop has exited

	mu      sync.Mutex
	rec     record
	rev     uint64
	fresh   bool      // rec is the stored record as far as this replica knows
	readAt  time.Time // when rec was last known to be the stored one
	held    int       // this replica's slots in the stored record
	freed   int       // slots released since, not yet written
	unused  int       // of them, tokens of calls not made: they go back with the write
	waiting []*waiter

	// What the answers since the last write taught a learned limit.
	refusedAt  int       // the fewest calls in flight when a refused call was served; 0: none
	holdTill   time.Time // no growth before (a refusal's Retry-After)
	answeredOK bool      // a call succeeded
	pressed    bool      // a waiter was held back by the concurrency
}

func (q *Quotas) line(key string, l Limit) (*line, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return nil, ErrClosed
	}
	if ln, ok := q.lines[key]; ok {
		ln.limit(l)
		return ln, nil
	}
	if (l.Concurrency > 0 || l.Learn != nil) && q.o.Instance == "" {
		return nil, errors.New("quota: Options.Instance is required for a concurrency limit")
	}
	ln := &line{q: q, key: key, lim: l, kick: make(chan struct{}, 1), done: make(chan struct{})}
	q.lines[key] = ln
	go ln.run(q.ctx)
	return ln, nil
}

// SetLimit puts l in force for the callers of key waiting in this
// replica, as the next Acquire with l would: a reload that changes a
// limit need not wait for a call to carry it.
func (q *Quotas) SetLimit(key string, l Limit) {
	q.mu.Lock()
	ln := q.lines[key]
	q.mu.Unlock()
	if ln != nil {
		ln.limit(l)
	}
}

// limit puts l in force on the line, for the callers waiting in it too:
// a reload that changes a target's rate or concurrency passes the new
// one with its next call, and the line, made with the first, kept that
// one until a restart.
func (ln *line) limit(l Limit) {
	ln.mu.Lock()
	same := ln.lim.equal(l)
	if !same {
		ln.lim = l
	}
	ln.mu.Unlock()
	if !same {
		ln.poke()
	}
}

func (ln *line) poke() {
	select {
	case ln.kick <- struct{}{}:
	default:
	}
}

// run serves the line until ctx ends, woken by a waiter, a release, a
// change of the record (its watch) or the time the next token is due.
func (ln *line) run(ctx context.Context) {
	defer close(ln.done)
	defer ln.fail(ErrClosed)
	var updates <-chan jetstream.KeyValueEntry
	if w, err := ln.q.kv.Watch(ctx, ln.key); err != nil {
		ln.q.log.Debug().Err(err).Str("key", ln.key).Msg("quota: watch (rechecking every second instead)")
	} else {
		defer func() { _ = w.Stop() }()
		updates = w.Updates()
	}
	t := time.NewTimer(0)
	defer t.Stop()
	backoff := 50 * time.Millisecond
	for {
		wait, err := ln.step(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			ln.q.log.Warn().Err(err).Str("key", ln.key).Msg("quota: the bucket did not answer; waiting")
			wait, backoff = backoff, min(2*backoff, recheck)
		} else {
			backoff = 50 * time.Millisecond
		}
		if wait <= 0 {
			continue
		}
		t.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-ln.kick:
		case <-t.C:
		case e, ok := <-updates:
			if !ok {
				updates = nil
			} else if e != nil {
				ln.learn(e)
			}
		}
	}
}

// learn takes a watched entry in, unless a newer one is known.
func (ln *line) learn(e jetstream.KeyValueEntry) {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	if e.Revision() <= ln.rev {
		return
	}
	ln.rec, _ = decode(e)
	ln.rev, ln.fresh, ln.readAt = e.Revision(), true, time.Now()
}

// fail ends every waiter with err.
func (ln *line) fail(err error) {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	for _, w := range ln.waiting {
		if !w.gone {
			w.err = err
			close(w.ready)
		}
	}
	ln.waiting = nil
}

// step serves what it can of the line with at most one compare-and-set.
// It returns how long to wait before the next step (0: at once).
func (ln *line) step(ctx context.Context) (time.Duration, error) {
	self := ln.q.o.Instance
	ln.mu.Lock()
	ln.waiting = inRounds(slices.DeleteFunc(ln.waiting, func(w *waiter) bool { return w.gone }))
	// Only this replica puts itself in line or takes itself out (the
	// others forget it only once it is not live).
	if _, queued := ln.rec.Queue[self]; len(ln.waiting) == 0 && ln.freed == 0 && ln.fresh && !queued && ln.rec.Held[self] == ln.held {
		ln.mu.Unlock()
		return idle, nil
	}
	if !ln.fresh || time.Since(ln.readAt) >= recheck {
		ln.mu.Unlock()
		rec, rev, err := ln.q.get(ctx, ln.key)
		if err != nil {
			return 0, err
		}
		ln.mu.Lock()
		if rev >= ln.rev || !ln.fresh {
			ln.rec, ln.rev = rec, rev
		}
		ln.fresh, ln.readAt = true, time.Now()
	}
	live, counted := ln.q.live(), ln.q.counted()
	now := time.Now()
	r := ln.rec.clone()
	r.refill(ln.lim, now)
	unused := ln.unused
	if ln.lim.Rate > 0 {
		r.Tokens = min(r.Tokens+float64(unused), ln.lim.burst())
	}
	mine := ln.held - ln.freed
	n := len(ln.waiting)
	turn := r.turn(live, self)
	inFlight := r.othersHeld(counted, self) + mine
	serve := 0
	if n > 0 && turn {
		serve = n
		if c := ln.lim.concurrency(r); c > 0 {
			if free := c - inFlight; free < serve {
				serve, ln.pressed = free, true
			}
		}
		if ln.lim.Rate > 0 {
			serve = min(serve, r.whole())
		}
		serve = max(serve, 0)
	}
	if ln.lim.Rate > 0 {
		r.Tokens -= float64(serve)
	}
	r.setHeld(self, mine+serve)
	r.prune(live, counted, self)
	place, queued := ln.rec.Queue[self]
	switch {
	case n == serve:
		delete(r.Queue, self)
	case !queued || serve > 0:
		r.line(self) // into the line, or to its back after a turn
	}
	for _, w := range ln.waiting[serve:] {
		w.waited = true
	}
	if p, inLine := r.Queue[self]; serve == 0 && ln.freed == 0 && p == place && inLine == queued && r.Held[self] == ln.rec.Held[self] {
		// Nothing to write: wait for a turn, a slot, or the next token.
		// (A record holding other slots of this replica's than it has, a
		// write stored whose answer was lost, is written.)
		wait := recheck
		if turn && ln.lim.Rate > 0 && r.whole() < 1 {
			wait = min(wait, r.due(ln.lim))
		}
		ln.mu.Unlock()
		return wait, nil
	}
	refusedAt, answeredOK := ln.refusedAt, ln.answeredOK
	grew := ln.learnInto(&r, now)
	freed, rev := ln.freed, ln.rev
	ln.mu.Unlock()
	nrev, err := ln.q.put(ctx, ln.key, r, rev)
	ln.mu.Lock()
	defer ln.mu.Unlock()
	if err != nil {
		if isConflict(err) {
			ln.fresh = false // read again and decide again, at once
			return 0, nil
		}
		// The write may have been stored, its answer lost: the tokens of
		// calls not made it gave back are not given again (that would
		// let the target have more than its rate); at worst they are
		// lost. The rest is written whole again from what this replica
		// holds, once the record is read again.
		ln.unused -= unused
		ln.fresh = false
		return 0, err
	}
	if nrev > ln.rev {
		ln.rec, ln.rev, ln.fresh, ln.readAt = r, nrev, true, time.Now()
	}
	ln.held += serve - freed
	ln.freed -= freed
	ln.unused -= unused
	if ln.refusedAt == refusedAt {
		ln.refusedAt = 0
		if refusedAt > 0 {
			ln.pressed = false
		}
	}
	if answeredOK {
		ln.answeredOK = false
	}
	if grew {
		ln.pressed = false
	}
	for i, w := range ln.waiting[:serve] {
		w.inFlight = inFlight + i + 1
		if w.gone { // gave up during the write: its slot goes back
			ln.freed++
			continue
		}
		close(w.ready)
	}
	ln.waiting = ln.waiting[serve:]
	return 0, nil
}

// flush takes this replica's slots (those still held count) and place in
// line out of the record.
func (ln *line) flush(ctx context.Context) error {
	self := ln.q.o.Instance
	ln.mu.Lock()
	mine := ln.held - ln.freed
	ln.mu.Unlock()
	for range maxTries {
		rec, rev, err := ln.q.get(ctx, ln.key)
		if err != nil {
			return err
		}
		r := rec.clone()
		r.setHeld(self, mine)
		delete(r.Queue, self)
		if r.Held[self] == rec.Held[self] && len(r.Queue) == len(rec.Queue) {
			return nil
		}
		if _, err = ln.q.put(ctx, ln.key, r, rev); err == nil || !isConflict(err) {
			return err
		}
	}
	return ErrContended
}

// inRounds orders ws, waiters in their order of arrival, in rounds: each
// caller's first, then each one's second, and so on, each round in order
// of arrival. A waiter's round only comes down as its caller's earlier
// ones are served, so none waits for ever.
func inRounds(ws []*waiter) []*waiter {
	if len(ws) < 2 {
		return ws
	}
	type placed struct {
		w     *waiter
		round int
	}
	seen := map[string]int{}
	ps := make([]placed, len(ws))
	for i, w := range ws {
		ps[i] = placed{w, seen[w.caller]}
		seen[w.caller]++
	}
	if len(seen) == 1 {
		return ws
	}
	slices.SortStableFunc(ps, func(a, b placed) int { return cmp.Compare(a.round, b.round) })
	for i, p := range ps {
		ws[i] = p.w
	}
	return ws
}
