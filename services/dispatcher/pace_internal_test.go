package dispatcher

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/natstest"
)

// Calls whose permits pass while the process stalls take new permits
// rather than go out together: after a stall, an account's calls are
// still spaced at its rate.
func TestPacerSpacesCallsThatWokeLate(t *testing.T) {
	t.Parallel()
	const interval = 100 * time.Millisecond
	p := newPacer(float64(time.Second / interval))
	stallEnd := time.Now().Add(470 * time.Millisecond)
	p.until = func(ctx context.Context, t time.Time, changed <-chan struct{}) error {
		// The process stalls until stallEnd: every sleep due before it
		// ends then.
		return sleepUntil(ctx, laterOf(t, stallEnd), changed)
	}
	went := goTimes(t, p, 5) // permits due at 0, 100, 200, 300 and 400 ms
	for i := 1; i < len(went); i++ {
		if gap := went[i].Sub(went[i-1]); gap < interval*8/10 {
			t.Fatalf("calls %d and %d went %s apart after the stall, want about %s", i, i+1, gap, interval)
		}
	}
}

// Calls that go late for their permits, each by its own amount, and take
// no other (as once a late call has taken all it may): still no two of
// them go less than an interval apart. The permits alone would let them
// go together.
func TestPacerHoldsTheRateWhenCallsGoLate(t *testing.T) {
	t.Parallel()
	const perSecond, calls = 20, 60
	p := newPacer(perSecond)
	p.repace = 0
	var rmu sync.Mutex
	rnd := rand.New(rand.NewPCG(1, 2))
	p.until = func(ctx context.Context, t time.Time, changed <-chan struct{}) error {
		rmu.Lock()
		late := time.Duration(rnd.Int64N(int64(10 * p.interval)))
		rmu.Unlock()
		return sleepUntil(ctx, t.Add(late), changed)
	}
	went := goTimes(t, p, calls)
	// went is stamped after wait returned, a little after the pacer's own
	// stamp: allow that much.
	const stamping = 15 * time.Millisecond
	for i := 1; i < len(went); i++ {
		if gap := went[i].Sub(went[i-1]); gap < p.interval-stamping {
			t.Fatalf("calls %d and %d went %s apart, want at least %s", i, i+1, gap, p.interval)
		}
	}
	for i := perSecond; i < len(went); i++ {
		if span := went[i].Sub(went[i-perSecond]); span < time.Second-stamping {
			t.Fatalf("calls %d to %d (%d) went within %s, want at least 1s", i-perSecond+1, i+1, perSecond+1, span)
		}
	}
}

// goTimes makes n calls wait on p at once and returns when each went, in
// order.
func goTimes(t *testing.T, p *pacer, n int) []time.Time {
	var mu sync.Mutex
	var went []time.Time
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if err := p.wait(context.Background()); err != nil {
				t.Error(err)
			}
			mu.Lock()
			went = append(went, time.Now())
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.SortFunc(went, func(a, b time.Time) int { return a.Compare(b) })
	return went
}

