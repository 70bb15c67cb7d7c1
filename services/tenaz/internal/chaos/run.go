package chaos

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/state"
)

// chaosCallbackFaults: 20 % of bureau_a's webhooks are sent twice and
// 10 % never; the shaper sends some late.
func chaosCallbackFaults() provider.CallbackFaults {
	return provider.CallbackFaults{DuplicateRate: 0.2, DropRate: 0.1}
}

// Run is the crash suite: see the package documentation and
// docs/chaos.md. It returns an error naming the violations, if any.
func Run(ctx context.Context, o Options, out io.Writer) (err error) {
	if err := o.validate(); err != nil {
		return err
	}
	dir, done, err := workDir("tenaz-chaos-*", o.Keep, out, " (logs/ has every process's log and chaos.log the faults)")
	if err != nil {
		return err
	}
	defer func() { done(err) }()
	began := time.Now()
	fmt.Fprintf(out, "# tenaz-chaos %s: %d events, %d accounts, %d dispatchers, load %s, outage %s per account, kill every ~%s, nats-server restart every ~%s, settle bound %s, seed %d\n",
		o.Name, o.Events, o.Accounts, o.DispatcherReplicas, o.Load, o.Outage, o.KillEvery, o.NATSEvery, o.Settle, o.Seed)
	fmt.Fprintf(out, "# work directory: %s\n", dir)
	rngs := func(k uint64) *rand.Rand { return rand.New(rand.NewPCG(o.Seed, k)) }
	cbf := chaosCallbackFaults()
	c, err := startCluster(ctx, clusterOptions{dir: dir, race: o.Race, dispatchers: o.DispatcherReplicas, pollers: o.PollerReplicas,
		faults: chaosFaults(), callbackFaults: cbf, seed: o.Seed, cooldown: o.Cooldown, callbackSLA: o.CallbackSLA,
		pollSLA: o.PollSLA, logLevel: "info", debug: map[string]bool{"dispatcher": true, "poller": true}, out: out})
	if err != nil {
		return err
	}
	defer c.stop()
	fmt.Fprintf(out, "# up in %s: nats-server %s, ingest %s, providers %s\n", time.Since(began).Round(time.Millisecond), c.natsURL, c.ingest, c.fleet.base())

	accounts := make([]string, o.Accounts)
	for i := range accounts {
		accounts[i] = fmt.Sprintf("acct-%02d", i+1)
	}
	start := time.Now()
	span := o.Load - o.Outage - 10*time.Second
	for i, a := range accounts {
		from := start.Add(5 * time.Second)
		if len(accounts) > 1 && span > 0 {
			from = from.Add(time.Duration(float64(span) * float64(i) / float64(len(accounts)-1)))
		}
		c.fleet.setOutage(a, window{from, from.Add(o.Outage)})
	}
	jobs := plan(o.Events, accounts, rngs(1))
	l := newLoader(c.ingest, c.js)

	chaosLog, err := os.Create(filepath.Join(dir, "logs", "chaos.log"))
	if err != nil {
		return err
	}
	defer chaosLog.Close()
	loadCtx, stopLoad := context.WithTimeout(ctx, o.Load)
	defer stopLoad()
	giveUp, stopGiveUp := context.WithTimeout(ctx, o.Load+60*time.Second)
	defer stopGiveUp()
	bctx, stopBreakers := context.WithCancel(ctx)
	defer stopBreakers()
	bl := &breakerLog{}
	bdone := make(chan struct{})
	go func() { bl.run(bctx, c.js, accounts); close(bdone) }()
	sdone := make(chan struct{})
	go func() { c.fleet.shape(loadCtx, rngs(2), cbf, o.CallbackSLA+3*time.Second); close(sdone) }()
	wdone := make(chan struct{})
	go func() { webhooks(loadCtx, c.fleet, l, rngs(3), 100*time.Millisecond); close(wdone) }()
	mdone := make(chan struct{})
	go func() { monkey(loadCtx, c, o.KillEvery, o.NATSEvery, rngs(4), chaosLog); close(mdone) }()
	pdone := make(chan struct{})
	go func() { progress(loadCtx, out, c, l, start); close(pdone) }()
	op := &operator{}
	odone := make(chan struct{})
	go func() { op.run(loadCtx, c.nc, c.fleet.outages, rngs(5), time.Second); close(odone) }()

	l.run(ctx, giveUp, jobs, o.Load, 64)
	submitted := time.Since(start)
	<-loadCtx.Done()
	<-mdone
	<-sdone
	<-wdone
	<-pdone
	<-odone
	fmt.Fprintf(out, "# load and faults over after %s (submissions done after %s); every process up again…\n",
		time.Since(start).Round(time.Second), submitted.Round(time.Second))
	if err := c.waitReady(ctx, 2*time.Minute); err != nil {
		return fmt.Errorf("chaos: after the faults: %w", err)
	}

	evs := make([]*ev, 0, o.Events)
	for _, j := range jobs {
		evs = append(evs, j...)
	}
	st := settle(ctx, out, c, evs, time.Now().Add(o.Settle))
	stopBreakers()
	<-bdone

	r := &report{w: out}
	check(ctx, r, c, l, evs, jobs, bl, op, st, o)
	fmt.Fprintf(out, "\n# %s run took %s\n", o.Name, time.Since(began).Round(time.Second))
	if len(r.violations) > 0 {
		if err := dump(dir, c.fleet); err != nil {
			fmt.Fprintf(out, "# dump: %v\n", err)
		}
		return fmt.Errorf("chaos: %d invariant(s) violated: %s", len(r.violations), strings.Join(r.violations, "; "))
	}
	fmt.Fprintln(out, "# every invariant holds")
	return nil
}

