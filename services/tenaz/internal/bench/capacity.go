package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/services/dispatcher"
)

// The capacity phase: one account's backlog against a provider with a
// hidden capacity (calls in flight; 429 with Retry-After beyond it, and
// a latency that rises as it nears it), which halves mid-run. It is run
// with "concurrency: auto", with fixed limits set too high and too low,
// and with auto on three dispatcher replicas.

const (
	capacityHigh    = 40                     // the provider's capacity in the first half
	capacityLow     = capacityHigh / 2       // and in the second
	capacityLatency = 100 * time.Millisecond // a call's latency alone at the provider
	capacityBucket  = 500 * time.Millisecond // the provider's counts are kept per bucket
	capacitySpan    = 3 * time.Second        // a settled span (capacity_adapt_s)
	// capacityTooHigh and capacityTooLow are the fixed limits compared.
	capacityTooHigh = 80
	capacityTooLow  = 10
)

// capacityLatencyAt is the latency of a call admitted as the n-th in
// flight of capacity c: it doubles as the provider fills up.
func capacityLatencyAt(n, c int) time.Duration {
	x := float64(n) / float64(c)
	return time.Duration(float64(capacityLatency) * (1 + x*x*x))
}

// capacityRate is the most successful calls per second a provider of
// capacity c serves: n calls in flight at their latency, at the best n.
func capacityRate(c int) float64 {
	best := 0.0
	for n := 1; n <= c; n++ {
		best = math.Max(best, float64(n)/capacityLatencyAt(n, c).Seconds())
	}
	return best
}

// capacityProvider is the provider: its counts per bucket from the first
// call on.
type capacityProvider struct {
	srv *http.Server
	url string

	mu       sync.Mutex
	capacity int
	inFlight int
	start    time.Time // the first call
	ok       []int     // successes answered, per bucket
	refused  []int     // 429s answered, per bucket
	peak     []int     // most admitted in flight, per bucket
	first    chan struct{}
}

func startCapacityProvider() (*capacityProvider, error) {
	p := &capacityProvider{capacity: capacityHigh, first: make(chan struct{})}
	var err error
	if p.srv, p.url, err = serve(p); err != nil {
		return nil, err
	}
	return p, nil
}

// bucketLocked is the index of now's bucket, the slices grown to it.
func (p *capacityProvider) bucketLocked(now time.Time) int {
	if p.start.IsZero() {
		p.start = now
		close(p.first)
	}
	i := int(now.Sub(p.start) / capacityBucket)
	for len(p.ok) <= i {
		p.ok, p.refused, p.peak = append(p.ok, 0), append(p.refused, 0), append(p.peak, 0)
	}
	return i
}

