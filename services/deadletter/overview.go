package deadletter

import (
	"cmp"
	"context"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/dead"
	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/pkg/owner"
	"github.com/tenaz/tenaz/pkg/state"
)

// The overview: per account (or for all of them) what flows and what
// waits. Throughput, retry rate and p95 wait over the last half hour come
// from the state buckets' change feed (activity.go); the backlog by state
// from the scan of the state buckets that also counts the retrying and
// scheduled tabs (counts.go), with dead and review counted live by the
// index; breakers, pauses and limits as the accounts page shows them. The
// page polls itself (htmx, every overviewEvery) while it is open.

// overviewEvery is how often an open overview refreshes itself.
const overviewEvery = 5 * time.Second

// overviewRows is how many accounts the overview of every account lists.
const overviewRows = 100

// recentMinutes is the span of the headline figures.
const recentMinutes = 5

// backlogStates are the states the backlog shows, in the order of an
// event's way.
var backlogStates = []state.State{
	state.Scheduled, state.Pending, state.Running, state.Retrying,
	state.AwaitingCallback, state.Polling, state.ManualReview, state.Dead,
}

// figures are the headline numbers of an account (or of all).
type figures struct {
	Throughput float64 // events done per minute, over the last recentMinutes
	Accepted   float64 // events accepted per minute, likewise
	RetryRate  float64 // retries per attempt, in percent, likewise
	Attempts   float64
	P95        string // the p95 wait from due to the first attempt, "–" without one
	Backlog    int    // events not yet done, dead or cancelled
}

// overviewRow is one account in the table of every account.
type overviewRow struct {
	Account string
	figures
	Open   int // breakers not closed
	Paused bool
}

type overviewData struct {
	Account  string // "" for every account
	Accounts []string
	figures
	Rows      []overviewRow // the busiest accounts (when Account is "")
	More      int           // accounts left out of Rows
	Bars      []bar         // the backlog by state
	ScanAt    time.Time
	ScanErr   string
	Sampled   bool
	FeedErr   string
	Took      time.Duration
	Refreshed time.Time
	Every     int // seconds between refreshes
	// The charts.
	ThroughputSVG, RetriesSVG, WaitSVG, BacklogSVG template.HTML
	// The account's breakers, pause and limits (Account set).
	Breakers []ops.BreakerItem
	Limits   limitsRow
	// DeadKept is how many entries the account keeps in DEAD (-1: not
	// read), against Limits.DeadLetters.
	DeadKept int
	DeadFull bool // at its bound: its refusals and dying events wait
	// DeadWaiting is how many of its entries wait for room in DEAD
	// (dead.Writer.Keep; -1: not read).
	DeadWaiting int
	Owner       string // the dispatcher replica holding its lease ("": none)
	Learned     int    // under "auto": the concurrency its owner last learned
	Paused      *ops.AccountPause
	HeldUntil   *time.Time
	// LeftOut says why its stored definition is not in force (config
	// LeftOut): its events wait until it is fixed. "": it is.
	LeftOut string
}

// sum adds up the last k points.
func sum(pts []point, k int, f func(point) float64) float64 {
	t := 0.0
	for _, p := range pts[max(0, len(pts)-k):] {
		t += f(p)
	}
	return t
}

func (s *Service) figuresOf(account string, pts []point, backlog map[state.State]int) figures {
	k := recentMinutes
	f := figures{
		Throughput: sum(pts, k, func(p point) float64 { return p.Done }) / float64(k),
		Accepted:   sum(pts, k, func(p point) float64 { return p.Accepted }) / float64(k),
		Attempts:   sum(pts, k, func(p point) float64 { return p.Attempts }),
		P95:        "–",
	}
	if f.Attempts > 0 {
		f.RetryRate = 100 * sum(pts, k, func(p point) float64 { return p.Retries }) / f.Attempts
	}
	if w := s.recentWaits(account, k); len(w) > 0 {
		f.P95 = seconds(p95(w))
	}
	for st, n := range backlog {
		if !st.Terminal() && st != state.Dead {
			f.Backlog += n
		}
	}
	return f
}