// workDir makes a run's work directory, named after pattern. done, given
// the run's error, removes it unless the run failed or keep; a directory
// kept is printed, with note.
func workDir(pattern string, keep bool, out io.Writer, note string) (dir string, done func(error), err error) {
	if dir, err = os.MkdirTemp("", pattern); err != nil {
		return "", nil, err
	}
	return dir, func(err error) {
		if err == nil && !keep {
			_ = os.RemoveAll(dir)
			return
		}
		fmt.Fprintf(out, "# work directory kept: %s%s\n", dir, note)
	}, nil
}

// progress prints a line every 15s while the load runs.
func progress(ctx context.Context, out io.Writer, c *cluster, l *loader, start time.Time) {
	t := time.NewTicker(15 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		kills := 0
		for _, p := range c.all() {
			p.mu.Lock()
			kills += p.kills + p.terms
			p.mu.Unlock()
		}
		calls, _, cbs, _ := c.fleet.snapshot()
		fmt.Fprintf(out, "  %4ds accepted %6d (tries http %d nats %d), provider deliveries %d, webhooks %d, kills and restarts %d\n",
			int(time.Since(start).Seconds()), l.submitted.Load(), l.httpTries.Load(), l.natsTries.Load(), len(calls), len(cbs), kills)
	}
}

// settled is what the settle wait saw.
type settled struct {
	took      time.Duration
	extended  time.Duration // how far the bound was moved for events waiting for a later step
	ok        bool
	stuck     map[string]state.Head // non-terminal at the deadline (or missing: Status "")
	repairs   reconcileReport       // the sweep run because events were stuck (zero if none)
	repairErr error
}