func (p *capacityProvider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	p.mu.Lock()
	i := p.bucketLocked(time.Now())
	if p.inFlight >= p.capacity {
		p.refused[i]++
		p.mu.Unlock()
		w.Header().Set("Retry-After", "1")
		http.Error(w, "over capacity", http.StatusTooManyRequests)
		return
	}
	p.inFlight++
	p.peak[i] = max(p.peak[i], p.inFlight)
	lat := capacityLatencyAt(p.inFlight, p.capacity)
	p.mu.Unlock()
	t := time.NewTimer(lat)
	select {
	case <-t.C:
	case <-r.Context().Done():
		t.Stop()
	}
	p.mu.Lock()
	p.inFlight--
	p.ok[p.bucketLocked(time.Now())]++
	p.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"id":"ok"}`))
}

func (p *capacityProvider) setCapacity(c int) {
	p.mu.Lock()
	p.capacity = c
	p.mu.Unlock()
}

// counts returns copies of the per-bucket counts of the first n buckets.
func (p *capacityProvider) counts(n int) (ok, refused, peak []int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.bucketLocked(p.start.Add(time.Duration(n) * capacityBucket))
	return append([]int(nil), p.ok[:n]...), append([]int(nil), p.refused[:n]...), append([]int(nil), p.peak[:n]...)
}

// capacityRun is one run of the phase.
type capacityRun struct {
	suffix   string // of the figures' names
	conc     string // the account's concurrency: "auto" or a number
	replicas int    // dispatcher replicas
	// target: the provider's target has "concurrency: auto", learned over
	// every replica, and the backlog is spread over capacityAccounts
	// accounts of a fixed concurrency (conc) that share it.
	target bool
}

// capacityAccounts is how many accounts share the provider in a target
// run.
const capacityAccounts = 4

// Capacity runs the phase and prints capacity_goodput_ratio,
// capacity_429_ratio and capacity_adapt_s for concurrency: auto, then the
// same for fixed limits too high and too low, and for auto on three
// dispatcher replicas (in this process, each on its own connection).
func Capacity(ctx context.Context, sz Sizes, r Report) error {
	runs := []capacityRun{
		{suffix: "", conc: "auto", replicas: 1},
		{suffix: "_fixed_" + strconv.Itoa(capacityTooHigh), conc: strconv.Itoa(capacityTooHigh), replicas: 1},
		{suffix: "_fixed_" + strconv.Itoa(capacityTooLow), conc: strconv.Itoa(capacityTooLow), replicas: 1},
		{suffix: "_replicas_3", conc: "auto", replicas: 3},
		{suffix: "_target_auto_replicas_3", conc: "32", replicas: 3, target: true},
	}
	for _, run := range runs {
		if err := capacityOnce(ctx, sz, r, run); err != nil {
			return fmt.Errorf("capacity%s: %w", run.suffix, err)
		}
	}
	return nil
}

// capacityConfig is run's config on the NATS server at natsURL and the
// accounts it loads. The breaker is out of the way: the limit is what is
// measured, and 429s are transient failures it would count.
func capacityConfig(natsURL, providerURL string, run capacityRun) (y string, accounts []string) {
	y = configYAML(natsURL, `
accounts:
  "*": {concurrency: 8, breaker: {failures: 1000000}}
  capacity: {concurrency: %s}
targets:
  provider: {url: %q, timeout: 5s%s}
kinds:
  order.create: {target: provider, attempts: 100, backoff: {initial: 1s, multiplier: 1, jitter: 0}}
