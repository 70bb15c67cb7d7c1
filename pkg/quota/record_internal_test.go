package quota

import (
	"maps"
	"testing"
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
