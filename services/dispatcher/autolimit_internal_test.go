package dispatcher

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/outcome"
)

// A 429 whose Retry-After is a year holds a learned limit's growth for
// autoHoldMax at most: the target's learned share on a replica serves
// every account, and one account's answer must not keep it down for all
// of them until a restart.
func TestAFarRetryAfterHoldsALearnedLimitBriefly(t *testing.T) {
	a := newAutoLimit(1, 10, 8, false, nil)
	p, _, err := a.acquire(context.Background(), nil, "acme")
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
		p, _, err := a.acquire(context.Background(), nil, "acme")
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

// A learned share serves the accounts waiting for it in turn: one
// account's backlog of calls does not keep another's one call waiting
// behind all of it. Freed slots went to whichever waiter woke first,
// which was nearly always one of the backlog's.
func TestALearnedShareServesAccountsInTurn(t *testing.T) {
	a := newAutoLimit(1, 1, 1, false, nil)
	held, _, err := a.acquire(context.Background(), nil, "held")
	if err != nil {
		t.Fatal(err)
	}
	type grant struct {
		account string
		p       *autoPermit
	}
	served := make(chan grant, 32)
	wait := func(account string) {
		go func() {
			p, _, err := a.acquire(context.Background(), nil, account)
			if err != nil {
				t.Error(err)
				return
			}
			served <- grant{account, p}
		}()
	}
	queued := func(account string, n int) {
		t.Helper()
		natstest.Eventually(t, 5*time.Second, func() bool {
			a.mu.Lock()
			defer a.mu.Unlock()
			return len(a.waiting[account]) == n
		}, "want %d of %s's calls waiting", n, account)
	}
	for i := range 20 {
		wait("backlog")
		queued("backlog", i+1)
	}
	wait("single")
	queued("single", 1)

	held.done(nil, true)
	at := -1 // single's place among the calls served
	for i := range 21 {
		var g grant
		select {
		case g = <-served:
		case <-time.After(5 * time.Second):
			t.Fatal("a freed slot: want a waiting call served")
		}
		if g.account == "single" {
			at = i
		}
		g.p.done(nil, true)
	}
	if at > 1 {
		t.Fatalf("single's one call was served after %d of backlog's, want at most 1", at)
	}
}
