package quota_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/quota"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// cluster is the live replicas as a test decides them, and those taken
// for dead whose calls may still run (lingering).
type cluster struct {
	mu        sync.Mutex
	live      []string
	lingering []string
}

func (c *cluster) Live() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.live)
}

func (c *cluster) Counted() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append(slices.Clone(c.live), c.lingering...)
}

func (c *cluster) set(live ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.live, c.lingering = slices.Sorted(slices.Values(live)), nil
}

// dying takes m for dead, its calls still counted until set.
func (c *cluster) dying(m string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.live = slices.DeleteFunc(c.live, func(l string) bool { return l == m })
	c.lingering = append(c.lingering, m)
}

// open is replica name's Quotas on its own connection, as a separate
// process has; closed when the test ends.
func open(t *testing.T, srv *natstest.Server, c *cluster, name string) *quota.Quotas {
	t.Helper()
	_, js := srv.Conn(t)
	q, err := quota.Open(context.Background(), js, quota.Options{Instance: name, Live: c.Live, Counted: c.Counted})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		q.Close(ctx)
	})
	return q
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Three replicas, each with many callers, share one concurrency limit of
// 3: never more than 3 calls in flight at once, and every caller served.
// One replica alone with 30 callers would go to 30.
func TestAcquireConcurrencyAcrossReplicas(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	c := &cluster{}
	c.set("a", "b", "c")
	qs := []*quota.Quotas{open(t, srv, c, "a"), open(t, srv, c, "b"), open(t, srv, c, "c")}
	lim := quota.Limit{Concurrency: 3}
	var inFlight, peak, served atomic.Int64
	var waits atomic.Int64
	var wg sync.WaitGroup
	ctx := ctxFor(t, time.Minute)
	for _, q := range qs {
		for range 10 {
			wg.Go(func() {
				for range 5 {
					release, waited, err := q.Acquire(ctx, quota.TargetKey("erp"), lim)
					if err != nil {
						t.Errorf("Acquire: %v", err)
						return
					}
					if waited {
						waits.Add(1)
					}
					n := inFlight.Add(1)
					for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
					}
					<-time.After(2 * time.Millisecond) // the call
					inFlight.Add(-1)
					served.Add(1)
					release(quota.Answer{})
				}
			})
		}
	}
	wg.Wait()
	if p := peak.Load(); p > 3 {
		t.Errorf("want at most 3 calls in flight over the three replicas, saw %d", p)
	}
	if p := peak.Load(); p < 2 {
		t.Errorf("want the limit used, saw at most %d in flight", p)
	}
	if n := served.Load(); n != 150 {
		t.Errorf("want every one of 150 calls served, got %d", n)
	}
	if waits.Load() == 0 {
		t.Errorf("want some calls held back (waited), none were")
	}
}

// A rate shared by three replicas: the calls of any window come at most
// at the rate, plus the bucket's one token and its lateness.
func TestAcquireRateAcrossReplicas(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	c := &cluster{}
	c.set("a", "b", "c")
	qs := []*quota.Quotas{open(t, srv, c, "a"), open(t, srv, c, "b"), open(t, srv, c, "c")}
	const rate = 40.0
	lim := quota.Smooth(rate, 0)
	var mu sync.Mutex
	var at []time.Time
	var wg sync.WaitGroup
	ctx := ctxFor(t, time.Minute)
	for _, q := range qs {
		for range 4 {
			wg.Go(func() {
				for range 10 {
					release, _, err := q.Acquire(ctx, quota.TargetKey("erp"), lim)
					if err != nil {
						t.Errorf("Acquire: %v", err)
						return
					}
					mu.Lock()
					at = append(at, time.Now())
					mu.Unlock()
					release(quota.Answer{})
				}
			})
		}
	}
	wg.Wait()
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	if len(at) != 120 {
		t.Fatalf("want 120 calls, got %d", len(at))
	}
	// Every window from one call to a later one: calls ≤ rate × span +
	// burst, the span widened by how late this test may read the clock
	// after a call was let through.
	burst := 1 + rate*quota.Lateness.Seconds()
	const late = 0.025
	for i := range at {
		for j := i + 1; j < len(at); j++ {
			span := at[j].Sub(at[i]).Seconds() + late
			if n := float64(j - i + 1); n > rate*span+burst+1e-9 {
				t.Fatalf("want at most %.1f calls in %.3fs at %v/s, got %v (calls %d..%d)", rate*span+burst, span, rate, n, i, j)
			}
		}
	}
	if took := at[len(at)-1].Sub(at[0]); took < 2*time.Second {
		t.Errorf("want 120 calls at 40/s to take about 3s, took %s", took)
	}
}

