package poller

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/tenaz/tenaz/pkg/metrics"
	"github.com/tenaz/tenaz/pkg/owner"
	"github.com/tenaz/tenaz/pkg/quota"
	"github.com/tenaz/tenaz/pkg/target"
)

// A poll is a request to its target's provider as a delivery is, and the
// provider counts both against the one key tenaz calls it with. So a poll
// takes what a call takes of the target's provider-wide limits, from the
// records every dispatcher replica's calls take theirs from (pkg/quota):
//   - a token of its rate (targets.<t>.rate, quota.Take);
//   - with a concurrency (targets.<t>.concurrency), a token and a slot
//     together (quota.Acquire), held until the poll's answer, which
//     teaches an "auto" concurrency as a call's does. A poller replica
//     holds its slots as a guest of the dispatchers' replicas
//     (pkg/owner): its heartbeat keeps them counted, and a killed
//     replica's slots come back once it is taken for dead.
//
// Calls and polls together, over every replica of both services, keep to
// the limits.
//
// A poll that finds no token or slot waits for one in its worker, for
// waitMax at most, and only while few enough of the target's polls wait
// here before it: those a rate serves within waitMax, as many as the
// concurrency has slots. Otherwise it is put off: its timer is set again
// for when the rate can take it, or for the next poll interval when the
// target's slots are taken, and the worker goes on. Waiting longer, a
// throttled target's polls would hold the workers that every other
// target's polls and deadlines share.

// waitMax is the longest a poll waits for a token or a slot in its worker.
const waitMax = time.Second

// pacer is this replica's side of the targets' limits: the quotas, and
// for each limited key the polls waiting here and the time it puts its
// next poll off to, so that polls put off together are spread over the
// seconds the rate needs for them.
type pacer struct {
	q *quota.Quotas
	g *owner.Group // the poller's heartbeat among the dispatchers' (a guest)

	mu      sync.Mutex
	waiting map[string]int
	next    map[string]time.Time
}

func newPacer(q *quota.Quotas, g *owner.Group) *pacer {
	return &pacer{q: q, g: g, waiting: map[string]int{}, next: map[string]time.Time{}}
}

// gate is what a poll waited for: go (release, called with the poll's
// outcome, gives back a slot taken), or the time it is put off to and
// why (metrics.PutOffRate, PutOffConcurrency or PutOffNotCurrent).
type gate struct {
	release func(error)
	until   time.Time
	why     string
}

// noSlot is the release of a poll that took no slot.
func noSlot(error) {}

// wait returns once a poll of the target whose quota record is key may
// go, or the time it is put off to; l is the target's limit, every its
// poll interval, and throttled is called once if the poll does not go
// at once.
func (p *pacer) wait(ctx context.Context, key string, l quota.Limit, every time.Duration, throttled func()) (gate, error) {
	if l.Concurrency <= 0 && l.Learn == nil {
		return p.token(ctx, key, l, throttled)
	}
	return p.slot(ctx, key, l, every, throttled)
}

// token waits for a token of a rate-only target.
func (p *pacer) token(ctx context.Context, key string, l quota.Limit, throttled func()) (gate, error) {
	spacing := time.Duration(float64(time.Second) / l.Rate)
	now := time.Now()
	leave, ahead := p.enter(key)
	defer leave()
	if time.Duration(ahead)*spacing >= waitMax {
		throttled()
		return p.putOff(key, spacing, now.Add(time.Duration(ahead)*spacing)), nil
	}
	deadline := now.Add(waitMax)
	for first := true; ; first = false {
		ok, wait, err := p.q.Take(ctx, key, l)
		if err != nil {
			return gate{}, err
		}
		if ok {
			return gate{release: p.tokenBack(key, l)}, nil
		}
		if first {
			throttled()
		}
		if at := time.Now().Add(wait); at.After(deadline) {
			return p.putOff(key, spacing, at), nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return gate{}, ctx.Err()
		case <-t.C:
		}
	}
}

// slot waits for a token and a slot of a target with a concurrency.
func (p *pacer) slot(ctx context.Context, key string, l quota.Limit, every time.Duration, throttled func()) (gate, error) {
	leave, ahead := p.enter(key)
	defer leave()
	slots := max(1, l.Concurrency)
	if l.Learn != nil {
		slots = max(1, l.Learn.Min)
	}
	busy := func() gate {
		return gate{until: time.Now().Add(every), why: metrics.PutOffConcurrency}
	}
	if ahead >= slots {
		throttled()
		return busy(), nil
	}
	wctx, cancel := context.WithTimeout(ctx, waitMax)
	defer cancel()
	lapses := p.g.Lapses()
	release, waited, err := p.q.Acquire(wctx, key, l)
	if waited {
		throttled()
	}
	switch {
	case err == nil && !p.g.CurrentSince(lapses):
		// The other replicas count a slot while its holder's heartbeat
		// is current; once it is not, they may have stopped counting
		// this one's and given it to another call. The poll waits, as a
		// dispatcher's call does (it makes none unless current).
		release(quota.Answer{NotMade: true})
		return gate{until: time.Now().Add(every), why: metrics.PutOffNotCurrent}, nil
	case err == nil:
		return gate{release: func(err error) { release(answerOf(err)) }}, nil
	case ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
		return busy(), nil
	}
	return gate{}, err
}

// tokenBack is the release of a poll that took a token of a rate-only
// target: one whose request was not sent gives it back.
func (p *pacer) tokenBack(key string, l quota.Limit) func(error) {
	return func(err error) {
		if !errors.Is(err, target.ErrNotSent) {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.q.GiveBack(ctx, key, l) // failed: the token stays spent, as for a poll made
	}
}

// answerOf is what a poll's outcome says of its target's capacity: one
// whose request could not be made gives its token back.
func answerOf(err error) quota.Answer {
	if errors.Is(err, target.ErrNotSent) {
		return quota.Answer{NotMade: true}
	}
	return quota.AnswerOf(err)
}

// enter counts a poll of key waiting here; ahead is how many were
// already. leave uncounts it.
func (p *pacer) enter(key string) (leave func(), ahead int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ahead = p.waiting[key]
	p.waiting[key]++
	return func() {
		p.mu.Lock()
		p.waiting[key]--
		p.mu.Unlock()
	}, ahead
}

// putOff is the gate of a poll of a rate-limited key that could go at
// earliest at the earliest: after the polls put off before it, spacing
// apart.
func (p *pacer) putOff(key string, spacing time.Duration, earliest time.Time) gate {
	p.mu.Lock()
	defer p.mu.Unlock()
	at := earliest
	if n := p.next[key]; n.After(at) {
		at = n
	}
	p.next[key] = at.Add(spacing)
	return gate{until: at, why: metrics.PutOffRate}
}
