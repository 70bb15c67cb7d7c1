package chaos

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tenaz/tenaz/pkg/provider"
)

// SoakOptions size a soak.
type SoakOptions struct {
	// Duration is how long the load runs (make soak: SOAK_DURATION,
	// 30m by default; CI: 3m).
	Duration time.Duration
	// Rate is events per second. Defaults to 20.
	Rate float64
	// Accounts the events are spread over. Defaults to 8.
	Accounts int
	// Seed, Race and Keep are as in Options.
	Seed       uint64
	Race, Keep bool
}

// Growth bounds of a service process after warm-up: the median of the
// last third of the samples against the median of the first third.
const (
	goroutineGrowth = 0.25 // +25 %…
	goroutineSlack  = 25   // …+ 25 goroutines
	rssGrowth       = 0.50 // +50 %…
	rssSlackMB      = 24.0 // …+ 24 MB
)

// sample is one reading of a process.
type sample struct {
	rssMB      float64
	goroutines float64 // -1: not known (nats-server)
}

// Soak runs the services at a steady rate for o.Duration without faults
// of its own (the providers still fail now and then), samples the
// resident memory and goroutines of every process, prints them as a
// table, and fails if a service grew beyond the bounds after warm-up
// (the first fifth of the run, at least 30s), or if an accepted event did
// not end in a terminal state.
func Soak(ctx context.Context, o SoakOptions, out io.Writer) (err error) {
	if o.Duration < time.Minute {
		return fmt.Errorf("soak: duration must be at least 1m, got %s", o.Duration)
	}
	if o.Rate <= 0 {
		o.Rate = 20
	}
	if o.Accounts <= 0 {
		o.Accounts = 8
	}
	dir, done, err := workDir("tenaz-soak-*", o.Keep, out, "")
	if err != nil {
		return err
	}
	defer func() { done(err) }()
	began := time.Now()
	fmt.Fprintf(out, "# tenaz soak: %s at %.0f events/s over %d accounts, seed %d; work directory %s\n", o.Duration, o.Rate, o.Accounts, o.Seed, dir)
	c, err := startCluster(ctx, clusterOptions{dir: dir, race: o.Race, dispatchers: 1, pollers: 1, faults: soakFaults(),
		callbackFaults: provider.CallbackFaults{DuplicateRate: 0.1}, seed: o.Seed, cooldown: 10 * time.Second,
		callbackSLA: 30 * time.Second, pollSLA: 60 * time.Second, logLevel: "warn", out: out})
	if err != nil {
		return err
	}
	defer c.stop()
	accounts := make([]string, o.Accounts)
	for i := range accounts {
		accounts[i] = fmt.Sprintf("soak-%02d", i+1)
	}
	n := int(o.Rate * o.Duration.Seconds())
	jobs := plan(n, accounts, rand.New(rand.NewPCG(o.Seed, 1)))
	l := newLoader(c.ingest, c.js)
	every := max(10*time.Second, o.Duration/40)
	warm := max(30*time.Second, o.Duration/5)
	procs := c.all()
	series := make([][]sample, len(procs))
	var at []time.Duration

	fmt.Fprintf(out, "\n%7s", "t")
	for _, p := range procs {
		fmt.Fprintf(out, " %22s", p.name+" MB/gor")
	}
	fmt.Fprintln(out)
	sctx, stopSampling := context.WithCancel(ctx)
	sdone := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(sdone)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-sctx.Done():
				return
			case <-t.C:
			}
			at = append(at, time.Since(start))
			fmt.Fprintf(out, "%6ds", int(time.Since(start).Seconds()))
			for i, p := range procs {
				s := read(p)
				series[i] = append(series[i], s)
				g := "-"
				if s.goroutines >= 0 {
					g = strconv.Itoa(int(s.goroutines))
				}
				fmt.Fprintf(out, " %22s", fmt.Sprintf("%.1f/%s", s.rssMB, g))
			}
			fmt.Fprintln(out)
		}
	}()
	l.run(ctx, ctx, jobs, o.Duration, 32)
	if d := time.Until(start.Add(o.Duration)); d > 0 {
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
	stopSampling()
	<-sdone

	evs := make([]*ev, 0, n)
	for _, j := range jobs {
		evs = append(evs, j...)
	}
	st := settle(ctx, out, c, evs, time.Now().Add(2*time.Minute))
	r := &report{w: out}
	r.section("soak: accounting")
	recs, rerr := records(ctx, c.js)
	accepted, open := 0, 0
	for _, e := range evs {
		if !e.accepted {
			continue
		}
		accepted++
		if rec, ok := recs[e.id]; !ok || !finished(rec.Status) {
			open++
		}
	}
	r.figure("events accepted", accepted)
	if rerr != nil {
		r.invariant("the state bucket could be read ("+rerr.Error()+")", 1)
	}
	r.invariant("accepted events not in a terminal state", open)
	r.invariant("submissions never accepted", len(evs)-accepted)
	dup := 0
	for _, t := range targets {
		dup += len(c.fleet.prov[t].DuplicateEffects())
	}
	r.invariant("idempotency keys applied more than once", dup)
	_ = st

	r.section(fmt.Sprintf("soak: growth after warm-up (%s); bound: goroutines +%.0f%% +%d, RSS +%.0f%% +%.0f MB, last third's median vs the first third's",
		warm, goroutineGrowth*100, goroutineSlack, rssGrowth*100, rssSlackMB))
	for i, p := range procs {
		var post []sample
		var ts []float64
		for k, s := range series[i] {
			if at[k] >= warm {
				post = append(post, s)
				ts = append(ts, at[k].Hours())
			}
		}
		if len(post) < 3 {
			r.invariant(p.name+": samples after warm-up (need 3)", 1)
			continue
		}
		third := max(1, len(post)/3)
		rss := func(s sample) float64 { return s.rssMB }
		gor := func(s sample) float64 { return s.goroutines }
		r0, r1 := median(post[:third], rss), median(post[len(post)-third:], rss)
		g0, g1 := median(post[:third], gor), median(post[len(post)-third:], gor)
		line := fmt.Sprintf("%s: RSS %.1f → %.1f MB (%+.1f MB/h)", p.name, r0, r1, slope(ts, post, rss))
		if g0 >= 0 {
			line += fmt.Sprintf(", goroutines %.0f → %.0f (%+.0f/h)", g0, g1, slope(ts, post, gor))
		}
		if p == c.nats {
			// The server's memory follows what it stores (every record
			// is kept for the retention): reported, not bounded.
			r.figure(line+" (not bounded)", "-")
			continue
		}
		grew := 0
		if r1 > r0*(1+rssGrowth)+rssSlackMB {
			grew++
		}
		if g1 > g0*(1+goroutineGrowth)+goroutineSlack {
			grew++
		}
		r.invariant(line, grew)
	}
	fmt.Fprintf(out, "\n# soak took %s\n", time.Since(began).Round(time.Second))
	if len(r.violations) > 0 {
		return fmt.Errorf("soak: %d invariant(s) violated: %s", len(r.violations), strings.Join(r.violations, "; "))
	}
	fmt.Fprintln(out, "# flat: every service stayed within the bounds")
	return nil
}

// read samples a process: RSS from /proc, goroutines from its /metrics.
func read(p *proc) sample {
	s := sample{rssMB: rssMB(p.pid()), goroutines: -1}
	if p.addr == "" {
		return s
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.addr+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return s
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
				s.goroutines = f
			}
		}
	}
	return s
}

func median(ss []sample, f func(sample) float64) float64 {
	v := make([]float64, len(ss))
	for i, s := range ss {
		v[i] = f(s)
	}
	slices.Sort(v)
	return v[len(v)/2]
}

// slope is the least-squares slope of f over the hours ts.
func slope(ts []float64, ss []sample, f func(sample) float64) float64 {
	n := float64(len(ts))
	var sx, sy, sxx, sxy float64
	for i, t := range ts {
		y := f(ss[i])
		sx += t
		sy += y
		sxx += t * t
		sxy += t * y
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return 0
	}
	return (n*sxy - sx*sy) / d
}
