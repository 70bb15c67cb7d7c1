package state_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tenaz/tenaz/pkg/state"
)

// deepCopy clones every reference field of r, so
// that a mutation of the input by Apply is caught.
func deepCopy(r state.Record) state.Record {
	c := r
	c.History = slices.Clone(r.History)
	if r.LastError != nil {
		e := *r.LastError
		c.LastError = &e
	}
	if r.NextRunAt != nil {
		n := *r.NextRunAt
		c.NextRunAt = &n
	}
	c.Result = slices.Clone(r.Result)
	return c
}

func genAction(t *rapid.T, now time.Time) state.Action {
	a := state.Action{
		Name:   rapid.SampledFrom(actions()).Draw(t, "action"),
		Seq:    rapid.Uint64().Draw(t, "seq"),
		Actor:  rapid.SampledFrom([]string{"", "dispatcher/a", "operator:alice"}).Draw(t, "actor"),
		Detail: rapid.OneOf(rapid.SampledFrom([]string{"", "why"}), rapid.StringN(0, 3*state.MaxDetail, -1)).Draw(t, "detail"),
	}
	if rapid.Bool().Draw(t, "has error") {
		a.Error = &state.ErrorInfo{Class: "transient", Message: "boom", HTTPStatus: rapid.SampledFrom([]int{0, 429, 503}).Draw(t, "status")}
	}
	if rapid.Bool().Draw(t, "has next run") {
		n := now.Add(time.Duration(rapid.IntRange(1, 3600).Draw(t, "in")) * time.Second)
		a.NextRunAt = &n
	}
	a.Reference = rapid.SampledFrom([]string{"", "ref_1"}).Draw(t, "reference")
	if rapid.Bool().Draw(t, "has result") {
		a.Result = json.RawMessage(`{"ok":true}`)
	}
	a.Stage = rapid.SampledFrom([]string{"", state.StagePrimary, state.StageFallback}).Draw(t, "stage")
	return a
}