// A replica killed while it held every slot holds them until it is taken
// for dead and its calls can no longer run (Counted); then the others get
// them.
func TestAcquireDeadReplicaSlotsReclaimed(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	c := &cluster{}
	c.set("a", "b")
	a, b := open(t, srv, c, "a"), open(t, srv, c, "b")
	lim := quota.Limit{Concurrency: 2}
	for range 2 {
		if _, _, err := a.Acquire(ctxFor(t, 10*time.Second), quota.TargetKey("erp"), lim); err != nil {
			t.Fatal(err)
		}
	}
	// a "dies" holding both (never released, never closed).
	early := ctxFor(t, 1500*time.Millisecond)
	if _, _, err := b.Acquire(early, quota.TargetKey("erp"), lim); err == nil {
		t.Fatalf("want b held back while live a holds both slots, it got one")
	}
	c.dying("a") // taken for dead, its calls may still run
	lingering := ctxFor(t, 1500*time.Millisecond)
	if _, _, err := b.Acquire(lingering, quota.TargetKey("erp"), lim); err == nil {
		t.Fatalf("want b held back while dead a's calls may still run, it got a slot")
	}
	done := make(chan error, 1)
	go func() {
		release, _, err := b.Acquire(ctxFor(t, 10*time.Second), quota.TargetKey("erp"), lim)
		if err == nil {
			release(quota.Answer{})
		}
		done <- err
	}()
	c.set("b") // a's calls can no longer run
	if err := <-done; err != nil {
		t.Fatalf("want b served once a was taken for dead, got %v", err)
	}
}

// Two replicas that both want the one slot take turns: neither is served
// twice in a row while the other waits.
func TestAcquireReplicasTakeTurns(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	c := &cluster{}
	c.set("a", "b")
	qs := map[string]*quota.Quotas{"a": open(t, srv, c, "a"), "b": open(t, srv, c, "b")}
	lim := quota.Limit{Concurrency: 1}
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	ctx := ctxFor(t, time.Minute)
	for name, q := range qs {
		for range 4 {
			wg.Go(func() {
				for range 5 {
					release, _, err := q.Acquire(ctx, quota.TargetKey("erp"), lim)
					if err != nil {
						t.Errorf("Acquire: %v", err)
						return
					}
					mu.Lock()
					order = append(order, name)
					mu.Unlock()
					<-time.After(3 * time.Millisecond) // the call
					release(quota.Answer{})
				}
			})
		}
	}
	wg.Wait()
	// Once both wait, the longest run of one replica is short: it goes to
	// the back of the line after each turn.
	run, longest := 0, 0
	for i := 1; i < len(order)-8; i++ { // the tail is one replica's once the other is done
		if order[i] == order[i-1] {
			run++
		} else {
			run = 0
		}
		if i > 4 {
			longest = max(longest, run+1)
		}
	}
	if longest > 3 {
		t.Errorf("want the replicas to take turns at the one slot, one was served %d times in a row: %v", longest, order)
	}
}

// Close takes the replica's slots and place in line out of the record.
func TestCloseLeavesNothing(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	c := &cluster{}
	c.set("a", "b")
	_, js := srv.Conn(t)
	a := open(t, srv, c, "a")
	release, _, err := a.Acquire(ctxFor(t, 10*time.Second), quota.TargetKey("erp"), quota.Limit{Concurrency: 2})
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctxFor(t, 5*time.Second), names.BucketQuotas)
	if err != nil {
		t.Fatal(err)
	}
	held := func() map[string]int {
		e, err := kv.Get(ctxFor(t, 5*time.Second), quota.TargetKey("erp"))
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			Held map[string]int `json:"held"`
		}
		if err := json.Unmarshal(e.Value(), &r); err != nil {
			t.Fatal(err)
		}
		return r.Held
	}
	if h := held(); h["a"] != 1 {
		t.Fatalf("want a's one call in flight in the record, got %v", h)
	}
	release(quota.Answer{})
	a.Close(ctxFor(t, 5*time.Second))
	if h := held(); len(h) != 0 {
		t.Errorf("want no calls in flight left after release and Close, got %v", h)
	}
	if _, _, err := a.Acquire(ctxFor(t, time.Second), quota.TargetKey("erp"), quota.Limit{Concurrency: 2}); !errors.Is(err, quota.ErrClosed) {
		t.Errorf("want ErrClosed after Close, got %v", err)
	}
}