// settle waits, until deadline, for every accepted event to have a record
// in a terminal state and INTAKE to be empty; then for bureau_a's pending
// webhooks (late ones) to be sent. If the deadline passes first, it prints
// what is stuck, runs the reconciler once (those events had no next step,
// or one later than the bound) and gives them another minute.
//
// An event that waits for a step due later (a retry, a poll, a callback
// deadline) is slow, not stuck: at the deadline, the bound moves to the
// latest such step plus settleGrace, by at most settleExtension in all.
// (A run without it failed on an event at the end of an ordered lane that
// had drawn five 503s in a row: its sixth attempt was due a second after
// the bound.) An event stuck meanwhile is still unfinished when the moved
// bound passes.
func settle(ctx context.Context, out io.Writer, c *cluster, evs []*ev, deadline time.Time) settled {
	began := time.Now()
	bound, limit := deadline, deadline.Add(settleExtension)
	var s settled
	last := time.Time{}
	check := func() (map[string]state.Head, bool) {
		hs, err := heads(ctx, c.js)
		if err != nil {
			return nil, false
		}
		stuck := map[string]state.Head{}
		for _, e := range evs {
			if !e.accepted {
				continue
			}
			h, ok := hs[e.id]
			if !ok {
				stuck[e.id] = state.Head{ID: e.id}
			} else if !finished(h.Status) {
				stuck[e.id] = h
			}
		}
		for id, h := range hs {
			if !finished(h.Status) {
				stuck[id] = h
			}
		}
		backlog, err := intakeBacklog(ctx, c.js)
		ok := len(stuck) == 0 && err == nil && backlog == 0
		if time.Since(last) >= 15*time.Second || ok {
			last = time.Now()
			by := map[string]int{}
			for _, h := range stuck {
				st := string(h.Status)
				if st == "" {
					st = "no_record"
				}
				by[st]++
			}
			fmt.Fprintf(out, "  settling %4ds: %d records, %d not finished %s, intake backlog %d\n",
				int(time.Since(began).Seconds()), len(hs), len(stuck), counts(by), backlog)
		}
		return stuck, ok
	}
	for {
		stuck, ok := check()
		if ok {
			s.ok = true
			break
		}
		if time.Now().After(deadline) && ctx.Err() == nil {
			if next, ok := latestStep(stuck); ok && next.Add(settleGrace).After(deadline) && deadline.Before(limit) {
				deadline = next.Add(settleGrace)
				if deadline.After(limit) {
					deadline = limit
				}
				s.extended = deadline.Sub(bound)
				fmt.Fprintf(out, "  settling: an event waits for a step due at %s; the bound moves to %s\n",
					next.Format("15:04:05"), deadline.Format("15:04:05"))
				continue
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			s.stuck = stuck
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(3 * time.Second):
		}
	}
	s.took = time.Since(began)
	if !s.ok {
		fmt.Fprintf(out, "# NOT SETTLED after %s: %d events not finished; the first of them:\n", s.took.Round(time.Second), len(s.stuck))
		printStuck(ctx, out, c, s.stuck)
		fmt.Fprintln(out, "# running the reconciler once for them, and giving them another minute")
		s.repairs, s.repairErr = reconcile(c.nc)
		fmt.Fprintf(out, "# reconciler: scanned %d, overdue %d, repaired %s, failed %d (err %v)\n",
			s.repairs.Scanned, s.repairs.Overdue, counts(s.repairs.Repaired), s.repairs.Failed, s.repairErr)
		end := time.Now().Add(time.Minute)
		for time.Now().Before(end) && ctx.Err() == nil {
			if _, ok := check(); ok {
				break
			}
			time.Sleep(3 * time.Second)
		}
	}
	// Webhooks still on their way (sent late on purpose) must find every
	// event where it is and change nothing: wait for them.
	for time.Now().Before(deadline.Add(time.Minute)) && c.fleet.pendingCallbacks() > 0 && ctx.Err() == nil {
		time.Sleep(time.Second)
	}
	return s
}

// settleGrace is how long after its due time a step may take to settle
// its event; settleExtension bounds how far the settle bound may move for
// events waiting for later steps.
const (
	settleGrace     = 30 * time.Second
	settleExtension = 2 * time.Minute
)

// latestStep is the latest due time of a timed next step (a retry, a
// delay, a poll, a callback deadline) among the unfinished events. A
// running event's next step is its call's end, or, if its run was lost,
// its message handed out again: due at the latest callTimeout + ackWait
// after its claim. (A run failed on an event claimed again just before
// the bound, after a 503 and a timeout: it finished 23 s past it.) A run
// that never ends keeps its claim time, so the bound stops moving for it.
func latestStep(stuck map[string]state.Head) (time.Time, bool) {
	var last time.Time
	for _, h := range stuck {
		next := h.NextRunAt
		switch h.Status {
		case state.Retrying, state.Scheduled, state.Polling, state.AwaitingCallback:
		case state.Running:
			end := h.UpdatedAt.Add(callTimeout + ackWait)
			next = &end
		default:
			continue
		}
		if next != nil && next.After(last) {
			last = *next
		}
	}
	return last, !last.IsZero()
}

// printStuck prints up to 15 stuck events with the end of their history.
func printStuck(ctx context.Context, out io.Writer, c *cluster, stuck map[string]state.Head) {
	ids := make([]string, 0, len(stuck))
	for id := range stuck {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	recs, err := records(ctx, c.js)
	if err != nil {
		fmt.Fprintf(out, "  (records unreadable: %v)\n", err)
		return
	}
	calls, _, _, _ := c.fleet.snapshot()
	for i, id := range ids {
		if i == 15 {
			break
		}
		r, ok := recs[id]
		if !ok {
			fmt.Fprintf(out, "  %s: no record\n", id)
			continue
		}
		next := "-"
		if r.NextRunAt != nil {
			next = r.NextRunAt.Format(time.TimeOnly)
		}
		fmt.Fprintf(out, "  %s %s %s status=%s stage=%s attempts=%d next_run_at=%s updated=%s\n", id, r.Account, r.Kind, r.Status, r.Stage,
			r.Attempts, next, r.UpdatedAt.Format(time.TimeOnly))
		from := max(0, len(r.History)-4)
		for _, h := range r.History[from:] {
			fmt.Fprintf(out, "      %s %-14s %s→%s %s: %s\n", h.At.Format("15:04:05.000"), h.Action, h.From, h.To, h.Actor, h.Detail)
		}
		var cs []string
		for _, cl := range calls {
			if cl.eventID == id {
				d := ""
				if cl.down {
					d = "(down)"
				}
				cs = append(cs, cl.at.Format("15:04:05.000")+" "+cl.target+d)
			}
		}
		fmt.Fprintf(out, "      deliveries: %s\n", strings.Join(cs, ", "))
	}
}

// dump writes every delivery and webhook of the run to the work
// directory, for a failed run's post-mortem.
func dump(dir string, f *fleet) error {
	calls, _, cbs, _ := f.snapshot()
	var b strings.Builder
	b.WriteString("at\tend\tgone\taccount\ttarget\tevent\tkey\tdown\tsender\n")
	for _, c := range calls {
		fmt.Fprintf(&b, "%s\t%s\t%v\t%s\t%s\t%s\t%s\t%v\t%s\n", c.at.Format("15:04:05.000000"), c.end.Format("15:04:05.000000"), c.gone,
			c.account, c.target, c.eventID, c.key, c.down, c.sender)
	}
	if err := os.WriteFile(filepath.Join(dir, "deliveries.tsv"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	b.Reset()
	b.WriteString("at\tsource\twebhook_id\tevent\treference\tstatus\toutcome\n")
	for _, c := range cbs {
		fmt.Fprintf(&b, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", c.at.Format("15:04:05.000000"), c.source, c.webhookID, c.eventID, c.ref, c.status, c.outcome)
	}
	return os.WriteFile(filepath.Join(dir, "webhooks.tsv"), []byte(b.String()), 0o644)
}

// terminalStates in the order the report prints them.
var terminalStates = []state.State{state.Done, state.Dead, state.ManualReview, state.Cancelled}
