package dispatcher

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/outcome"
)

// A 429 whose Retry-After is a year holds a learned limit's growth for
// autoHoldMax at most: the target's learned share on a replica serves
// every account, and one account's answer must not keep it down for all
// of them until a restart.
func TestAFarRetryAfterHoldsALearnedLimitBriefly(t *testing.T) {
	a := newAutoLimit(1, 10, 8, false, nil)
	p, _, err := a.acquire(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	p.done(outcome.RetryAfter(365*24*time.Hour, errors.New("429 Too Many Requests")), true)
	a.mu.Lock()
	hold := time.Until(a.holdTill)
	a.mu.Unlock()
	if hold > autoHoldMax || hold < autoHoldMax-time.Minute {
		t.Fatalf("a Retry-After of a year: want growth held for %s, got %s", autoHoldMax, hold)
	}
}

// A learned limit cut by a refusal is stored at once, however soon after
// the last store: its growth is stored at most every autoSaveEvery, and
// a cut held back as long was lost to a kill in between, the next owner
// starting from the limit the provider had just refused.
func TestACutLearnedLimitIsStoredAtOnce(t *testing.T) {
	saved := make(chan int, 8)
	a := newAutoLimit(1, 40, 40, true, func(n int) { saved <- n })
	var ps []*autoPermit
	for range 10 {
		p, _, err := a.acquire(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	ps[0].done(outcome.RetryAfter(time.Second, errors.New("429 Too Many Requests")), true)
	select {
	case n := <-saved:
		if n >= 40 {
			t.Fatalf("want the cut limit stored, got %d", n)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a cut right after the last store: want it stored at once, nothing was")
	}
	for _, p := range ps[1:] {
		p.drop()
	}
}