`, run.conc, providerURL+"/api/{{.Kind}}", map[bool]string{true: ", concurrency: auto, concurrency_max: 100"}[run.target])
	if !run.target {
		return y, []string{"capacity"}
	}
	for i := range capacityAccounts {
		a := "capacity-" + strconv.Itoa(i)
		accounts = append(accounts, a)
		y = strings.Replace(y, "  capacity: {", "  "+a+": {concurrency: "+run.conc+"}\n  capacity: {", 1)
	}
	return y, accounts
}

func capacityOnce(ctx context.Context, sz Sizes, r Report, run capacityRun) error {
	prov, err := startCapacityProvider()
	if err != nil {
		return err
	}
	defer prov.srv.Close()
	var (
		cfg      *config.Config
		accounts []string
	)
	srv, tz, stop, err := startPhase(ctx, "tenaz-bench-capacity-*", false, func(url string) (*config.Config, error) {
		y, a := capacityConfig(url, prov.url, run)
		c, err := parseConfig(y)
		cfg, accounts = c, a
		return c, err
	})
	if err != nil {
		return err
	}
	defer stop(context.WithoutCancel(ctx))
	for i := 2; i <= run.replicas; i++ {
		nc, err := nats.Connect(srv.ClientURL())
		if err != nil {
			return err
		}
		defer nc.Close()
		d, err := dispatcher.New(dispatcher.Options{Conn: nc, Config: cfg, Instance: fmt.Sprintf("capacity-%d", i)})
		if err != nil {
			return err
		}
		if err := d.Start(ctx); err != nil {
			return err
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			_ = d.Stop(sctx)
		}()
	}

	for i := range sz.CapacityBacklog {
		m := nats.NewMsg("tenaz.intake." + accounts[i%len(accounts)] + ".order.create")
		m.Data = []byte(`{"order_id":"o","total":1990}`)
		m.Header.Set("Idempotency-Key", "c-"+strconv.Itoa(i))
		if _, err := tz.js.PublishMsgAsync(m); err != nil {
			return err
		}
	}
	select {
	case <-tz.js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		return fmt.Errorf("the backlog's publish did not complete")
	}
	select {
	case <-prov.first:
	case <-time.After(time.Minute):
		return fmt.Errorf("no call reached the provider")
	case <-ctx.Done():
		return ctx.Err()
	}
	half := sz.CapacityFor / 2
	debug := os.Getenv("BENCH_DEBUG") != ""
	for _, step := range []struct {
		at time.Duration
		do func()
	}{{half, func() { prov.setCapacity(capacityLow) }}, {sz.CapacityFor, func() {}}} {
		select {
		case <-time.After(time.Until(prov.start.Add(step.at))):
		case <-ctx.Done():
			return ctx.Err()
		}
		step.do()
	}
	n := int(sz.CapacityFor / capacityBucket)
	ok, refused, peak := prov.counts(n)
	if debug {
		for i := range n {
			fmt.Fprintf(os.Stderr, "capacity%s t=%5.1fs ok=%3d 429=%4d peak_in_flight=%3d\n", run.suffix, (time.Duration(i) * capacityBucket).Seconds(), ok[i], refused[i], peak[i])
		}
	}
	f := capacityFigures(ok, refused, int(half/capacityBucket), int(sz.CapacityWarmup/capacityBucket))
	r.Figure("capacity_goodput_ratio"+run.suffix, f.goodput, "ratio")
	r.Figure("capacity_429_ratio"+run.suffix, f.refused, "ratio")
	r.Figure("capacity_adapt_s"+run.suffix, f.adapt, "s")
	r.Figure("capacity_learn_s"+run.suffix, f.learn, "s")
	if !f.settled {
		fmt.Fprintf(r.W, "# capacity%s: did not settle at the halved capacity by the end of the run (capacity_adapt_s is the rest of the run)\n", run.suffix)
	}
	return nil
}

type capacityResult struct {
	goodput, refused, adapt, learn float64
	settled                        bool
}

// capacityFigures reads the per-bucket counts of a run whose capacity
// halved at bucket half: the goodput over the run after warm buckets (the
// first, while the limit is learned from its start) as a fraction of the
// provider's best; the 429s of the whole run as a fraction of its calls;
// and the time from the halving to the first capacitySpan that serves at
// least 90% of the halved capacity with at most 2% of its calls refused,
// and after which at most 2% of the calls are refused. learn is the
// time from the first call to the first capacitySpan serving at least 90%
// of the first capacity (the whole first half when none does).
func capacityFigures(ok, refused []int, half, warm int) capacityResult {
	per := capacityBucket.Seconds()
	rate := func(i int) float64 {
		if i < half {
			return capacityRate(capacityHigh) * per
		}
		return capacityRate(capacityLow) * per
	}
	var res capacityResult
	var served, best float64
	var calls, refusals int
	for i := range ok {
		if i >= warm {
			served += float64(ok[i])
			best += rate(i)
		}
		calls += ok[i] + refused[i]
		refusals += refused[i]
	}
	res.goodput = served / best
	if calls > 0 {
		res.refused = float64(refusals) / float64(calls)
	}
	span := int(capacitySpan / capacityBucket)
	sum := func(s []int, from, to int) (n int) {
		for _, v := range s[from:to] {
			n += v
		}
		return n
	}
	res.learn = float64(half) * per
	for i := 0; i+span <= half; i++ {
		if float64(sum(ok, i, i+span)) >= 0.9*capacityRate(capacityHigh)*capacitySpan.Seconds() {
			res.learn = float64(i) * per
			break
		}
	}
	res.adapt = float64(len(ok)-half) * per
	for i := half; i+span <= len(ok); i++ {
		o, x := sum(ok, i, i+span), sum(refused, i, i+span)
		ro, rx := sum(ok, i, len(ok)), sum(refused, i, len(ok))
		if float64(o) >= 0.9*capacityRate(capacityLow)*capacitySpan.Seconds() &&
			float64(x) <= 0.02*float64(o+x) && float64(rx) <= 0.02*float64(ro+rx) {
			res.adapt, res.settled = float64(i-half)*per, true
			break
		}
	}
	return res
}
