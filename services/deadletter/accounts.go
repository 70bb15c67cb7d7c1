package deadletter

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tenaz/tenaz/pkg/accounts"
	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/pkg/owner"
	"github.com/tenaz/tenaz/pkg/quota"
)

// The screen's accounts view: which dispatcher replica owns each account
// (the holder of its lease in tenaz_owners), the replicas that heartbeat
// there, each account's configured limits and its breakers. One replica
// owns an account at a time and counts its concurrency, rate and breaker
// for the whole cluster, so this is where an operator sees who serves
// whom.

// ownersTimeout bounds the read of tenaz_owners for one page.
const ownersTimeout = 2 * time.Second

// accountsData is the accounts page.
type accountsData struct {
	Replicas []replicaRow
	Accounts []accountRow
	Targets  []targetRow // targets with a provider-wide limit, shared by every account
	Default  limitsRow   // what an account that is not configured gets ("*")
	Error    string      // tenaz_owners could not be read: owners unknown
	// Actions are the latest operator actions on accounts and breakers
	// (the audit); ActionsError says why they could not be read.
	Actions      []ops.Action
	ActionsError string
	// Config is the config in force in this process and how its last
	// reload went (pkg/live).
	Config ops.ConfigStatus
}

type replicaRow struct {
	owner.Replica
	Owns int // accounts whose lease it holds
}

type limitsRow struct {
	Concurrency string // a number, or "auto (min–max)"
	Rate        string // as configured, or "unlimited"
	Failures    int
	Cooldown    string
	DeadLetters int64 // the entries it may keep in DEAD (0: no bound of its own)
}

type accountRow struct {
	Account    string
	Owner      string // "" when no replica holds its lease (idle, or not consumed yet)
	OwnerLive  bool
	Configured bool // it has an entry of its own under accounts:
	Limits     limitsRow
	Learned    int // under "auto": the concurrency its owner last learned (0: none stored yet)
	Breakers   []breakerCell
	// Paused is an operator's pause in force (nil: none); HeldUntil is
	// when its dispatch goes on again (the pause's or a breaker's end).
	Paused    *ops.AccountPause
	HeldUntil *time.Time
}

// targetRow is a target's provider-wide limit (targets.<t>.rate and
// .concurrency), counted over every account and replica.
type targetRow struct {
	Target      string
	Rate        string // "unlimited" when unset
	Concurrency string // as configured: a number, "auto (min–max)", or "unlimited"
	// Now is the concurrency allowed now (learned under "auto") and
	// InFlight the calls in flight over the live replicas, from its record
	// in tenaz_quotas; Now is 0 when it has none (unlimited, or unread).
	Now, InFlight int
}

type breakerCell struct {
	Target, State string
}

// limitsOf is the limits of account under cfg.
func limitsOf(cfg *config.Config, account string) limitsRow {
	a := cfg.Account(account)
	r := limitsRow{Concurrency: strconv.Itoa(a.MaxConcurrency()), Rate: "unlimited", Failures: a.Breaker.Failures, Cooldown: a.Breaker.Cooldown.D().String(),
		DeadLetters: cfg.DeadLettersOf(account)}
	switch {
	case a.Concurrency.Auto():
		r.Concurrency = fmt.Sprintf("auto (%d–%d)", a.ConcurrencyMin, a.ConcurrencyMax)
	case a.Concurrency <= 0:
		r.Concurrency = "8" // the dispatcher's lane default
	}
	if a.Rate.PerSecond > 0 {
		r.Rate = a.Rate.Text
		if r.Rate == "" {
			r.Rate = fmt.Sprintf("%g/s", a.Rate.PerSecond)
		}
	}
	return r
}

// accounts reads who owns what and lists every account known from the
// config, the leases and the breakers.
func (s *Service) accounts(ctx context.Context) accountsData {
	cfg := s.live.Load() // the limits in force, reloads and the accounts bucket included
	d := accountsData{Default: limitsOf(cfg, config.DefaultAccountName), Config: s.live.Status()}
	rctx, cancel := context.WithTimeout(ctx, ownersTimeout)
	defer cancel()
	v, err := owner.Read(rctx, s.js, s.cfg.Prefix, 0)
	if err != nil {
		d.Error = err.Error()
	}
	live := map[string]bool{}
	owns := map[string]int{}
	for _, h := range v.Leases {
		owns[h]++
	}
	liveNames := []string{}
	for _, r := range v.Replicas {
		live[r.Name] = r.Live
		if r.Live {
			liveNames = append(liveNames, r.Name)
		}
		d.Replicas = append(d.Replicas, replicaRow{Replica: r, Owns: owns[r.Name]})
	}
	names := map[string]bool{}
	for a := range cfg.Accounts {
		if a != config.DefaultAccountName {
			names[a] = true
		}
	}
	for a := range v.Leases {
		names[a] = true
	}
	brk := map[string][]breakerCell{}
	for _, c := range s.brk.List() {
		names[c.Account] = true
		brk[c.Account] = append(brk[c.Account], breakerCell{Target: c.Target, State: string(c.State)})
	}
	pauses := map[string]accounts.Pause{}
	if ps, err := s.pauses.List(rctx); err == nil {
		for _, p := range ps {
			pauses[p.Account] = p
			names[p.Account] = true
		}
	} else {
		d.ActionsError = err.Error()
	}
	if acts, err := s.actions(rctx, ops.ActionsRequest{Limit: 20}); err == nil {
		d.Actions = acts.Items
	} else {
		d.ActionsError = err.Error()
	}
	for a := range names {
		_, configured := cfg.Accounts[a]
		p, paused := pauses[a]
		held := s.accountReply(a, p, paused)
		cells := brk[a]
		slices.SortFunc(cells, func(x, y breakerCell) int { return strings.Compare(x.Target, y.Target) })
		d.Accounts = append(d.Accounts, accountRow{Account: a, Owner: v.Leases[a], OwnerLive: live[v.Leases[a]], Configured: configured, Learned: v.Learned[a],
			Limits: limitsOf(cfg, a), Breakers: cells, Paused: held.Paused, HeldUntil: held.HeldUntil})
	}
	slices.SortFunc(d.Accounts, func(x, y accountRow) int { return strings.Compare(x.Account, y.Account) })
	for name, t := range cfg.Targets {
		if !t.Limited() {
			continue
		}
		r := targetRow{Target: name, Rate: "unlimited", Concurrency: "unlimited"}
		if !t.Rate.Unlimited() {
			r.Rate = t.Rate.String()
		}
		switch {
		case t.Concurrency.Auto():
			r.Concurrency = fmt.Sprintf("auto (%d–%d)", t.ConcurrencyMin, t.ConcurrencyMax)
		case t.Concurrency > 0:
			r.Concurrency = t.Concurrency.String()
		}
		if lim := quota.OfTarget(t); lim.Concurrency > 0 || lim.Learn != nil {
			u, err := quota.Read(rctx, s.js, s.cfg.Prefix, quota.TargetKey(name), lim, liveNames)
			if err == nil {
				r.Now, r.InFlight = u.Concurrency, u.InFlight
			}
		}
		d.Targets = append(d.Targets, r)
	}
	slices.SortFunc(d.Targets, func(x, y targetRow) int { return strings.Compare(x.Target, y.Target) })
	return d
}
