package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/names"
)

// breakerOpen is one opening of a breaker as stored in tenaz_breakers.
type breakerOpen struct {
	openedAt, openUntil time.Time
	reason              string
}

// breakerLog watches every account + target breaker by reading the
// bucket twice a second (a read loop, not a watch, so that nats-server
// restarts need no special care): an open lasts a whole cooldown, so no
// opening goes unseen unless nats-server is down for longer than that,
// and then no breaker can change either.
type breakerLog struct {
	mu    sync.Mutex
	opens map[string][]breakerOpen // "<account>.<target>" → openings, in order
	reads int
	fails int
}

type breakerRecord struct {
	State     string    `json:"state"`
	OpenedAt  time.Time `json:"opened_at"`
	OpenUntil time.Time `json:"open_until"`
	Reason    string    `json:"reason"`
}

func (b *breakerLog) run(ctx context.Context, js jetstream.JetStream, accounts []string) {
	b.mu.Lock()
	b.opens = map[string][]breakerOpen{}
	b.mu.Unlock()
	var kv jetstream.KeyValue
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if kv == nil {
			c, cancel := context.WithTimeout(ctx, 2*time.Second)
			kv, _ = js.KeyValue(c, names.BucketBreakers)
			cancel()
			if kv == nil {
				continue
			}
		}
		for _, a := range accounts {
			for _, tg := range targets {
				key := a + "." + tg
				c, cancel := context.WithTimeout(ctx, 2*time.Second)
				e, err := kv.Get(c, key)
				cancel()
				b.mu.Lock()
				b.reads++
				if err != nil {
					if err != jetstream.ErrKeyNotFound {
						b.fails++
					}
					b.mu.Unlock()
					continue
				}
				var r breakerRecord
				if json.Unmarshal(e.Value(), &r) == nil && r.State == "open" && !r.OpenedAt.IsZero() {
					os := b.opens[key]
					if len(os) == 0 || !os[len(os)-1].openedAt.Equal(r.OpenedAt) {
						b.opens[key] = append(os, breakerOpen{openedAt: r.OpenedAt, openUntil: r.OpenUntil, reason: r.Reason})
					}
				}
				b.mu.Unlock()
			}
		}
	}
}

func (b *breakerLog) snapshot() map[string][]breakerOpen {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string][]breakerOpen, len(b.opens))
	for k, v := range b.opens {
		out[k] = slices.Clone(v)
	}
	return out
}

// inFlightSlack is how long after a breaker opens a call may still arrive
// that was allowed just before (its permit predates the open; the other
// replica learns of the open through its watch a moment later).
const inFlightSlack = time.Second

// breakerReport is what the breaker checks found.
type breakerReport struct {
	opens          int // openings seen
	opensInOutage  int
	callsWhileOpen int      // calls that arrived while a breaker was open, past the slack: must be 0
	probes         int      // calls at a down account + target after its breaker first opened
	maxPerCooldown int      // most such calls within one cooldown
	tooMany        int      // windows with more than one: must be 0
	overFailures   []string // outages with more failed calls before the opening than the bound: must be none
	mostFailed     int      // most failed calls of one account + target in an outage before its breaker opened
	mostFailedMax  int      // the bound of that outage
	details        []string
}

// failureBound is how many failed calls of one account + target may reach
// the provider between a close (or an outage's start) and the next open.
// The failure count is one for the whole cluster (pkg/breaker), so
// `failures` of them open it, plus the calls already in flight when the
// count reaches it: at most concurrency - 1 others of the account hold a
// slot, in their call or waiting in it for the account's rate, allowed
// before the open (a call allowed and still waiting for a slot is given
// back, not made). A kill of a dispatcher or
// of nats-server while the failures mount may leave up to concurrency
// calls made whose failure is never counted (the calls in flight at the
// killed owner, or those whose count could not be written), so each such
// stop in the window adds concurrency.
func failureBound(concurrency, stops int) int {
	return breakerFailures + concurrency - 1 + concurrency*stops
}