// seconds writes a wait for people: 850ms, 4.2s, 3m10s.
func seconds(v float64) string {
	d := time.Duration(v * float64(time.Second))
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// backlogOf counts account's events by state ("" for all): dead and
// review from the index (live), the others from the last scan.
func (s *Service) backlogOf(account string, sc *scan) map[state.State]int {
	out := map[state.State]int{}
	if sc != nil {
		add := func(m map[state.State]int) {
			for st, n := range m {
				out[st] += n
			}
		}
		if account == "" {
			add(sc.Counts)
		} else {
			add(sc.ByAccount[account])
		}
	}
	for _, st := range []state.State{state.Dead, state.ManualReview} {
		if account == "" {
			out[st] = s.x.Count(st)
		} else {
			out[st] = s.x.Facets(st).Accounts[account]
		}
	}
	return out
}

func (s *Service) overview(ctx context.Context, account string) overviewData {
	s.activityNow(ctx)
	sc := s.scanned(ctx, 2*time.Second)
	pts, sampled, took, ferr := s.activitySeries(account)
	d := overviewData{Account: account, Sampled: sampled, Took: took.Round(100 * time.Microsecond), Refreshed: s.now(), Every: int(overviewEvery / time.Second)}
	if ferr != nil {
		d.FeedErr = ferr.Error()
	}
	if sc != nil {
		d.ScanAt = sc.At
		if sc.Err != nil {
			d.ScanErr = sc.Err.Error()
		}
	}
	backlog := s.backlogOf(account, sc)
	d.figures = s.figuresOf(account, pts, backlog)

	xs := make([]string, len(pts))
	if n := len(pts); n > 0 {
		xs[0] = fmt.Sprintf("−%dm", n-1)
		xs[n/2] = fmt.Sprintf("−%dm", n-1-n/2)
		xs[n-1] = "now"
	}
	col := func(f func(point) float64) []float64 {
		out := make([]float64, len(pts))
		for i, p := range pts {
			out[i] = f(p)
		}
		return out
	}
	d.ThroughputSVG = lineChart("throughput", "Events accepted and done per minute", "", xs,
		series{Name: "accepted", Color: "#98a2b3", Values: col(func(p point) float64 { return p.Accepted })},
		series{Name: "done", Color: "#067647", Values: col(func(p point) float64 { return p.Done })},
		series{Name: "dead", Color: "#b42318", Values: col(func(p point) float64 { return p.Dead })})
	d.RetriesSVG = lineChart("retries", "Attempts and retries per minute", "", xs,
		series{Name: "attempts", Color: "#1f5fbf", Values: col(func(p point) float64 { return p.Attempts })},
		series{Name: "retries", Color: "#b54708", Values: col(func(p point) float64 { return p.Retries })})
	d.WaitSVG = lineChart("wait", "p95 wait from due to the first attempt, per minute", "s", xs,
		series{Name: "p95 wait", Color: "#7a5af8", Values: col(func(p point) float64 { return p.P95 })})
	for _, st := range backlogStates {
		d.Bars = append(d.Bars, bar{Label: string(st), Class: string(st), Value: backlog[st]})
	}
	d.BacklogSVG = barChart("backlog", "Events by state now", d.Bars)

	names := map[string]bool{}
	for a := range s.cfg.Accounts {
		if a != config.DefaultAccountName {
			names[a] = true
		}
	}
	for _, a := range s.activityAccounts() {
		names[a] = true
	}
	if sc != nil {
		for a := range sc.ByAccount {
			names[a] = true
		}
	}
	open := map[string]int{}
	for _, c := range s.brk.List() {
		names[c.Account] = true
		if c.State != "closed" {
			open[c.Account]++
		}
	}
	paused := map[string]bool{}
	if ps, err := s.pauses.List(ctx); err == nil {
		for _, p := range ps {
			paused[p.Account] = true
		}
	}
	for a := range names {
		d.Accounts = append(d.Accounts, a)
	}
	slices.Sort(d.Accounts)
	if account == "" {
		for _, a := range d.Accounts {
			apts, _, _, _ := s.activitySeries(a)
			d.Rows = append(d.Rows, overviewRow{Account: a, figures: s.figuresOf(a, apts, s.backlogOf(a, sc)), Open: open[a], Paused: paused[a]})
		}
		// The busiest first, and a bounded page however many accounts.
		slices.SortStableFunc(d.Rows, func(x, y overviewRow) int {
			return cmp.Compare(y.Throughput+float64(y.Backlog), x.Throughput+float64(x.Backlog))
		})
		if len(d.Rows) > overviewRows {
			d.More, d.Rows = len(d.Rows)-overviewRows, d.Rows[:overviewRows]
		}
		return d
	}
	d.Breakers = s.breakers(account).Items
	d.Limits = limitsOf(s.live.Load(), account)
	d.LeftOut = s.live.Load().LeftOut[account]
	d.DeadKept = s.deadKept(ctx, account)
	d.DeadFull = d.Limits.DeadLetters > 0 && int64(d.DeadKept) >= d.Limits.DeadLetters
	d.DeadWaiting = s.deadWaiting(ctx, account)
	rctx, cancel := context.WithTimeout(ctx, ownersTimeout)
	defer cancel()
	if v, err := owner.Read(rctx, s.js, s.cfg.Prefix, 0); err == nil {
		d.Owner, d.Learned = v.Leases[account], v.Learned[account]
	}
	if st, err := s.accountState(ctx, account); err == nil {
		d.Paused, d.HeldUntil = st.Paused, st.HeldUntil
	}
	return d
}

// deadKept is how many entries account keeps in DEAD (-1: not read).
func (s *Service) deadKept(ctx context.Context, account string) int {
	n, err := dead.Kept(ctx, s.deadSt, s.subj, account)
	if err != nil {
		return -1
	}
	return n
}

// deadWaiting is how many of account's entries wait for room in DEAD
// (-1: not read).
func (s *Service) deadWaiting(ctx context.Context, account string) int {
	n, err := s.dead.WaitingOf(ctx, account)
	if err != nil {
		return -1
	}
	return n
}

func (u *ui) overview(w http.ResponseWriter, r *http.Request) {
	account := strings.TrimSpace(r.URL.Query().Get("account"))
	if account != "" {
		if err := validAccount(account); err != nil {
			u.fail(w, r, err)
			return
		}
	}
	title := "Overview"
	if account != "" {
		title = "Overview of " + account
	}
	p := u.page(w, r, "/ui/overview", title)
	p.Data = u.s.overview(r.Context(), account)
	u.render(w, http.StatusOK, "overview", p)
}
