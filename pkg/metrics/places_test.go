package metrics_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/metrics"
	"github.com/tenaz/tenaz/pkg/outcome"
	"github.com/tenaz/tenaz/pkg/state"
)

// clock is a settable clock for the ranking of the account places.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *clock) Advance(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// setupPlaces returns a Set configured with o on a fresh registry, and
// its clock.
func setupPlaces(t *testing.T, o metrics.AccountOptions) (*metrics.Set, *prometheus.Registry, *clock) {
	t.Helper()
	clk := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	reg := prometheus.NewRegistry()
	s, err := metrics.NewWithClock(reg, clk.Now)
	if err != nil {
		t.Fatalf("NewWithClock: %v", err)
	}
	if err := s.Configure(metrics.Options{Accounts: o}); err != nil {
		t.Fatalf("Configure: %v", err)
	}
	return s, reg, clk
}

// scrape reads every series of reg: by metric name, the value of each
// label set (a histogram's count).
func scrape(t *testing.T, reg *prometheus.Registry) map[string]map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	out := map[string]map[string]float64{}
	for _, mf := range mfs {
		by := map[string]float64{}
		for _, m := range mf.GetMetric() {
			var kv []string
			for _, l := range m.GetLabel() {
				kv = append(kv, l.GetName()+"="+l.GetValue())
			}
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
			by[strings.Join(kv, ",")] = v
		}
		out[mf.GetName()] = by
	}
	return out
}

