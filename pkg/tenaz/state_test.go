package tenaz_test

import (
	"testing"

	"github.com/tenaz/tenaz/pkg/tenaz"
)

func TestStates(t *testing.T) {
	t.Parallel()
	terminal := map[tenaz.State]bool{tenaz.StateDone: true, tenaz.StateCancelled: true}
	parked := map[tenaz.State]bool{tenaz.StateDead: true, tenaz.StateManualReview: true}
	if len(tenaz.States) != 10 {
		t.Errorf("want the 10 states of docs/state-machine.md, got %d: %v", len(tenaz.States), tenaz.States)
	}
	seen := map[tenaz.State]bool{}
	for _, s := range tenaz.States {
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
		p, err := tenaz.ParseState(string(s))
		if err != nil || p != s {
			t.Errorf("ParseState(%q): want (%q, nil), got (%q, %v)", s, s, p, err)
		}
	}
	for _, bad := range []string{"", "Done", "DONE", "finished", "awaiting-callback", " pending"} {
		if tenaz.State(bad).Valid() {
			t.Errorf("State(%q).Valid(): want false, got true", bad)
		}
		if p, err := tenaz.ParseState(bad); err == nil || p != "" {
			t.Errorf("ParseState(%q): want (\"\", error), got (%q, %v)", bad, p, err)
		}
	}
}
