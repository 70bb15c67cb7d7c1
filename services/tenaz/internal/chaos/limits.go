package chaos

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/tenaz/tenaz/pkg/config"
)

// limits is one account's limits as the run's config sets them.
type limits struct {
	concurrency int
	rate        float64 // calls per second; 0: unlimited
}

// runConfig parses the run's config, as the services do.
func runConfig(yaml string) (*config.Config, error) {
	cfg, err := config.Parse([]byte(yaml), func(k string) (string, bool) { return "chaos", k == envInstance })
	if err != nil {
		return nil, fmt.Errorf("chaos: the run's config: %w", err)
	}
	return cfg, nil
}

// accountLimits is every account's limits in cfg, read the way the
// dispatcher does (an account inherits what it does not set from "*").
func accountLimits(cfg *config.Config, accounts []string) map[string]limits {
	out := make(map[string]limits, len(accounts))
	for _, a := range accounts {
		acct := cfg.Account(a)
		out[a] = limits{concurrency: acct.MaxConcurrency(), rate: acct.Rate.PerSecond}
	}
	return out
}

// targetConcurrency is the concurrency of every target in cfg that sets
// a fixed one.
func targetConcurrency(cfg *config.Config) map[string]int {
	out := map[string]int{}
	for name, t := range cfg.Targets {
		if t.Concurrency > 0 {
			out[name] = int(t.Concurrency)
		}
	}
	return out
}

// goneSlack is how much earlier than the provider saw it a call that ended
// because its caller went away (a client timeout) counts as over: the
// dispatcher frees the call's slot when its client gives up, and its next
// call can reach the provider before the provider has noticed the closed
// connection of the first. A call that is answered ends at the provider
// before its caller sees the answer, so needs none.
const goneSlack = 50 * time.Millisecond

// rateJitter is the calls the rate check allows on top of an account's
// rate in any one second: the limiter spaces the calls' permits 1/rate
// apart, but each call reaches the provider a little after its permit (a
// goroutine scheduled late, a connection dialled), so one second at the
// provider can hold the permits of a little more than a second.
const rateJitter = 1

// accountFigure is what the limit checks measured for one account.
type accountFigure struct {
	account     string
	lim         limits
	calls       int
	peakFlight  int // most calls in flight at once
	peakSecond  int // most calls in any one second
	peakTen     int // most calls in any ten seconds
	owners      int // dispatcher lifetimes that called it
	handovers   int // times the calling process changed
	overlapping int // calls made while another process had one of the account in flight
}

// limitReport is what the limit checks found.
type limitReport struct {
	accounts           []accountFigure // sorted by account
	overConcurrency    int             // calls that arrived while the account's concurrency was taken: must be 0
	overRate           int             // calls that arrived in a second already holding rate + slack: must be 0
	overlapping        int             // calls made while another process had one of the account in flight
	concurrencyDetails []string        // the first violations of each
	rateDetails        []string
}

// checkLimits measures, at the providers, every account's calls in flight
// and per second against its concurrency and rate. Both count every
// delivery of the account to any target, over all dispatchers: one replica
// owns an account at a time (pkg/owner), and the lease that says so is
// given to the next only after its owner's last call returned, so the
// concurrency has no handover slack. Nor has the rate: a new owner's
// first call waits an interval after it took the lease (the dispatcher's
// pacer.takenOver).
func checkLimits(calls []callRec, lim map[string]limits, now time.Time) limitReport {
	byAccount := map[string][]callRec{}
	for _, c := range calls {
		byAccount[c.account] = append(byAccount[c.account], c)
	}
	var rep limitReport
	names := make([]string, 0, len(lim))
	for a := range lim {
		names = append(names, a)
	}
	slices.Sort(names)
	for _, a := range names {
		cs := byAccount[a]
		slices.SortStableFunc(cs, func(x, y callRec) int { return x.at.Compare(y.at) })
		f := accountFigure{account: a, lim: lim[a], calls: len(cs)}
		var over int
		f.peakFlight, f.overlapping, over = inFlight(cs, a, lim[a].concurrency, now, &rep.concurrencyDetails)
		rep.overlapping += f.overlapping
		rep.overConcurrency += over
		f.peakSecond, over = perWindow(cs, time.Second, lim[a].rate, &rep.rateDetails)
		rep.overRate += over
		f.peakTen, _ = perWindow(cs, 10*time.Second, 0, nil)
		seen := map[string]bool{}
		for i, c := range cs {
			seen[c.sender] = true
			if i > 0 && c.sender != cs[i-1].sender {
				f.handovers++
			}
		}
		f.owners = len(seen)
		rep.accounts = append(rep.accounts, f)
	}
	return rep
}