// A rate past the config's bounds (one stored before the bounds, say)
// still builds a pacer that paces: too fast a rate would round the
// interval to zero and panic the limiter, too slow a one overflow it.
func TestPacerClampsRatesPastTheBounds(t *testing.T) {
	t.Parallel()
	for _, perSecond := range []float64{2e9, 1e-10} {
		p := newPacer(perSecond)
		if p.interval <= 0 {
			t.Fatalf("newPacer(%g): interval %s, want positive", perSecond, p.interval)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		if err := p.wait(ctx); err != nil {
			t.Fatalf("newPacer(%g): first call: %v", perSecond, err)
		}
		cancel()
	}
}

// A call waiting for its permit when the rate changes waits again at the
// new rate: at 1/s the second call would wait a second; raised to 100/s,
// it goes at once, and made unlimited, every waiter does.
func TestPacerWaitersTakeTheNewRate(t *testing.T) {
	t.Parallel()
	for _, to := range []float64{100, 0} {
		p := newPacer(1)
		var sleeping atomic.Int32
		p.until = func(ctx context.Context, t time.Time, changed <-chan struct{}) error {
			sleeping.Add(1)
			defer sleeping.Add(-1)
			return sleepUntil(ctx, t, changed)
		}
		if err := p.wait(t.Context()); err != nil {
			t.Fatal(err)
		}
		went := make(chan time.Time, 3)
		for range 3 {
			go func() {
				if err := p.wait(t.Context()); err != nil {
					t.Error(err)
				}
				went <- time.Now()
			}()
		}
		natstest.Eventually(t, 5*time.Second, func() bool { return sleeping.Load() == 3 }, "the three calls waiting at 1/s")
		changed := time.Now()
		p.setRate(to)
		for range 3 {
			if d := (<-went).Sub(changed); d > 500*time.Millisecond {
				t.Fatalf("rate 1/s → %g/s: a waiting call went %s after the change, want at once", to, d)
			}
		}
	}
}

// A call that waited for its target's slot is not outpaced by its
// account's calls to another target, which go at the account's full rate
// meanwhile: with the slot in hand it books the next gap (claim) and goes
// within an interval, every time. Before, it went only if the gap was
// under 10 ms, and was sent back for a permit again almost every time.
func TestPacerClaimIsNotOutpacedByTheAccountsOtherCalls(t *testing.T) {
	t.Parallel()
	const interval = 100 * time.Millisecond
	p := newPacer(float64(time.Second / interval))
	var wg sync.WaitGroup
	defer wg.Wait() // after cancel, which ends the other calls
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var others atomic.Int64
	wg.Go(func() { // the calls to another target, one after another
		for p.wait(ctx) == nil {
			others.Add(1)
		}
	})
	for i := range 5 {
		if err := p.ready(ctx); err != nil {
			t.Fatal(err)
		}
		<-time.After(2*interval + interval/2) // the wait for the target's slot
		now := time.Now()
		at, b, ok := p.claim(now)
		if !ok {
			t.Fatalf("call %d: outpaced by the account's other calls", i+1)
		}
		if wait := at.Sub(now); wait > interval {
			t.Fatalf("call %d: booked %s on, want at most an interval (%s)", i+1, wait, interval)
		}
		if err := p.until(ctx, at, nil); err != nil {
			t.Fatal(err)
		}
		if b != nil {
			p.gone(b, time.Now()) // a slot taken again at once
		}
	}
	if n := others.Load(); n < 5 {
		t.Fatalf("want the account's other calls going meanwhile, %d went", n)
	}
}

// A call booked to go (claim, more than slotHoldMax on) holds the
// account's next go while it waits without its target's slot: the
// account's other calls, to any target, wait for it to go, and go an
// interval after it; given up (unbook), it leaves the pace as it was.
func TestPacerBookingHoldsTheNextGo(t *testing.T) {
	t.Parallel()
	const interval = 200 * time.Millisecond
	p := newPacer(float64(time.Second / interval))
	ctx := t.Context()
	if err := p.wait(ctx); err != nil { // the account's last call
		t.Fatal(err)
	}
	first := time.Now()
	at, b, ok := p.claim(first)
	if !ok || b == nil || at.Sub(first) < interval-slotHoldMax {
		t.Fatalf("claim right after a call: want a booking an interval on, got %v, %v, %v", at.Sub(first), b, ok)
	}
	if _, _, ok := p.claim(time.Now()); ok {
		t.Fatal("a second claim while one is booked: want it outpaced")
	}
	went := make(chan time.Time, 1)
	go func() {
		if err := p.wait(ctx); err == nil {
			went <- time.Now()
		}
	}()
	if err := p.until(ctx, at.Add(interval/2), nil); err != nil { // the booked call waits long for its slot
		t.Fatal(err)
	}
	select {
	case w := <-went:
		t.Fatalf("another call went %s after the booked time, before the booked call", w.Sub(at))
	default:
	}
	gone := time.Now()
	p.gone(b, gone)
	if w := <-went; w.Sub(gone) < interval-lateAfter(interval) {
		t.Fatalf("the next call went %s after the booked one, want an interval (%s)", w.Sub(gone), interval)
	}

	_, b, ok = p.claim(time.Now())
	if !ok || b == nil {
		t.Fatalf("claim right after a call: want a booking, got %v, %v", b, ok)
	}
	p.unbook(b)
	if _, _, ok := p.claim(time.Now()); !ok {
		t.Fatal("a claim after a booking was given up: want it booked, not outpaced")
	}
}

// A booking whose call got no slot again within an interval of its time
// lapses: the account's other calls go on, and the booked call, once it
// has a slot, claims again rather than go beside them. A change of rate
// ends a booking at once.
func TestPacerBookingLapses(t *testing.T) {
	t.Parallel()
	const interval = 100 * time.Millisecond
	p := newPacer(float64(time.Second / interval))
	ctx := t.Context()
	if err := p.wait(ctx); err != nil { // the account's last call
		t.Fatal(err)
	}
	at, b, ok := p.claim(time.Now())
	if !ok || b == nil {
		t.Fatalf("claim right after a call: want a booking, got %v, %v", b, ok)
	}
	if err := p.wait(ctx); err != nil { // the account's call to another target
		t.Fatal(err)
	}
	if other := time.Now(); other.Before(b.until) {
		t.Fatalf("another call went %s after the booked time, before the booking lapsed (%s)", other.Sub(at), b.until.Sub(at))
	}
	if p.gone(b, time.Now()) {
		t.Fatal("a lapsed booking's call once another went: want it to claim again, it went")
	}

	if err := p.until(ctx, time.Now().Add(interval), nil); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(ctx); err != nil {
		t.Fatal(err)
	}
	_, b, ok = p.claim(time.Now())
	if !ok || b == nil {
		t.Fatalf("claim right after a call: want a booking, got %v, %v", b, ok)
	}
	p.setRate(0)
	select {
	case <-b.done:
	default:
		t.Fatal("a change of rate: want the booking ended")
	}
	if p.gone(b, time.Now()) {
		t.Fatal("a booking ended by a change of rate: want its call to claim again, it went")
	}
	if _, nb, ok := p.claim(time.Now()); !ok || nb != nil {
		t.Fatalf("unlimited: want a claim to go at once, got %v, %v", nb, ok)
	}
}
