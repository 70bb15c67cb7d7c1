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
