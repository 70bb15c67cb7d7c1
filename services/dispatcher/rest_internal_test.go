package dispatcher

import (
	"testing"
	"time"
)

// A tail's loop that has nothing to do ends rather than wait, unless a
// poke came while it decided: then it goes round at once. Taking that
// poke's wake and then waiting for another would leave the tail asleep
// with work to do until some later poke.
func TestRestingLoopLosesNoPoke(t *testing.T) {
	t.Parallel()
	tl := &tail{s: &Service{runCtx: t.Context()}, wake: make(chan struct{}, 1), quit: make(chan struct{}), running: true}
	tl.poke() // a settlement, say, while the loop runs: it only wakes it
	if tl.running != true || len(tl.wake) != 1 {
		t.Fatalf("a poke of a running loop: want a wake and the loop left running, got running %v, %d wakes", tl.running, len(tl.wake))
	}
	round := make(chan bool, 1)
	go func() { round <- tl.pause(-1) }()
	select {
	case goOn := <-round:
		if !goOn {
			t.Fatal("a loop woken while it decided to rest ended")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a loop woken while it decided to rest is waiting for another poke")
	}
	if !tl.running {
		t.Fatal("a loop that goes round must stay marked running, or a poke would start a second one")
	}
	if tl.pause(-1) {
		t.Fatal("a loop with nothing to do and no poke must end")
	}
	if tl.running {
		t.Fatal("an ended loop must be marked ended, so that the next poke starts one")
	}
}
