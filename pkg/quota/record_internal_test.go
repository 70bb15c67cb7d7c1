package quota

import (
	"maps"
	"testing"
	"time"
)

// A replica taken for dead gives up its place in line at once, so the
// others do not wait for its turn, and its slots only once its calls can
// no longer run.
func TestPruneDropsTheDeadsTurnBeforeItsSlots(t *testing.T) {
	r := record{Held: map[string]int{"a": 2, "b": 1}, Queue: map[string]uint64{"a": 1, "b": 2}}
	live, counted := []string{"b"}, []string{"a", "b"}
	if !r.turn(live, "b") {
		t.Fatal("b: want its turn, a being dead")
	}
	r.prune(live, counted, "b")
	if want := map[string]int{"a": 2, "b": 1}; !maps.Equal(r.Held, want) {
		t.Fatalf("want a's slots kept while it is counted, held %v", r.Held)
	}
	if want := map[string]uint64{"b": 2}; !maps.Equal(r.Queue, want) {
		t.Fatalf("want a out of the line, queue %v", r.Queue)
	}
	if got := r.othersHeld(counted, "b"); got != 2 {
		t.Fatalf("want a's 2 calls counted, got %d", got)
	}
	r.prune(live, live, "b")
	if want := map[string]int{"b": 1}; !maps.Equal(r.Held, want) {
		t.Fatalf("want a's slots forgotten once it is not counted, held %v", r.Held)
	}
}

// A Retry-After holds a learned concurrency from growing back for
// learnHoldMax at most. Before, one answer to one account's call
// (Retry-After: a year, the most outcome takes) held a shared target's
// limit, every account's, down for a year.
func TestRetryAfterHoldsRegrowthForAWhileOnly(t *testing.T) {
	ln := &line{q: &Quotas{}, lim: Limit{Learn: &Learn{Min: 1, Max: 10, Start: 10}}}
	ln.heard(Answer{Refused: true, RetryAfter: 365 * 24 * time.Hour}, 5, nil)
	var r record
	ln.learnInto(&r, time.Now())
	if hold := time.Until(time.Unix(0, r.Hold)); hold > learnHoldMax || hold < learnHoldMax-time.Minute {
		t.Fatalf("a Retry-After of a year: want regrowth held for %s, got %s", learnHoldMax, hold)
	}

	// A hold of a year stored by a version without the bound is cut too.
	stored := record{Hold: time.Now().Add(365 * 24 * time.Hour).UnixNano()}
	ok := &line{q: &Quotas{}, lim: Limit{Learn: &Learn{Min: 1, Max: 10, Start: 10}}}
	ok.heard(Answer{OK: true}, 1, nil)
	ok.learnInto(&stored, time.Now())
	if hold := time.Until(time.Unix(0, stored.Hold)); hold > learnHoldMax {
		t.Fatalf("a stored hold of a year: want it cut to %s, got %s", learnHoldMax, hold)
	}
}
