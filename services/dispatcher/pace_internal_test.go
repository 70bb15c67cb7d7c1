package dispatcher

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go/ratelimiter"

	"github.com/tenaz/tenaz/pkg/target"
)

// Calls whose permits pass while the process stalls take new permits
// rather than go out together: after a stall, an account's calls are
// still spaced at its rate.
func TestPacerSpacesCallsThatWokeLate(t *testing.T) {
	t.Parallel()
	const interval = 100 * time.Millisecond
	rl := ratelimiter.NewSmoothBuilderWithMaxRate[target.Response](interval).WithMaxWaitTime(time.Hour).Build()
	stallEnd := time.Now().Add(470 * time.Millisecond)
	p := &pacer{rl: rl, interval: interval, until: func(ctx context.Context, t time.Time) error {
		// The process stalls until stallEnd: every sleep due before it
		// ends then.
		return sleepUntil(ctx, later(t, stallEnd))
	}}
	var mu sync.Mutex
	var went []time.Time
	var wg sync.WaitGroup
	for range 5 { // permits due at 0, 100, 200, 300 and 400 ms
		wg.Go(func() {
			if err := p.wait(context.Background()); err != nil {
				t.Error(err)
			}
			mu.Lock()
			went = append(went, time.Now())
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.SortFunc(went, func(a, b time.Time) int { return a.Compare(b) })
	for i := 1; i < len(went); i++ {
		if gap := went[i].Sub(went[i-1]); gap < interval*8/10 {
			t.Fatalf("calls %d and %d went %s apart after the stall, want about %s", i, i+1, gap, interval)
		}
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