// accountsOf lists the account label values of a metric's series.
func accountsOf(series map[string]float64) []string {
	seen := map[string]bool{}
	for k := range series {
		for _, kv := range strings.Split(k, ",") {
			if a, ok := strings.CutPrefix(kv, "account="); ok {
				seen[a] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

func total(series map[string]float64) float64 {
	n := 0.0
	for _, v := range series {
		n += v
	}
	return n
}

// The rule of the places, minute by minute with two places and one
// allowed account: the first accounts seen take the free places; an
// account takes the place of the least busy holder once it is more than
// twice as busy (decayed recordings over about 10 minutes, ranked once a
// minute); the holder that lost it keeps its series, unchanged, for keep
// (its new recordings count as other), gets them back as they were if it
// wins a place again meanwhile, and loses them after keep. At every
// minute the series add up to every recording but those of removed
// series, which had not changed for keep.
func TestAccountPlaces(t *testing.T) {
	s, reg, clk := setupPlaces(t, metrics.AccountOptions{Top: 2, Allow: []string{"vip"}, Keep: 10 * time.Minute})
	traffic := func(minute int) map[string]int {
		switch {
		case minute == 0:
			return map[string]int{"a": 1, "b": 1, "c": 1, "vip": 1}
		case minute < 3:
			return map[string]int{"a": 10, "b": 1, "c": 20}
		}
		return map[string]int{"a": 10, "b": 100, "c": 20}
	}
	recorded, removed := 0.0, 0.0
	var aFrozen float64
	for minute := range 16 {
		if minute > 0 {
			clk.Advance(time.Minute)
		}
		tr := traffic(minute)
		for _, a := range slices.Sorted(maps.Keys(tr)) {
			for range tr[a] {
				s.Accepted(a, "order.create")
				recorded++
			}
		}
		acc := scrape(t, reg)[metrics.NameAccepted]
		v := func(account string) float64 { return acc["account="+account+",kind=order.create"] }
		got := accountsOf(acc)
		var want []string
		switch {
		case minute < 2: // c came third: other
			want = []string{"a", "b", "other", "vip"}
		case minute < 4: // c, 20 a minute, took b's place (1 a minute); b is kept
			want = []string{"a", "b", "c", "other", "vip"}
		case minute < 14: // b, now 100 a minute, took a's place (10 a minute); a is kept
			want = []string{"a", "b", "c", "other", "vip"}
		default: // a was kept for 10 minutes: its series are gone
			want = []string{"b", "c", "other", "vip"}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("minute %d: accounts with series %v, want %v", minute, got, want)
		}
		switch minute {
		case 1:
			if v("other") != 21 || v("b") != 2 || v("a") != 11 || v("vip") != 1 {
				t.Fatalf("minute 1: want other 21 (c), a 11, b 2, vip 1; got %v", acc)
			}
		case 2:
			if v("c") != 20 || v("b") != 2 || v("other") != 22 {
				t.Fatalf("minute 2: want c 20 (from its place on), b kept at 2, other 22 (c's 21 and b's 1); got %v", acc)
			}
		case 3:
			if v("b") != 2 || v("other") != 122 {
				t.Fatalf("minute 3: want b kept at 2 and its 100 in other (122); got %v", acc)
			}
		case 4:
			if v("b") != 102 || v("other") != 122+10 {
				t.Fatalf("minute 4: want b back on its series (2+100) and a's 10 in other (132); got %v", acc)
			}
			aFrozen = v("a")
		case 13:
			if v("a") != aFrozen {
				t.Fatalf("minute 13: a's kept series changed: %v, was %v", v("a"), aFrozen)
			}
		case 14:
			removed = aFrozen
		}
		if sum := total(acc); sum != recorded-removed {
			t.Fatalf("minute %d: the series add up to %v, want %v (every recording, less the %v of removed series)", minute, sum, recorded-removed, removed)
		}
	}
}

// top: 0 gives every account but the allowed ones to other; invalid names
// stay invalid; gauges fold into other by sum, and breakers by count.
func TestAccountPlacesAllowOnly(t *testing.T) {
	s, reg, _ := setupPlaces(t, metrics.AccountOptions{Top: 0, Allow: []string{"acme"}})
	for _, a := range []string{"acme", "beta", "gamma", "not an account"} {
		s.Accepted(a, "k")
		s.BreakerState(a, "erp", "open")
		s.ConsumerBacklog(a, 2, 1)
	}
	s.BreakerState("delta", "erp", "closed")
	s.SetEventsByState(map[metrics.EventsKey]int{
		{State: state.Pending, Account: "acme", Kind: "k"}:  1,
		{State: state.Pending, Account: "beta", Kind: "k"}:  2,
		{State: state.Pending, Account: "gamma", Kind: "k"}: 3,
	})
	compare(t, reg, `
		tenaz_events_accepted_total{account="acme",kind="k"} 1
		tenaz_events_accepted_total{account="other",kind="k"} 2
		tenaz_events_accepted_total{account="invalid",kind="k"} 1
		tenaz_breaker_state{account="acme",state="closed",target="erp"} 0
		tenaz_breaker_state{account="acme",state="half_open",target="erp"} 0
		tenaz_breaker_state{account="acme",state="open",target="erp"} 1
		tenaz_breaker_state{account="other",state="closed",target="erp"} 1
		tenaz_breaker_state{account="other",state="half_open",target="erp"} 0
		tenaz_breaker_state{account="other",state="open",target="erp"} 2
		tenaz_breaker_state{account="invalid",state="closed",target="erp"} 0
		tenaz_breaker_state{account="invalid",state="half_open",target="erp"} 0
		tenaz_breaker_state{account="invalid",state="open",target="erp"} 1
		tenaz_consumer_pending_messages{account="acme"} 2
		tenaz_consumer_pending_messages{account="other"} 4
		tenaz_consumer_pending_messages{account="invalid"} 2
		tenaz_events{account="acme",kind="k",state="pending"} 1
		tenaz_events{account="other",kind="k",state="pending"} 5
	`, metrics.NameAccepted, metrics.NameBreakerState, metrics.NamePending, metrics.NameEvents)
}

// Configure refuses options out of range, and configuring the options a
// Set has keeps what it recorded.
func TestConfigure(t *testing.T) {
	s, reg := setup(t)
	for _, o := range []metrics.Options{
		{Accounts: metrics.AccountOptions{Top: -1}},
		{Accounts: metrics.AccountOptions{Top: metrics.MaxTopAccounts + 1}},
		{Accounts: metrics.AccountOptions{Top: 1, Allow: []string{"no spaces"}}},
		{Accounts: metrics.AccountOptions{Top: 1, Keep: -time.Second}},
		{NativeHistograms: metrics.NativeHistogramOptions{Enabled: true, BucketFactor: 1}},
		{NativeHistograms: metrics.NativeHistogramOptions{Enabled: true, MaxBuckets: -1}},
	} {
		if err := s.Configure(o); err == nil {
			t.Errorf("Configure(%+v): want an error", o)
		}
	}
	s.Accepted("acme", "k")
	if err := s.Configure(metrics.DefaultOptions()); err != nil {
		t.Fatal(err)
	}
	compare(t, reg, `tenaz_events_accepted_total{account="acme",kind="k"} 1`, metrics.NameAccepted)
}

// With 10,000 accounts, each replica's series stay bounded by the places
// (top 100, as many kept, one allowed account, other), whatever the
// traffic does: here a skewed traffic whose busiest accounts change
// halfway. Scraped every 30 s as Prometheus would, the counters and
// histograms lose and invent no count (every increase of every series,
// and every new series, add up to what was recorded), no counter goes
// down, the gauges add up to their true totals and the breakers to the
// count of each state. The places follow the traffic: at the end the
// busiest accounts of the last minutes hold them.
func TestAccountLabelAt10000Accounts(t *testing.T) {
	const (
		accounts = 10_000
		top      = 100
		ticks    = 80 // 30 s each: 40 minutes
		perTick  = 2000
	)
	s, reg, clk := setupPlaces(t, metrics.AccountOptions{Top: top, Allow: []string{"acct-07777"}, Keep: 5 * time.Minute})
	name := func(i int) string { return fmt.Sprintf("acct-%05d", i) }
	rng := rand.New(rand.NewPCG(17, 17))
	zipf := rand.NewZipf(rng, 1.2, 1, accounts-1)
	before, after := rng.Perm(accounts), rng.Perm(accounts) // the busiest accounts, before and after the change
	kinds := []string{"order.create", "invoice.issue"}
	classes := []outcome.Class{outcome.ClassSuccess, outcome.ClassTransient, outcome.ClassTimeout}
	states := metrics.BreakerStates

	// What a test source of tenaz_account_* reports: monotone throttle counts.
	var mu sync.Mutex
	throttled := make([]uint64, accounts)
	defer s.WatchAccounts(func() []metrics.AccountLoad {
		mu.Lock()
		defer mu.Unlock()
		out := make([]metrics.AccountLoad, accounts)
		for i := range out {
			out[i] = metrics.AccountLoad{Account: name(i), Instance: "d1", Concurrency: 4, Rate: 1, InFlight: i % 3,
				Throttled: map[string]uint64{metrics.ThrottleRate: throttled[i]}}
		}
		return out
	})()

	counters := []string{metrics.NameAccepted, metrics.NameAttempts, metrics.NameWait, metrics.NameAccountThrottled}
	truth := map[string]float64{}
	seen := map[string]float64{} // what Prometheus would have counted: increases and new series
	prev := map[string]map[string]float64{}
	breakerOf := make([]string, accounts)
	var recent map[int]int // recordings per account in the last 5 minutes
	for tick := range ticks {
		if tick == ticks-10 {
			recent = map[int]int{}
		}
		record := func(i int) {
			a, k := name(i), kinds[i%2]
			s.Accepted(a, k)
			s.Attempt(a, k, classes[(i+tick)%3])
			s.WaitTime(a, k, time.Duration(i%7)*time.Second)
			truth[metrics.NameAccepted]++
			truth[metrics.NameAttempts]++
			truth[metrics.NameWait]++
			if recent != nil {
				recent[i]++
			}
		}
		if tick == 0 {
			for i := range accounts {
				record(i)
			}
		}
		order := before
		if tick >= ticks/2 {
			order = after
		}
		for j := range perTick { // over the tick's 30 s: rankings fall between two recordings
			if j%(perTick/10) == 0 {
				clk.Advance(3 * time.Second)
			}
			record(order[zipf.Uint64()])
		}
		mu.Lock()
		for range 500 {
			i := order[zipf.Uint64()]
			throttled[i]++
			truth[metrics.NameAccountThrottled]++
		}
		mu.Unlock()
		events := make(map[metrics.EventsKey]int, accounts)
		pending, breakers := 0.0, map[string]float64{}
		for i := range accounts {
			events[metrics.EventsKey{State: state.Pending, Account: name(i), Kind: kinds[i%2]}] = i%5 + tick
			s.ConsumerBacklog(name(i), i%4+tick, 0)
			pending += float64(i%4 + tick)
			if breakerOf[i] == "" || rng.IntN(10) == 0 {
				breakerOf[i] = states[rng.IntN(len(states))]
				s.BreakerState(name(i), "erp", breakerOf[i])
			}
			breakers[breakerOf[i]]++
		}
		s.SetEventsByState(events)
		wantEvents := 0.0
		for _, n := range events {
			wantEvents += float64(n)
		}

		got := scrape(t, reg)
		for _, m := range []string{metrics.NameAccepted, metrics.NameAttempts, metrics.NameWait, metrics.NameEvents,
			metrics.NamePending, metrics.NameBreakerState, metrics.NameAccountThrottled, metrics.NameAccountInFlight, metrics.NameAccountOwner} {
			if n := len(accountsOf(got[m])); n > 2*top+2 {
				t.Fatalf("tick %d: %s has %d account label values, want at most %d (top, as many kept, the allowed one, other)", tick, m, n, 2*top+2)
			}
		}
		for _, m := range counters {
			for k, v := range got[m] {
				p, ok := prev[m][k]
				switch {
				case !ok:
					seen[m] += v
				case v < p:
					t.Fatalf("tick %d: %s{%s} went down from %v to %v", tick, m, k, p, v)
				default:
					seen[m] += v - p
				}
			}
			if seen[m] != truth[m] {
				t.Fatalf("tick %d: %s: the series' increases add up to %v, %v were recorded", tick, m, seen[m], truth[m])
			}
			prev[m] = got[m]
		}
		if n := total(got[metrics.NameEvents]); n != wantEvents {
			t.Fatalf("tick %d: tenaz_events adds up to %v, want %v", tick, n, wantEvents)
		}
		if n := total(got[metrics.NamePending]); n != pending {
			t.Fatalf("tick %d: the backlog adds up to %v, want %v", tick, n, pending)
		}
		if n := total(got[metrics.NameAccountOwner]); n != accounts {
			t.Fatalf("tick %d: tenaz_account_owner adds up to %v accounts, want %d", tick, n, accounts)
		}
		for _, st := range states {
			n := 0.0
			for k, v := range got[metrics.NameBreakerState] {
				if strings.Contains(k, "state="+st+",") {
					n += v
				}
			}
			if n != breakers[st] {
				t.Fatalf("tick %d: tenaz_breaker_state{state=%q} adds up to %v, %v breakers are %s", tick, st, n, breakers[st], st)
			}
		}
		if tick == ticks-1 {
			for _, m := range []string{metrics.NameAccepted, metrics.NameAttempts, metrics.NameWait, metrics.NameEvents, metrics.NameBreakerState, metrics.NameAccountThrottled} {
				t.Logf("%s: %d series, %d account label values, for %d accounts", m, len(got[m]), len(accountsOf(got[m])), accounts)
			}
		}
	}
	// The 50 busiest accounts of the last 5 minutes hold places.
	busiest := slices.Collect(maps.Keys(recent))
	sort.Slice(busiest, func(i, j int) bool { return recent[busiest[i]] > recent[busiest[j]] })
	placed := accountsOf(prev[metrics.NameAccepted])
	for _, i := range busiest[:50] {
		if !slices.Contains(placed, name(i)) {
			t.Errorf("%s, among the 50 busiest (%d recordings in 5 minutes), has no series of its own", name(i), recent[i])
		}
	}
}

// A config without a metrics section gives what New does (configuring it
// keeps what was recorded); the config's bounds are the package's.
func TestOptionsFromConfig(t *testing.T) {
	cfg, err := config.Parse(nil, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	s, reg := setup(t)
	s.Accepted("acme", "k")
	if err := s.Configure(metrics.OptionsFrom(cfg.Metrics)); err != nil {
		t.Fatal(err)
	}
	compare(t, reg, `tenaz_events_accepted_total{account="acme",kind="k"} 1`, metrics.NameAccepted)
	if config.MaxMetricsTop != metrics.MaxTopAccounts {
		t.Errorf("config.MaxMetricsTop %d, metrics.MaxTopAccounts %d", config.MaxMetricsTop, metrics.MaxTopAccounts)
	}
}

// Recordings from many goroutines while the places are ranked and scraped
// lose no count (run with -race).
func TestAccountPlacesConcurrent(t *testing.T) {
	s, reg, clk := setupPlaces(t, metrics.AccountOptions{Top: 10, Keep: time.Hour})
	var wg sync.WaitGroup
	const workers, each = 8, 2000
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if i%100 == 0 {
					clk.Advance(10 * time.Second)
				}
				s.Accepted(fmt.Sprintf("acct-%d", (w*each+i)%(50+w*i%7)), "k")
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for scraping := true; scraping; {
		select {
		case <-done:
			scraping = false
		default:
			scrape(t, reg)
		}
	}
	if got := total(scrape(t, reg)[metrics.NameAccepted]); got != workers*each {
		t.Fatalf("the series add up to %v, %d were recorded (keep is an hour: nothing was removed)", got, workers*each)
	}
}

// The cost of one recording when 10,000 accounts share 100 places.
func BenchmarkAcceptedAt10000Accounts(b *testing.B) {
	s, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	names := make([]string, 10_000)
	for i := range names {
		names[i] = fmt.Sprintf("acct-%05d", i)
		s.Accepted(names[i], "k")
	}
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		s.Accepted(names[i%len(names)], "k")
		i++
	}
}
