package state_test

import (
	"testing"

	"github.com/tenaz/tenaz/pkg/state"
)

func TestStates(t *testing.T) {
	t.Parallel()
	terminal := map[state.State]bool{state.Done: true, state.Cancelled: true}
	parked := map[state.State]bool{state.Dead: true, state.ManualReview: true}
	if len(state.States) != 10 {
		t.Errorf("want the 10 states of docs/state-machine.md, got %d: %v", len(state.States), state.States)
	}
	seen := map[state.State]bool{}
	for _, s := range state.States {
		if seen[s] {
			t.Errorf("state %q listed twice", s)
		}
		seen[s] = true
		if !s.Valid() {
			t.Errorf("%q.Valid(): want true, got false", s)
		}
		if got := s.Terminal(); got != terminal[s] {
			t.Errorf("%q.Terminal(): want %v, got %v", s, terminal[s], got)
		}
		if got := s.Parked(); got != parked[s] {
			t.Errorf("%q.Parked(): want %v, got %v", s, parked[s], got)
		}
		if s.Terminal() && s.Parked() {
			t.Errorf("%q is both terminal and parked", s)
		}
		p, err := state.ParseState(string(s))
		if err != nil || p != s {
			t.Errorf("ParseState(%q): want (%q, nil), got (%q, %v)", s, s, p, err)
		}
	}
	for _, bad := range []string{"", "Done", "DONE", "finished", "awaiting-callback", " pending"} {
		if state.State(bad).Valid() {
			t.Errorf("State(%q).Valid(): want false, got true", bad)
		}
		if p, err := state.ParseState(bad); err == nil || p != "" {
			t.Errorf("ParseState(%q): want (\"\", error), got (%q, %v)", bad, p, err)
		}
	}
}
