package poller

import (
	"context"
	"sync"
	"time"

	"github.com/tenaz/tenaz/pkg/quota"
)

// A poll is a request to its target's provider as a delivery is, and the
// provider counts both against the one key tenaz calls it with. So a poll
// takes a token of the target's provider-wide rate (targets.<t>.rate)
// from the record every dispatcher replica's calls take theirs from
// (pkg/quota, quota.Take): calls and polls together, over every replica
// of both services, keep to the rate. A target's concurrency is not
// taken: its slots are held by dispatcher replicas, counted while their
// owners' heartbeats say they live, which a poller has none of; polls
// are bounded by poller.concurrency per replica.
//
// A poll that finds no token waits for one in its worker, as long as the
// polls waiting here before it can go within waitMax at the rate, and
// for waitMax at most; otherwise it is put off: its timer is set again
// for when the rate can take it, and the worker goes on. Waiting longer,
// a throttled target's polls would hold the workers that every other
// target's polls and deadlines share.

// waitMax is the longest a poll waits for a token in its worker.
const waitMax = time.Second

// pacer is this replica's side of the targets' rates: the quotas, and
// for each limited key the polls waiting for a token and the time it
// puts its next poll off to, so that polls put off together are spread
// over the seconds the rate needs for them.
type pacer struct {
	q *quota.Quotas

	mu      sync.Mutex
	waiting map[string]int
	next    map[string]time.Time
}

func newPacer(q *quota.Quotas) *pacer {
	return &pacer{q: q, waiting: map[string]int{}, next: map[string]time.Time{}}
}

// wait returns once a poll of the target whose quota record is key may
// go (zero), or the time it is put off to; l is the target's limit, and
// throttled is called once if the poll does not go at once.
func (p *pacer) wait(ctx context.Context, key string, l quota.Limit, throttled func()) (time.Time, error) {
	every := time.Duration(float64(time.Second) / l.Rate)
	now := time.Now()
	p.mu.Lock()
	ahead := p.waiting[key]
	if time.Duration(ahead)*every >= waitMax {
		at := p.putOffLocked(key, every, now.Add(time.Duration(ahead)*every))
		p.mu.Unlock()
		throttled()
		return at, nil
	}
	p.waiting[key]++
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.waiting[key]--
		p.mu.Unlock()
	}()
	deadline := now.Add(waitMax)
	for first := true; ; first = false {
		ok, wait, err := p.q.Take(ctx, key, l)
		if err != nil || ok {
			return time.Time{}, err
		}
		if first {
			throttled()
		}
		if at := time.Now().Add(wait); at.After(deadline) {
			p.mu.Lock()
			defer p.mu.Unlock()
			return p.putOffLocked(key, every, at), nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return time.Time{}, ctx.Err()
		case <-t.C:
		}
	}
}

// putOffLocked is the time a poll that could go at earliest at the
// earliest is put off to: after the polls put off before it, every
// apart. Callers hold p.mu.
func (p *pacer) putOffLocked(key string, every time.Duration, earliest time.Time) time.Time {
	at := earliest
	if n := p.next[key]; n.After(at) {
		at = n
	}
	p.next[key] = at.Add(every)
	return at
}