// checkBreakers compares the deliveries with the breakers' openings.
// While a breaker is open no call may arrive (past inFlightSlack); during
// an outage, before the breaker opens, at most failureBound failed calls
// arrive, over every dispatcher; once it has opened, calls are probes, at
// most one per cooldown: in any window of one cooldown there is at most one
// call (the probe claim's expiry, probeTimeout, is longer than the
// cooldowns used, so a killed prober's successor does not break this
// either). stops are the times of every kill or stop of a dispatcher or of
// nats-server.
func checkBreakers(calls []callRec, opens map[string][]breakerOpen, outages map[string]window, cooldown time.Duration,
	lim map[string]limits, stops []time.Time) breakerReport {
	var rep breakerReport
	byKey := map[string][]time.Time{}
	downByKey := map[string][]callRec{}
	for _, c := range calls {
		k := c.account + "." + c.target
		byKey[k] = append(byKey[k], c.at)
		if c.down {
			downByKey[k] = append(downByKey[k], c)
		}
	}
	for k, os := range opens {
		rep.opens += len(os)
		for _, o := range os {
			for _, at := range byKey[k] {
				if at.After(o.openedAt.Add(inFlightSlack)) && at.Before(o.openUntil) {
					rep.callsWhileOpen++
					if len(rep.details) < 10 {
						rep.details = append(rep.details, fmt.Sprintf("%s: call at %s while open %s–%s (%s)",
							k, at.Format("15:04:05.000"), o.openedAt.Format("15:04:05.000"), o.openUntil.Format("15:04:05.000"), o.reason))
					}
				}
			}
		}
	}
	for account, w := range outages {
		for _, tg := range targets {
			k := account + "." + tg
			var first time.Time
			for _, o := range opens[k] {
				if w.has(o.openedAt) {
					rep.opensInOutage++
					if first.IsZero() {
						first = o.openedAt
					}
				}
			}
			down := downByKey[k]
			slices.SortFunc(down, func(a, b callRec) int { return a.at.Compare(b.at) })
			// The failed calls before the opening (the in-flight ones may
			// arrive just after it), or all of them if it never opened.
			until := w.to
			if !first.IsZero() {
				until = first.Add(inFlightSlack)
			}
			failed, senders := 0, map[string]int{}
			for _, c := range down {
				if c.at.Before(until) {
					failed++
					senders[c.sender]++
				}
			}
			n := 0
			for _, at := range stops {
				if !at.Before(w.from) && at.Before(until) {
					n++
				}
			}
			bound := failureBound(lim[account].concurrency, n)
			if failed > rep.mostFailed {
				rep.mostFailed, rep.mostFailedMax = failed, bound
			}
			if failed > bound {
				opened := "never opened"
				if !first.IsZero() {
					opened = "opened at " + first.Format("15:04:05.000")
				}
				rep.overFailures = append(rep.overFailures, fmt.Sprintf("%s: %d failed calls in its outage (%s–%s), %s; bound %d (%d stops); by process %s",
					k, failed, w.from.Format("15:04:05"), w.to.Format("15:04:05"), opened, bound, n, counts(senders)))
			}
			if first.IsZero() {
				continue
			}
			var probes []time.Time
			for _, c := range down {
				if c.at.After(first.Add(inFlightSlack)) {
					probes = append(probes, c.at)
				}
			}
			rep.probes += len(probes)
			// Most calls within one cooldown (a little less: the timers of
			// two processes on one clock).
			win := cooldown - 200*time.Millisecond
			j := 0
			for i := range probes {
				for probes[i].Sub(probes[j]) >= win {
					j++
				}
				if n := i - j + 1; n > rep.maxPerCooldown {
					rep.maxPerCooldown = n
				}
				if i > 0 && probes[i].Sub(probes[i-1]) < win {
					rep.tooMany++
					if len(rep.details) < 20 {
						rep.details = append(rep.details, fmt.Sprintf("%s: probes at %s and %s, less than a cooldown (%s) apart",
							k, probes[i-1].Format("15:04:05.000"), probes[i].Format("15:04:05.000"), cooldown))
					}
				}
			}
		}
	}
	return rep
}