// TestApplyProperties walks random action sequences from a fresh record and
// checks the invariants of every step.
func TestApplyProperties(t *testing.T) {
	t.Parallel()
	zones := []*time.Location{time.UTC, time.FixedZone("BRT", -3*3600), time.FixedZone("IST", 5*3600+1800)}
	rapid.Check(t, func(t *rapid.T) {
		now := t0
		create := rapid.SampledFrom([]state.ActionName{state.Accept, state.Delay}).Draw(t, "create")
		r, _, err := state.New(state.Record{ID: "ev_0123456789abcdefghijklmnop", Account: "acme", Kind: "k"}, state.Action{Name: create}, now)
		if err != nil {
			t.Fatalf("New(%s): %v", create, err)
		}
		// Optionally fill the history close to or past its bounds with
		// notes (short ones for MaxHistory, long ones for
		// MaxHistoryBytes), so that eviction is exercised.
		long := rapid.Bool().Draw(t, "long notes")
		for i := range rapid.SampledFrom([]int{0, 0, state.MaxHistory - 3, state.MaxHistory + 2}).Draw(t, "notes") {
			d := fmt.Sprint(i)
			if long {
				d = strings.Repeat("<", state.MaxDetail) // 6 bytes each in JSON
			}
			if r, _, err = state.Apply(r, state.Action{Name: state.Note, Detail: d}, now); err != nil {
				t.Fatalf("note from %s: %v", r.Status, err)
			}
		}
		first := r.History[0]
		steps := rapid.IntRange(1, 60).Draw(t, "steps")
		for range steps {
			now = now.Add(time.Duration(rapid.IntRange(0, 7200).Draw(t, "dt")) * time.Second)
			given := now.In(rapid.SampledFrom(zones).Draw(t, "zone"))
			a := genAction(t, now)
			before := deepCopy(r)
			next, effects, err := state.Apply(r, a, given)

			if !reflect.DeepEqual(r, before) {
				t.Fatalf("Apply(%s) mutated its input:\nbefore %+v\nafter  %+v", a.Name, before, r)
			}
			legal := state.Can(before.Status, a.Name)
			if before.Status.Terminal() && a.Name != state.Note && legal {
				t.Fatalf("%s is legal from terminal %s", a.Name, before.Status)
			}
			if !legal {
				if !errors.Is(err, state.ErrInvalidTransition) {
					t.Fatalf("%s from %s: want ErrInvalidTransition, got %v", a.Name, before.Status, err)
				}
				if !reflect.DeepEqual(next, before) || effects != nil {
					t.Fatalf("%s from %s: want the record unchanged, got %+v", a.Name, before.Status, next)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%s from %s: want legal, got %v", a.Name, before.Status, err)
			}
			rule := state.Table[a.Name]
			want := rule.To
			if want == "" {
				want = before.Status
			}
			if next.Status != want {
				t.Fatalf("%s from %s: want %s, got %s", a.Name, before.Status, want, next.Status)
			}
			if before.Status.Terminal() && next.Status != before.Status {
				t.Fatalf("terminal %s left for %s by %s", before.Status, next.Status, a.Name)
			}
			if !slices.Equal(effects, rule.Effects) {
				t.Fatalf("%s: want effects %v, got %v", a.Name, rule.Effects, effects)
			}
			checkHistory(t, a, before, next, now)
			if !reflect.DeepEqual(next.History[0], first) {
				t.Fatalf("first history entry changed: %+v -> %+v", first, next.History[0])
			}
			// Attempts.
			wantAttempts := before.Attempts
			switch a.Name {
			case state.Claim, state.Reclaim:
				wantAttempts++
			case state.Yield:
				wantAttempts--
			case state.Fallback, state.Replay:
				wantAttempts = 0
			}
			if next.Attempts != wantAttempts {
				t.Fatalf("%s: want attempts %d -> %d, got %d", a.Name, before.Attempts, wantAttempts, next.Attempts)
			}
			// Replays: only a replay counts, and it never goes back.
			wantReplays := before.Replays
			if a.Name == state.Replay {
				wantReplays++
			}
			if next.Replays != wantReplays {
				t.Fatalf("%s: want replays %d -> %d, got %d", a.Name, before.Replays, wantReplays, next.Replays)
			}
			// Clock: UpdatedAt is the given now, in UTC; CreatedAt never moves.
			if !next.UpdatedAt.Equal(given) || next.UpdatedAt.Location() != time.UTC {
				t.Fatalf("%s: want updated_at %v in UTC, got %v", a.Name, given, next.UpdatedAt)
			}
			if !next.CreatedAt.Equal(before.CreatedAt) || next.ID != before.ID {
				t.Fatalf("%s changed created_at or id", a.Name)
			}
			if next.Stage != state.StagePrimary && next.Stage != state.StageFallback {
				t.Fatalf("%s: stage %q", a.Name, next.Stage)
			}
			r = next
		}
	})
}

// checkHistory checks the history rules of one legal step: a repeat
// (repolls, the same note again) shares the last line and counts; any
// other step is one more entry ever written (Step), the timeline stays
// within MaxHistory and MaxHistoryBytes, and what is dropped to keep it
// there is notes and repolls first: a note never pushes out another step.
func checkHistory(t *rapid.T, a state.Action, before, next state.Record, now time.Time) {
	if b, _ := json.Marshal(next.History); len(next.History) > state.MaxHistory || len(b) > state.MaxHistoryBytes {
		t.Fatalf("%s: history of %d entries, %d bytes: over the bounds (%d, %d)", a.Name, len(next.History), len(b), state.MaxHistory, state.MaxHistoryBytes)
	}
	prev := before.History[len(before.History)-1]
	last := next.History[len(next.History)-1]
	describes := last.Action == a.Name && last.To == next.Status && last.At.Equal(now) && last.Attempt == next.Attempts && last.Stage == next.Stage
	if len(before.History) > 1 && prev.Action == a.Name && (a.Name == state.Repoll || a.Name == state.Note && last.Detail == prev.Detail && last.Actor == prev.Actor && last.HTTPStatus == prev.HTTPStatus && prev.To == next.Status && prev.Attempt == next.Attempts && prev.Stage == next.Stage) {
		if len(next.History) != len(before.History) || next.Truncated != before.Truncated || !describes || last.Count != max(prev.Count, 1)+1 {
			t.Fatalf("%s repeated: want it to share the last line with count %d, got %d entries (was %d), last %+v", a.Name, max(prev.Count, 1)+1, len(next.History), len(before.History), last)
		}
		return
	}
	if next.Step() != before.Step()+1 {
		t.Fatalf("%s: want step %d -> %d, got %d", a.Name, before.Step(), before.Step()+1, next.Step())
	}
	chatter := a.Name == state.Note || a.Name == state.Repoll
	if !describes && !(chatter && next.Truncated > before.Truncated) {
		t.Fatalf("%s: last entry %+v does not describe the step", a.Name, last)
	}
	steps := func(h []state.Entry) []state.Entry {
		var out []state.Entry
		for _, e := range h[1:] {
			if e.Action != state.Note && e.Action != state.Repoll {
				out = append(out, e)
			}
		}
		return out
	}
	was, is := steps(before.History), steps(next.History)
	if chatter {
		if !slices.Equal(was, is) {
			t.Fatalf("%s dropped a step: %d steps before, %d after", a.Name, len(was), len(is))
		}
		return
	}
	is = is[:len(is)-1]
	if len(is) > len(was) || !slices.Equal(is, was[len(was)-len(is):]) {
		t.Fatalf("%s: want only the oldest steps dropped, %d before, %d kept", a.Name, len(was), len(is))
	}
}

// TestTerminalAbsorbs drives records into each terminal state and checks
// that no sequence of actions leaves it.
func TestTerminalAbsorbs(t *testing.T) {
	t.Parallel()
	paths := map[state.State][]state.ActionName{
		state.Done:      {state.Claim, state.Succeed},
		state.Cancelled: {state.Cancel},
	}
	rapid.Check(t, func(t *rapid.T) {
		target := rapid.SampledFrom([]state.State{state.Done, state.Cancelled}).Draw(t, "terminal")
		r, _, err := state.New(state.Record{ID: "ev_x"}, state.Action{Name: state.Accept}, t0)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range paths[target] {
			if r, _, err = state.Apply(r, state.Action{Name: a}, t0); err != nil {
				t.Fatalf("%s: %v", a, err)
			}
		}
		if r.Status != target {
			t.Fatalf("setup: want %s, got %s", target, r.Status)
		}
		for range rapid.IntRange(1, 30).Draw(t, "steps") {
			a := genAction(t, t0)
			next, _, err := state.Apply(r, a, t0)
			if a.Name == state.Note {
				if err != nil || next.Status != target {
					t.Fatalf("note on %s: want allowed and unchanged, got %s, %v", target, next.Status, err)
				}
				r = next
				continue
			}
			if !errors.Is(err, state.ErrInvalidTransition) || next.Status != target {
				t.Fatalf("%s on %s: want ErrInvalidTransition and no move, got %s, %v", a.Name, target, next.Status, err)
			}
		}
	})
}