// Take shares one bucket between replicas: over the run, the tokens
// given are at most the burst plus the rate times the time; the refused
// are told when to come back.
func TestTakeAcrossReplicas(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	c := &cluster{}
	a, b := open(t, srv, c, "a"), open(t, srv, c, "b")
	lim := quota.Limit{Rate: 20, Burst: 5}
	ctx := ctxFor(t, time.Minute)
	start := time.Now()
	var ok, refused atomic.Int64
	var wg sync.WaitGroup
	for _, q := range []*quota.Quotas{a, b} {
		wg.Go(func() {
			for time.Since(start) < 2*time.Second {
				got, wait, err := q.Take(ctx, quota.APIKey("shop"), lim)
				switch {
				case err != nil:
					t.Errorf("Take: %v", err)
					return
				case got:
					ok.Add(1)
				default:
					refused.Add(1)
					if wait <= 0 || wait > time.Second/20+time.Millisecond {
						t.Errorf("want a refusal to say when the next token is due (within 1/20 s), got %s", wait)
						return
					}
				}
				<-time.After(5 * time.Millisecond) // 2 × 200 tries/s: 10× the rate
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	if max := 5 + 20*elapsed; float64(ok.Load()) > max {
		t.Errorf("want at most %.0f submissions taken in %.1fs (burst 5 + 20/s), got %d", max, elapsed, ok.Load())
	}
	if ok.Load() < 20 {
		t.Errorf("want the rate served (about 45 in 2s), got %d", ok.Load())
	}
	if refused.Load() == 0 {
		t.Errorf("want submissions over the rate refused, none were")
	}
}

// BenchmarkAcquire is the cost of a target limit that never holds a call
// back: one acquire and one release per (no-op) call, from 1 and from 16
// callers of one replica, with the server fsyncing every write. One
// caller pays both compare-and-sets in full; many share them (a write
// serves every waiter it can and returns every slot released).
func BenchmarkAcquire(b *testing.B) {
	for _, callers := range []int{1, 16} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			srv := natstest.Start(b, natstest.SyncAlways())
			c := &cluster{}
			c.set("a")
			_, js := srv.Conn(b)
			q, err := quota.Open(context.Background(), js, quota.Options{Instance: "a", Live: c.Live})
			if err != nil {
				b.Fatal(err)
			}
			defer q.Close(context.Background())
			lim := quota.Limit{Rate: 1e6, Burst: 1e6, Concurrency: 1 << 20}
			var wg sync.WaitGroup
			var next atomic.Int64
			b.ResetTimer()
			for range callers {
				wg.Go(func() {
					for next.Add(1) <= int64(b.N) {
						release, _, err := q.Acquire(context.Background(), quota.TargetKey("erp"), lim)
						if err != nil {
							b.Error(err)
							return
						}
						release(quota.Answer{})
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
		})
	}
}

// A learned concurrency shared by three replicas finds a provider's
// capacity from its refusals: started at 30 against a provider that
// takes 10 calls at once, the first refusals cut it under 10, after which
// the calls in flight stay within one growth step of it; when the
// provider takes 20, it grows back past 10.
func TestLearnedConcurrencyAcrossReplicas(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	c := &cluster{}
	c.set("a", "b", "c")
	qs := []*quota.Quotas{open(t, srv, c, "a"), open(t, srv, c, "b"), open(t, srv, c, "c")}
	lim := quota.Limit{Learn: &quota.Learn{Min: 1, Max: 40, Start: 30}}
	var capacity, inFlight, refused, answered atomic.Int64
	capacity.Store(10)
	var settled atomic.Bool
	var early atomic.Int64     // calls that began before the settle and have not returned
	var peakAfter atomic.Int64 // in flight at most, once settled and every earlier call returned
	ctx, stop := context.WithCancel(ctxFor(t, time.Minute))
	var wg sync.WaitGroup
	for _, q := range qs {
		for range 12 {
			wg.Go(func() {
				for ctx.Err() == nil {
					before := !settled.Load()
					if before {
						early.Add(1)
					}
					release, _, err := q.Acquire(ctx, quota.TargetKey("bureau"), lim)
					if err != nil {
						return
					}
					n := inFlight.Add(1)
					if settled.Load() && early.Load() == 0 {
						for p := peakAfter.Load(); n > p && !peakAfter.CompareAndSwap(p, n); p = peakAfter.Load() {
						}
					}
					<-time.After(5 * time.Millisecond) // the call
					a := quota.Answer{OK: true}
					if n > capacity.Load() {
						a = quota.Answer{Refused: true}
						refused.Add(1)
					}
					answered.Add(1)
					inFlight.Add(-1)
					release(a)
					if before {
						early.Add(-1)
					}
				}
			})
		}
	}
	_, js := srv.Conn(t)
	usage := func() quota.Usage {
		u, err := quota.Read(ctx, js, "", quota.TargetKey("bureau"), lim, c.Live())
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	// Settled: cut, and the calls served before the cut have returned.
	natstest.Eventually(t, 10*time.Second, func() bool {
		u := usage()
		return u.Concurrency <= 10 && inFlight.Load() <= int64(u.Concurrency)
	}, "the learned concurrency cut to the capacity of 10")
	settled.Store(true)
	// Calls granted before the cut may still be on their way: the peak
	// counts once each of them has returned.
	natstest.Eventually(t, 10*time.Second, func() bool { return early.Load() == 0 }, "the calls begun before the cut to return")
	// Never above the capacity (+1, the probe of growth). A cut deeper than
	// the capacity (a refusal counted at a stale low level, likelier on a
	// loaded machine) lasts until regrowth, a step a second: the level
	// comes back near the capacity, and holds there.
	highest := 0
	natstest.Eventually(t, 20*time.Second, func() bool {
		c := usage().Concurrency
		highest = max(highest, c)
		return c >= 8
	}, "the learned concurrency back near the capacity of 10")
	r0, a0 := refused.Load(), answered.Load()
	var samples []int
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		samples = append(samples, usage().Concurrency)
		<-time.After(100 * time.Millisecond) // sampling the record, not waiting for an outcome
	}
	if slices.Sort(samples); highest > 11 || samples[len(samples)-1] > 11 || samples[len(samples)/2] < 5 {
		t.Errorf("want the learned concurrency at most 11 against a capacity of 10, and near it once regrown (median 5–11); highest before %d, then %v", highest, samples)
	}
	if p := peakAfter.Load(); p > 11 {
		t.Errorf("want at most 11 calls in flight over the replicas once learned, saw %d", p)
	}
	if r, a := refused.Load()-r0, answered.Load()-a0; a == 0 || float64(r) > 0.05*float64(a) {
		t.Errorf("want under 5%% of calls refused once learned, got %d of %d", r, a)
	}
	capacity.Store(20)
	natstest.Eventually(t, 15*time.Second, func() bool { return usage().Concurrency > 12 },
		"the learned concurrency grown past 12 once the provider takes 20")
	stop()
	wg.Wait()
}

// A limit that changes (a reload of targets.<t>.rate) holds from the next
// Acquire on, for the callers already waiting too: at one token every 10
// s three callers wait; a caller with 50/s lets them all through within
// a second. Then back at 1/s, three more take about two seconds. Before,
// the key's line kept the limit it was made with until a restart.
func TestAcquireTakesANewLimit(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	c := &cluster{}
	c.set("a")
	q := open(t, srv, c, "a")
	ctx := ctxFor(t, time.Minute)
	key := quota.TargetKey("erp")
	acquire := func(l quota.Limit) time.Time {
		release, _, err := q.Acquire(ctx, key, l)
		if err != nil {
			t.Fatal(err)
		}
		release(quota.Answer{})
		return time.Now()
	}
	slow := quota.Smooth(0.1, 0)
	acquire(slow) // the bucket's one token
	went := make(chan time.Time, 3)
	for range 3 {
		go func() { went <- acquire(slow) }()
	}
	natstest.Eventually(t, 10*time.Second, func() bool {
		u, ok := q.Usage(key)
		return ok && u.Waiting == 3
	}, "three callers waiting at one token every 10s")
	changed := time.Now()
	acquire(quota.Smooth(50, 0))
	for range 3 {
		if d := (<-went).Sub(changed); d > time.Second {
			t.Fatalf("a caller waiting at 0.1/s went %s after the limit became 50/s, want within a second", d)
		}
	}
	first := acquire(quota.Smooth(1, 0))
	var last time.Time
	for range 3 {
		last = acquire(quota.Smooth(1, 0))
	}
	if span := last.Sub(first); span < 3*time.Second-quota.Lateness-100*time.Millisecond {
		t.Fatalf("back at 1/s: want 4 calls to span about 3s, they spanned %s", span)
	}
}

// A slot given back by a call that was not made (its caller outpaced, or
// booked to go later) gives its token back too: the next call takes it
// at once. Before, each such slot cost a token of the target's rate,
// which every account shares. A call that was made keeps its token
// spent.
func TestUnusedTokenGoesBack(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	c := &cluster{}
	c.set("a")
	q := open(t, srv, c, "a")
	lim := quota.Smooth(0.5, 0) // a token every 2 s, one in the bucket
	ctx := ctxFor(t, time.Minute)
	var lastRelease func(quota.Answer)
	acquire := func() time.Duration {
		t.Helper()
		start := time.Now()
		release, _, err := q.Acquire(ctx, quota.TargetKey("erp"), lim)
		if err != nil {
			t.Fatal(err)
		}
		lastRelease = release
		return time.Since(start)
	}
	acquire()
	lastRelease(quota.Answer{NotMade: true})
	if took := acquire(); took > 500*time.Millisecond {
		t.Fatalf("after a call not made gave its token back: want the next served at once, waited %s", took)
	}
	lastRelease(quota.Answer{OK: true})
	if took := acquire(); took < time.Second {
		t.Fatalf("after a call that was made: want the next to wait for a token (2 s), waited %s", took)
	}
	lastRelease(quota.Answer{OK: true})
}

// A token Take spent for a call not made goes back with GiveBack, and
// never past the bucket's size: at 1 a minute, one in the bucket, a
// token given back serves the next Take at once, and two given back to
// a bucket already full still serve one Take, not two.
func TestGiveBackReturnsATakenToken(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	c := &cluster{}
	c.set("a")
	q := open(t, srv, c, "a")
	lim, key := quota.Smooth(1.0/60, 0), quota.TargetKey("bureau")
	ctx := ctxFor(t, time.Minute)
	take := func() bool {
		t.Helper()
		ok, _, err := q.Take(ctx, key, lim)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	give := func() {
		t.Helper()
		if err := q.GiveBack(ctx, key, lim); err != nil {
			t.Fatal(err)
		}
	}
	if !take() || take() {
		t.Fatal("at 1/m with one token in the bucket: want the first Take served and the second refused")
	}
	give()
	if !take() {
		t.Fatal("after a token given back: want the next Take served at once")
	}
	give()
	give()
	if !take() || take() {
		t.Fatal("two tokens given back to a bucket of one: want one Take served, not two")
	}
}

// The callers of one key are served in rounds: with one slot, acme's five
// calls waiting ahead of globex's one, globex's goes second, not sixth.
// Served in order of arrival, one account with many calls waiting for a
// shared target held every other account's back behind all of them.
func TestAcquireServesCallersInRounds(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	c := &cluster{}
	c.set("a")
	q := open(t, srv, c, "a")
	lim, key := quota.Limit{Concurrency: 1}, quota.TargetKey("erp")
	ctx := ctxFor(t, time.Minute)
	hold, _, err := q.AcquireFor(ctx, key, "acme", lim)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	wait := func(caller string, n int) {
		wg.Go(func() {
			release, _, err := q.AcquireFor(ctx, key, caller, lim)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, fmt.Sprintf("%s%d", caller, n))
			mu.Unlock()
			release(quota.Answer{OK: true})
		})
		natstest.Eventually(t, 10*time.Second, func() bool { u, _ := q.Usage(key); return u.Waiting >= n }, "want %d waiting", n)
	}
	for i := range 5 {
		wait("acme", i+1)
	}
	wait("globex", 6)
	hold(quota.Answer{OK: true})
	wg.Wait()
	if len(order) != 6 || order[1] != "globex6" {
		t.Fatalf("want globex's call served second, after acme's first, got %v", order)
	}
}