// inFlight returns the most calls of cs (sorted by arrival) in flight at
// once, how many calls arrived while another process had one of cs in
// flight, and how many arrived while concurrency others were in flight
// (the first of them described in details, under name).
func inFlight(cs []callRec, name string, concurrency int, now time.Time, details *[]string) (peak, overlapping, over int) {
	type edge struct {
		at    time.Time
		start bool
		c     int // index in cs
	}
	edges := make([]edge, 0, 2*len(cs))
	for i, c := range cs {
		end := c.end
		switch {
		case end.IsZero():
			end = now // still in flight
		case c.gone:
			end = end.Add(-goneSlack)
		}
		if !end.After(c.at) {
			// In flight for an instant at least: its end must come after
			// its own start (at one instant, ends come first).
			end = c.at.Add(time.Nanosecond)
		}
		edges = append(edges, edge{at: c.at, start: true, c: i}, edge{at: end, c: i})
	}
	// At one instant, ends before starts: a call that ended as another
	// began did not overlap it.
	slices.SortStableFunc(edges, func(x, y edge) int {
		if d := x.at.Compare(y.at); d != 0 {
			return d
		}
		switch {
		case x.start == y.start:
			return 0
		case x.start:
			return 1
		}
		return -1
	})
	open := map[int]bool{}
	bySender := map[string]int{}
	reported := time.Time{}
	for _, e := range edges {
		c := cs[e.c]
		if !e.start {
			delete(open, e.c)
			bySender[c.sender]--
			continue
		}
		if len(open) > bySender[c.sender] {
			overlapping++
		}
		open[e.c] = true
		bySender[c.sender]++
		peak = max(peak, len(open))
		if len(open) <= concurrency {
			continue
		}
		over++
		if e.at.Sub(reported) > time.Second && len(*details) < 20 {
			reported = e.at
			var who []string
			for i := range open {
				o := cs[i]
				who = append(who, fmt.Sprintf("%s %s from %s %s–%s", o.target, o.eventID, o.sender,
					o.at.Format("15:04:05.000"), o.end.Format("15:04:05.000")))
			}
			slices.Sort(who)
			*details = append(*details, fmt.Sprintf("%s: %d calls in flight at %s, concurrency %d: %v", name, len(open),
				e.at.Format("15:04:05.000"), concurrency, who))
		}
	}
	return peak, overlapping, over
}

// targetFigure is what the limit checks measured for one target.
type targetFigure struct {
	target       string
	concurrency  int
	calls, polls int
	peakFlight   int // most calls and polls in flight at once
}

// targetReport is what the target limit check found.
type targetReport struct {
	targets         []targetFigure // sorted by target
	overConcurrency int            // calls and polls that arrived while the target's concurrency was taken: must be 0
	details         []string
}

// checkTargets measures, at the providers, every limited target's calls
// and polls in flight together against its concurrency, over every
// account, dispatcher and poller. A replica's slots count until it is
// taken for dead, and a killed one's calls end at once, so this has no
// handover slack either.
func checkTargets(calls, polls []callRec, concurrency map[string]int, now time.Time) targetReport {
	byTarget := map[string][]callRec{}
	for _, c := range slices.Concat(calls, polls) {
		byTarget[c.target] = append(byTarget[c.target], c)
	}
	var rep targetReport
	for _, t := range slices.Sorted(maps.Keys(concurrency)) {
		cs := byTarget[t]
		slices.SortStableFunc(cs, func(x, y callRec) int { return x.at.Compare(y.at) })
		f := targetFigure{target: t, concurrency: concurrency[t]}
		for _, c := range cs {
			if c.poll {
				f.polls++
			} else {
				f.calls++
			}
		}
		var over int
		f.peakFlight, _, over = inFlight(cs, "target "+t, concurrency[t], now, &rep.details)
		rep.overConcurrency += over
		rep.targets = append(rep.targets, f)
	}
	return rep
}

// perWindow returns the most calls of cs (sorted by arrival) that arrived
// within any window of length d and, with a rate, how many arrived when
// the window of length d they close holds more than the rate × d (rounded
// up) + rateJitter, from however many processes; the first of them are
// described in details.
func perWindow(cs []callRec, d time.Duration, rate float64, details *[]string) (peak, over int) {
	j := 0
	senders := map[string]int{}
	allowed := int(math.Ceil(rate*d.Seconds())) + rateJitter
	reported := time.Time{}
	for i, c := range cs {
		senders[c.sender]++
		for c.at.Sub(cs[j].at) >= d {
			if senders[cs[j].sender]--; senders[cs[j].sender] == 0 {
				delete(senders, cs[j].sender)
			}
			j++
		}
		n := i - j + 1
		peak = max(peak, n)
		if rate <= 0 || n <= allowed {
			continue
		}
		over++
		if cs[j].at.Sub(reported) >= d && len(*details) < 20 {
			reported = c.at
			*details = append(*details, fmt.Sprintf("%s: %d calls in %s from %s to %s, rate %g/s, %d processes (%s)", c.account, n, d,
				cs[j].at.Format("15:04:05.000"), c.at.Format("15:04:05.000"), rate, len(senders), counts(senders)))
		}
	}
	return peak, over
}
