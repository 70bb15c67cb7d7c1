package chaos

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/services/ingest"
)

// stageTargets is each kind's target by stage (primary, fallback).
var stageTargets = map[string][2]string{
	kindOrder:    {targetERP, ""},
	kindLane:     {targetERP, ""},
	kindEvaluate: {targetBureauA, targetBureauB},
	kindCheck:    {targetBureauA, targetBureauB},
	kindReport:   {targetBureauB, ""},

	kindLaneCallback: {targetBureauA, ""},
}

func targetOf(kind, stage string) string {
	t := stageTargets[kind]
	if stage == state.StageFallback {
		return t[1]
	}
	return t[0]
}

// check prints the figures of the run and checks every invariant.
func check(ctx context.Context, r *report, c *cluster, l *loader, evs []*ev, jobs []job, bl *breakerLog, op *operator, st settled, o Options) {
	recs, err := records(ctx, c.js)
	if err != nil {
		r.section("records")
		r.invariant("the state bucket could be read (error: "+err.Error()+")", 1)
		return
	}
	calls, polls, cbs, downPolls := c.fleet.snapshot()
	callsOf := map[string][]callRec{}
	for _, cl := range calls {
		callsOf[cl.eventID] = append(callsOf[cl.eventID], cl)
	}
	byID := map[string]*ev{}
	for _, e := range evs {
		byID[e.id] = e
	}

	// --- the run
	r.section("run")
	viaHTTP, viaNATS, accepted, delayed, lanes := 0, 0, 0, 0, 0
	kinds := map[string]int{}
	for _, e := range evs {
		if e.viaNATS {
			viaNATS++
		} else {
			viaHTTP++
		}
		if e.accepted {
			accepted++
			kinds[e.kind]++
		}
		if e.delay > 0 {
			delayed++
		}
	}
	for _, j := range jobs {
		if len(j) > 1 {
			lanes++
		}
	}
	r.figure("events planned", len(evs))
	r.figure("  over HTTP / over NATS", fmt.Sprintf("%d / %d", viaHTTP, viaNATS))
	r.figure("  delayed (not_before) / ordered lanes of 4", fmt.Sprintf("%d / %d", delayed, lanes))
	r.figure("events accepted", accepted)
	r.figure("  by kind", counts(kinds))
	r.figure("submission tries (http / nats), retries", fmt.Sprintf("%d / %d, %d", l.httpTries.Load(), l.natsTries.Load(), l.retries.Load()))
	if d := l.lastAccept.Sub(l.firstAccept); d > 0 {
		r.figure("accepted per second (first to last acceptance)", float64(accepted)/d.Seconds())
	}
	r.figure("settled after the load in", st.took.Round(time.Second).String())

	r.section("faults")
	for _, p := range c.all() {
		p.mu.Lock()
		r.figure(p.name+": SIGKILL / SIGTERM / starts / exits by itself", fmt.Sprintf("%d / %d / %d / %d", p.kills, p.terms, p.starts, len(p.crashes)))
		p.mu.Unlock()
	}
	downCalls := 0
	perTarget := map[string]int{}
	for _, cl := range calls {
		perTarget[cl.target]++
		if cl.down {
			downCalls++
		}
	}
	r.figure("deliveries reaching the providers", counts(perTarget))
	r.figure("  answered 503 by an account's outage (+ polls)", fmt.Sprintf("%d (+%d)", downCalls, downPolls))
	for _, t := range targets {
		p := c.fleet.prov[t]
		statuses := map[string]int{}
		twice := 0
		ok2xx := map[string]int{}
		for _, cl := range p.Calls() {
			statuses[fmt.Sprint(cl.Status)]++
			if cl.Status >= 200 && cl.Status < 300 {
				ok2xx[cl.IdempotencyKey]++
			}
		}
		for _, n := range ok2xx {
			if n > 1 {
				twice++
			}
		}
		r.figure(t+": answers by status", counts(statuses))
		r.figure(t+": keys applied / answered 2xx more than once (replayed)", fmt.Sprintf("%d / %d", p.Applied(), twice))
		if t == targetBureauB {
			r.figure(t+": polls answered", p.PollCount())
		}
	}
	pcb := c.fleet.prov[targetBureauA].Callbacks()
	dropped, dup := 0, 0
	for _, cb := range pcb {
		if cb.Dropped {
			dropped++
		}
		if cb.Duplicate {
			dup++
		}
	}
	r.figure("bureau_a webhooks: sent or dropped / dropped / duplicates", fmt.Sprintf("%d / %d / %d", len(pcb), dropped, dup))
	bySource := map[string]map[string]int{}
	for _, cb := range cbs {
		m := bySource[cb.source]
		if m == nil {
			m = map[string]int{}
			bySource[cb.source] = m
		}
		k := cb.outcome
		if cb.status != http.StatusOK {
			k = fmt.Sprint(cb.status)
		}
		m[k]++
	}
	for _, src := range []string{"provider", srcForged, srcOutOfOrder, srcConflicting, srcReplay} {
		r.figure("webhooks "+src+": answers (0 = ingest down)", counts(bySource[src]))
	}

	// --- accounting
	r.section("invariants: every accepted event ends in a terminal state")
	byState := map[state.State]int{}
	var lost, open, extraOpen []string
	for _, e := range evs {
		if !e.accepted {
			continue
		}
		rec, ok := recs[e.id]
		switch {
		case !ok:
			lost = append(lost, e.id+" ("+e.account+" "+e.kind+")")
		case !finished(rec.Status):
			open = append(open, fmt.Sprintf("%s %s %s", e.id, rec.Kind, rec.Status))
		default:
			byState[rec.Status]++
		}
	}
	extra := 0
	for id, rec := range recs {
		if _, ok := byID[id]; !ok {
			extra++
			if !finished(rec.Status) {
				extraOpen = append(extraOpen, id+" "+string(rec.Status))
			}
		}
	}
	r.figure("accepted", accepted)
	sum := 0
	for _, s := range terminalStates {
		r.figure("  "+string(s), byState[s])
		sum += byState[s]
	}
	r.figure("  terminal, in all", sum)
	r.invariant("accepted events without a record (lost)", len(lost), lost...)
	r.invariant("accepted events not in a terminal state", len(open), open...)
	r.invariant("accepted - terminal", accepted-sum)
	r.figure("records of submissions not known as accepted", extra)
	r.invariant("  of them not in a terminal state", len(extraOpen), extraOpen...)
	var refused, gaveUp []string
	for _, e := range evs {
		switch {
		case e.problem != "":
			refused = append(refused, e.id+": "+e.problem)
		case !e.accepted:
			gaveUp = append(gaveUp, fmt.Sprintf("%s (%d tries)", e.id, e.tries))
		}
	}
	r.invariant("submissions refused or answered wrongly", len(refused), refused...)
	r.invariant("submissions never accepted within a minute of retries", len(gaveUp), gaveUp...)

	// --- next step
	r.section("invariants: no event without a next step")
	var stuckIDs []string
	for id, h := range st.stuck {
		stuckIDs = append(stuckIDs, fmt.Sprintf("%s %s", id, h.Status))
	}
	sort.Strings(stuckIDs)
	bound := o.Settle.String()
	if st.extended > 0 {
		bound += ", moved by " + st.extended.Round(time.Second).String() + " for events waiting for a later step"
	}
	r.invariant(fmt.Sprintf("events not finished within the settle bound (%s)", bound), len(st.stuck), stuckIDs...)
	if st.repairErr != nil || st.repairs.repairs() > 0 {
		r.invariant("  of them repaired by the reconciler: had no next step ("+counts(st.repairs.Repaired)+")", st.repairs.repairs())
	}
	rep, err := reconcile(c.nc)
	if err != nil {
		r.invariant("reconciler sweep after settling answered (error: "+err.Error()+")", 1)
	} else {
		r.figure("reconciler sweep after settling: records scanned", rep.Scanned)
		r.invariant("  overdue next steps found", rep.Overdue)
		r.invariant("  repairs made", rep.repairs(), counts(rep.Repaired))
	}

	// --- effects
	r.section("invariants: effects at the providers")
	dupEffects := 0
	var dupDetail []string
	for _, t := range targets {
		for k, n := range c.fleet.prov[t].DuplicateEffects() {
			dupEffects++
			dupDetail = append(dupDetail, fmt.Sprintf("%s: key %s applied %d times", t, k, n))
		}
	}
	r.invariant("idempotency keys whose effect was applied more than once", dupEffects, dupDetail...)
	// A target's Idempotency-Key is the event id (targets.<t>.idempotency_key
	// defaults to event), which the run derives itself from what it submitted.
	var wrongKey []string
	for _, cl := range calls {
		if e, ok := byID[cl.eventID]; ok && cl.key != e.id {
			wrongKey = append(wrongKey, fmt.Sprintf("%s: call to %s with Idempotency-Key %q, want the event id", cl.eventID, cl.target, cl.key))
		}
	}
	r.invariant("calls of an event with another Idempotency-Key", len(wrongKey), wrongKey...)
	// Every call is an attempt its history counts: a claim or a reclaim,
	// less the yields that gave back the claim of a call not made. A run
	// taken over counts its call whether it was made or not, so an event
	// may count more attempts than calls, never fewer: fewer would be a
	// yield after a call, or a call made without a claim, and a kind's
	// attempts would no longer bound its calls.
	var uncounted []string
	for id, rec := range recs {
		if rec.Truncated > 0 {
			continue // its oldest entries are gone: its claims cannot be counted
		}
		counted := 0
		for _, h := range rec.History {
			switch h.Action {
			case state.Claim, state.Reclaim:
				counted++
			case state.Yield:
				counted--
			}
		}
		if n := len(callsOf[id]); n > counted {
			uncounted = append(uncounted, fmt.Sprintf("%s %s: %d calls, %d attempts counted", id, rec.Kind, n, counted))
		}
	}
	r.invariant("events with more calls than attempts counted", len(uncounted), uncounted...)
	reclaims, live := 0, 0
	for _, rec := range recs {
		r, l := takeovers(rec)
		reclaims, live = reclaims+r, live+l
	}
	// Not invariants: a killed dispatcher's run is rightly taken over; a
	// live one costs a second call (its key keeps the effect single).
	r.figure("runs taken over (reclaims) / of them alive (their late outcome noted)", fmt.Sprintf("%d / %d", reclaims, live))
	var noEffect []string
	for id, rec := range recs {
		if rec.Status != state.Done {
			continue
		}
		var fin *state.Entry
		for i := len(rec.History) - 1; i >= 0; i-- {
			if a := rec.History[i].Action; a == state.Succeed || a == state.Complete {
				fin = &rec.History[i]
				break
			}
		}
		if fin == nil {
			noEffect = append(noEffect, id+": done without a succeed or complete entry")
			continue
		}
		t := targetOf(rec.Kind, fin.Stage)
		if t == "" || c.fleet.prov[t].Effects(rec.ID) != 1 { // the event id is its Idempotency-Key
			noEffect = append(noEffect, fmt.Sprintf("%s %s: done at stage %s by %s, but %s applied its key %d times", id, rec.Kind, fin.Stage, fin.Actor, t,
				effectsAt(c.fleet.prov[t], rec.ID)))
		}
	}
	r.invariant("done events whose effect is not applied once at the provider", len(noEffect), noEffect...)

	// --- reasons
	r.section("invariants: every dead or reviewed event says why, and is listed")
	var noReason []string
	reasons := map[string]int{}
	for id, rec := range recs {
		if rec.Status != state.Dead && rec.Status != state.ManualReview {
			continue
		}
		why := ""
		for i := len(rec.History) - 1; i >= 0; i-- {
			if h := rec.History[i]; h.Action != state.Note && h.To == rec.Status && h.From != rec.Status {
				why = h.Detail
				break
			}
		}
		if rec.Status == state.Dead {
			if rec.LastError == nil || rec.LastError.Class == "" || rec.LastError.Message == "" {
				noReason = append(noReason, id+": dead without last_error class and message")
				continue
			}
			reasons["dead:"+rec.LastError.Class]++
		} else {
			reasons["manual_review:"+firstWords(why)]++
		}
		if strings.TrimSpace(why) == "" {
			noReason = append(noReason, id+": "+string(rec.Status)+" with no reason in its history")
		}
	}
	r.figure("by reason", counts(reasons))
	r.invariant("dead or manual_review events without a reason", len(noReason), noReason...)
	r.figure("operator replays during the faults: asked / replayed / unanswered requests",
		fmt.Sprintf("%d / %d / %d", op.asked.Load(), op.replayed.Load(), op.unanswered.Load()))
	diff := listsAgree(ctx, c.nc, recs, time.Minute)
	r.invariant("events the dead or review lists show in another state than their record's (after a minute)", len(diff), diff...)

	// --- callbacks
	r.section("invariants: every webhook applied at most once; forged ones refused")
	var twiceComplete []string
	for id, rec := range recs {
		n := 0
		for _, h := range rec.History {
			if h.Action == state.Complete {
				n++
			}
		}
		if n > 1 {
			twiceComplete = append(twiceComplete, fmt.Sprintf("%s: %d complete entries", id, n))
		}
	}
	r.invariant("events with more than one complete entry in their history", len(twiceComplete), twiceComplete...)
	appliedPer := map[string]int{}
	var forgedOK, validRefused, appliedBad []string
	for _, cb := range cbs {
		if cb.status == http.StatusOK && cb.outcome == ingest.CallbackApplied {
			appliedPer[cb.eventID]++
		}
		switch {
		case cb.source == srcForged:
			if cb.status != 0 && cb.status != http.StatusUnauthorized && cb.status != http.StatusTooManyRequests {
				forgedOK = append(forgedOK, fmt.Sprintf("%s for %s answered %d %s", cb.webhookID, cb.eventID, cb.status, cb.body))
			}
		case cb.status == http.StatusUnauthorized:
			validRefused = append(validRefused, fmt.Sprintf("%s %s for %s: 401 %s", cb.source, cb.webhookID, cb.eventID, cb.body))
		case cb.source != "provider" && cb.outcome == ingest.CallbackApplied:
			appliedBad = append(appliedBad, fmt.Sprintf("%s %s for %s was applied", cb.source, cb.webhookID, cb.eventID))
		}
	}
	var twiceApplied []string
	for id, n := range appliedPer {
		if n > 1 {
			twiceApplied = append(twiceApplied, fmt.Sprintf("%s: %d webhooks answered applied", id, n))
		}
	}
	r.invariant("events with more than one webhook answered applied", len(twiceApplied), twiceApplied...)
	r.invariant("out-of-order, conflicting or replayed webhooks applied", len(appliedBad), appliedBad...)
	r.invariant("forged webhooks not refused with 401", len(forgedOK), forgedOK...)
	r.invariant("validly signed webhooks refused with 401", len(validRefused), validRefused...)

	// --- limits
	c.fleet.mu.Lock()
	outages := map[string]window{}
	for k, v := range c.fleet.outages {
		outages[k] = v
	}
	c.fleet.mu.Unlock()
	var lim map[string]limits
	var targetLim map[string]int
	yaml, err := os.ReadFile(filepath.Join(c.o.dir, "tenaz.yaml"))
	var cfg *config.Config
	if err == nil {
		cfg, err = runConfig(string(yaml))
	}
	if err == nil {
		lim, targetLim = accountLimits(cfg, slices.Collect(maps.Keys(outages))), targetConcurrency(cfg)
	}
	if err != nil {
		r.section("invariants: limits")
		r.invariant("the run's config could be read (error: "+err.Error()+")", 1)
	}
	// Every stop of a process that holds a breaker's count: a dispatcher
	// or nats-server.
	var stops []time.Time
	for _, p := range c.all() {
		if p == c.nats || strings.HasPrefix(p.name, "dispatcher") {
			p.mu.Lock()
			stops = append(stops, p.stops...)
			p.mu.Unlock()
		}
	}
	r.section(fmt.Sprintf("invariants: account limits over all %d dispatchers", o.DispatcherReplicas))
	lr := checkLimits(calls, lim, time.Now())
	most := accountFigure{}
	for _, f := range lr.accounts {
		if f.lim.rate > 0 || f.lim.concurrency != accountConcurrency {
			rate := "unlimited"
			if f.lim.rate > 0 {
				rate = fmt.Sprintf("%g/s", f.lim.rate)
			}
			r.figure(fmt.Sprintf("%s (concurrency %d, rate %s): calls, most in flight, most in 1 s, in 10 s", f.account, f.lim.concurrency, rate),
				fmt.Sprintf("%d, %d, %d, %d", f.calls, f.peakFlight, f.peakSecond, f.peakTen))
			r.figure("  dispatcher lifetimes that called it / changes of caller", fmt.Sprintf("%d / %d", f.owners, f.handovers))
			continue
		}
		most.peakFlight, most.peakSecond = max(most.peakFlight, f.peakFlight), max(most.peakSecond, f.peakSecond)
		most.owners, most.handovers = max(most.owners, f.owners), max(most.handovers, f.handovers)
	}
	r.figure(fmt.Sprintf("the other accounts (concurrency %d): most in flight, most in 1 s", accountConcurrency),
		fmt.Sprintf("%d, %d", most.peakFlight, most.peakSecond))
	r.figure("calls made while another dispatcher had one of the account in flight", lr.overlapping)
	r.invariant("calls beyond the account's concurrency in flight (no handover slack)", lr.overConcurrency, lr.concurrencyDetails...)
	r.invariant(fmt.Sprintf("calls beyond the account's rate in any 1 s (slack: %d, handovers included)", rateJitter), lr.overRate, lr.rateDetails...)

	r.section(fmt.Sprintf("invariants: target limits over all %d dispatchers and %d pollers", o.DispatcherReplicas, o.PollerReplicas))
	tr := checkTargets(calls, polls, targetLim, time.Now())
	for _, f := range tr.targets {
		r.figure(fmt.Sprintf("%s (concurrency %d): calls, polls, most in flight", f.target, f.concurrency),
			fmt.Sprintf("%d, %d, %d", f.calls, f.polls, f.peakFlight))
	}
	r.invariant("calls and polls beyond the target's concurrency in flight", tr.overConcurrency, tr.details...)

	// --- breakers
	r.section("invariants: breakers")
	br := checkBreakers(calls, bl.snapshot(), outages, o.Cooldown, lim, stops)
	r.figure("breaker openings seen / of them in an account's outage", fmt.Sprintf("%d / %d", br.opens, br.opensInOutage))
	r.figure(fmt.Sprintf("probes at down accounts after their breaker opened (cooldown %s)", o.Cooldown), br.probes)
	r.figure("most calls to one down account + target within one cooldown", br.maxPerCooldown)
	r.invariant(fmt.Sprintf("calls while a breaker was open (past %s of in-flight slack)", inFlightSlack), br.callsWhileOpen, br.details...)
	r.invariant("probes less than a cooldown apart while the account was down", br.tooMany, br.details...)
	r.figure("most failed calls of an account + target in an outage before its breaker opened (its bound)",
		fmt.Sprintf("%d (%d)", br.mostFailed, br.mostFailedMax))
	r.invariant(fmt.Sprintf("outages with more failed calls before the opening than %d + concurrency - 1 + concurrency per stop", breakerFailures),
		len(br.overFailures), br.overFailures...)

	// --- schedules, cancels, lanes
	r.section("invariants: delays, cancels, ordered lanes")
	var early, cancelBad []string
	cancelledOK := 0
	for _, e := range evs {
		if !e.accepted {
			continue
		}
		cs := callsOf[e.id]
		if !e.notBefore.IsZero() {
			for _, cl := range cs {
				if cl.at.Before(e.notBefore.Add(-2 * time.Second)) {
					early = append(early, fmt.Sprintf("%s: called at %s, not before %s", e.id, cl.at.Format(time.TimeOnly), e.notBefore.Format(time.TimeOnly)))
					break
				}
			}
		}
		rec, ok := recs[e.id]
		if e.cancelled && (!ok || rec.Status != state.Cancelled) {
			cancelBad = append(cancelBad, fmt.Sprintf("%s: DELETE answered 200 but the event is %s", e.id, rec.Status))
		}
		if ok && rec.Status == state.Cancelled {
			cancelledOK++
			var at time.Time
			for _, h := range rec.History {
				if h.Action == state.Cancel {
					at = h.At
				}
			}
			for _, cl := range cs {
				if !at.IsZero() && cl.at.After(at.Add(100*time.Millisecond)) {
					cancelBad = append(cancelBad, fmt.Sprintf("%s: called at %s after its cancel at %s", e.id, cl.at.Format("15:04:05.000"), at.Format("15:04:05.000")))
					break
				}
			}
		}
	}
	refusedCancels := 0
	for _, e := range evs {
		if e.cancelRefused {
			refusedCancels++
		}
	}
	r.figure("cancelled / cancel refused with 409 (it had started)", fmt.Sprintf("%d / %d", cancelledOK, refusedCancels))
	r.invariant("delayed events called before not_before (2s of slack)", len(early), early...)
	r.invariant("cancelled events called after the cancel, or a 200 cancel not kept", len(cancelBad), cancelBad...)
	// A lane's next event may be called once its predecessor finished
	// (done, dead, in review, cancelled): for a callback event, long
	// after its last call. Whoever finished it wakes the next; the
	// next's parking schedule does after 5 minutes if nobody did.
	var outOfOrder []string
	checked, slow := 0, 0
	var waits []time.Duration
	longestPair := ""
	// The longest wait outside its account's outage and the breaker's
	// cooldown after it: an open breaker holds the next event up too, and
	// the longest wait of all is usually that.
	var longestFree time.Duration
	longestFreePair := ""
	for _, j := range jobs {
		for i := 1; i < len(j); i++ {
			a, b := j[i-1], j[i]
			if !a.accepted || !b.accepted || len(callsOf[b.id]) == 0 {
				continue
			}
			checked++
			firstB := callsOf[b.id][0].at
			finished, ok := recs[a.id].FinishedAt()
			if !ok || !firstB.After(finished) {
				outOfOrder = append(outOfOrder, fmt.Sprintf("%s (%s) first called at %s, before its predecessor %s finished (at %s)",
					b.id, b.lane, firstB.Format("15:04:05.000"), a.id, finished.Format("15:04:05.000")))
				continue
			}
			wait := firstB.Sub(finished)
			if len(waits) == 0 || wait > slices.Max(waits) {
				longestPair = fmt.Sprintf("%s after %s", b.id, a.id)
			}
			waits = append(waits, wait)
			w, down := outages[b.account]
			if held := down && firstB.After(w.from) && finished.Before(w.to.Add(o.Cooldown)); !held && wait > longestFree {
				longestFree, longestFreePair = wait, fmt.Sprintf("%s after %s", b.id, a.id)
			}
			if wait >= laneSafetyNet {
				slow++
			}
		}
	}
	r.figure("ordered pairs checked", checked)
	if len(waits) > 0 {
		// An account's outage (its breaker's cooldown) or its rate holds a
		// next event up too.
		slices.Sort(waits)
		r.figure("wait of a lane's next event after its predecessor finished: median; longest (pair); longest outside its account's outage and cooldown (pair)",
			fmt.Sprintf("%s; %s (%s); %s (%s)", waits[len(waits)/2].Round(time.Millisecond), waits[len(waits)-1].Round(time.Millisecond), longestPair,
				longestFree.Round(time.Millisecond), longestFreePair))
	}
	r.figure("lanes whose next event waited 5 minutes or more (breakers and backlog included)", slow)
	wakes, err := c.lostWakes()
	if err != nil {
		r.invariant("the dispatchers' logs could be read (error: "+err.Error()+")", 1)
	}
	unexplained, cut := c.unexplainedWakes(wakes, recs)
	r.figure("lost wakes (a parked event's safety net fired after its predecessor finished) / of them with their finisher or nats-server stopped right after the finish",
		fmt.Sprintf("%d / %d", len(wakes), cut))
	r.invariant("lost wakes whose finisher and nats-server ran on", len(unexplained), unexplained...)
	r.invariant("ordered events called before their predecessor finished", len(outOfOrder), outOfOrder...)

	// --- processes
	r.section("invariants: processes")
	f := c.findings()
	r.invariant("panics, fatal errors or data races in the logs", len(f), f...)
}

// laneSafetyNet is the parking schedule's delay (services/dispatcher,
// laneRecheck). A wait that long is not necessarily a lost wake (see
// lostWakes).
const laneSafetyNet = 5 * time.Minute

func effectsAt(p *provider.Provider, key string) int {
	if p == nil {
		return 0
	}
	return p.Effects(key)
}

// firstWords is the start of a reason, for grouping.
func firstWords(s string) string {
	w := strings.Fields(s)
	if len(w) > 3 {
		w = w[:3]
	}
	return strings.Join(w, "_")
}

// takeovers counts rec's reclaims, and of them those whose previous run
// was alive: it noted its late outcome after the reclaim (its message had
// been redelivered while it worked on it), as opposed to a run whose
// dispatcher was killed.
func takeovers(rec state.Record) (reclaims, live int) {
	owner := ""
	for i, h := range rec.History {
		switch h.Action {
		case state.Claim:
			owner = h.Actor
		case state.Reclaim:
			reclaims++
			prev := owner
			owner = h.Actor
			for _, later := range rec.History[i+1:] {
				if later.Action == state.Note && later.Actor == prev && strings.HasPrefix(later.Detail, "late outcome ignored") {
					live++
					break
				}
			}
		}
	}
	return reclaims, live
}
