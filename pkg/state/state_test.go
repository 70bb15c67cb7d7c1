package state_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/state"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// actions lists every action of the table, sorted, plus one unknown name.
func actions() []state.ActionName {
	var out []state.ActionName
	for a := range state.Table {
		out = append(out, a)
	}
	slices.Sort(out)
	return append(out, "bogus")
}

// setup returns a record in state s, as the store would hold it.
func setup(t testing.TB, s state.State) state.Record {
	t.Helper()
	r, _, err := state.New(state.Record{ID: "ev_0123456789abcdefghijklmnop", Account: "acme", Kind: "order.create"},
		state.Action{Name: state.Accept}, t0)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	r.Status = s
	r.Attempts = 2
	return r
}

func TestApplyEveryStateAndAction(t *testing.T) {
	t.Parallel()
	for _, s := range state.States {
		for _, a := range actions() {
			t.Run(string(s)+"/"+string(a), func(t *testing.T) {
				t.Parallel()
				rule, known := state.Table[a]
				legal := known && slices.Contains(rule.From, s)
				if got := state.Can(s, a); got != legal {
					t.Errorf("Can(%s, %s): want %v, got %v", s, a, legal, got)
				}
				before := setup(t, s)
				now := t0.Add(time.Minute)
				next, effects, err := state.Apply(before, state.Action{Name: a}, now)
				if !legal {
					if !errors.Is(err, state.ErrInvalidTransition) {
						t.Fatalf("want an error wrapping ErrInvalidTransition, got %v", err)
					}
					if !reflect.DeepEqual(next, before) || effects != nil {
						t.Errorf("want the record back unchanged and no effects, got %+v, %v", next, effects)
					}
					return
				}
				if err != nil {
					t.Fatalf("want legal, got %v", err)
				}
				want := rule.To
				if want == "" {
					want = s
				}
				if next.Status != want {
					t.Errorf("want status %s, got %s", want, next.Status)
				}
				if !slices.Equal(effects, rule.Effects) {
					t.Errorf("want effects %v, got %v", rule.Effects, effects)
				}
				if len(next.History) != len(before.History)+1 {
					t.Fatalf("want one more history entry, got %d -> %d", len(before.History), len(next.History))
				}
				e := next.History[len(next.History)-1]
				if e.Action != a || e.To != want || !e.At.Equal(now) {
					t.Errorf("want entry {%s -> %s at %v}, got %+v", a, want, now, e)
				}
				if moved := s != want || a == state.Reclaim; moved && e.From != s || !moved && e.From != "" {
					t.Errorf("entry From: want %q (moved=%v), got %q", s, moved, e.From)
				}
			})
		}
	}
}

func TestNewCreates(t *testing.T) {
	t.Parallel()
	at := t0.Add(24 * time.Hour)
	for _, a := range actions() {
		rule, known := state.Table[a]
		creating := known && rule.From == nil
		local := t0.In(time.FixedZone("X", 3600))
		r, effects, err := state.New(state.Record{ID: "ev_x", Account: "acme", Attempts: 0}, state.Action{Name: a, NextRunAt: &at, Actor: "ingest"}, local)
		if !creating {
			if !errors.Is(err, state.ErrInvalidTransition) {
				t.Errorf("New with %s: want ErrInvalidTransition, got %v", a, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("New with %s: %v", a, err)
		}
		if r.Status != rule.To || r.Stage != state.StagePrimary || r.ID != "ev_x" || r.Account != "acme" {
			t.Errorf("New with %s: want status %s, stage primary and the base fields, got %+v", a, rule.To, r)
		}
		if !slices.Equal(effects, rule.Effects) {
			t.Errorf("New with %s: want effects %v, got %v", a, rule.Effects, effects)
		}
		if !r.CreatedAt.Equal(t0) || !r.UpdatedAt.Equal(t0) || r.CreatedAt.Location() != time.UTC {
			t.Errorf("New with %s: want created/updated %v UTC, got %v / %v", a, t0, r.CreatedAt, r.UpdatedAt)
		}
		if r.NextRunAt == nil || !r.NextRunAt.Equal(at) {
			t.Errorf("New with %s: want next_run_at %v, got %v", a, at, r.NextRunAt)
		}
		if len(r.History) != 1 || r.History[0].Action != a || r.History[0].To != rule.To || r.History[0].From != "" || r.History[0].Actor != "ingest" {
			t.Errorf("New with %s: want one history entry from [*] to %s, got %+v", a, rule.To, r.History)
		}
	}
}

// TestTableShape checks what the rest of the package and the docs assume
// about the table.
func TestTableShape(t *testing.T) {
	t.Parallel()
	creating := 0
	for a, rule := range state.Table {
		if rule.From == nil {
			creating++
		}
		if a != state.Note && !rule.To.Valid() && (rule.To != "" || rule.From == nil) {
			t.Errorf("%s: want a valid destination (or \"\", the state kept, for an action on existing events), got %q", a, rule.To)
		}
		for _, s := range rule.From {
			if !s.Valid() {
				t.Errorf("%s: invalid source %q", a, s)
			}
			if s.Terminal() && a != state.Note {
				t.Errorf("%s leaves terminal state %s", a, s)
			}
		}
	}
	if creating != 3 {
		t.Errorf("want 3 creating actions (accept, delay, reject), got %d", creating)
	}
	if r := state.Table[state.Note]; r.To != "" || len(r.From) != len(state.States) {
		t.Errorf("note: want legal from every state and unchanged, got %+v", r)
	}
	// Every state is reachable from a creating action.
	reach := map[state.State]bool{}
	for _, rule := range state.Table {
		if rule.From == nil {
			reach[rule.To] = true
		}
	}
	for changed := true; changed; {
		changed = false
		for _, rule := range state.Table {
			for _, s := range rule.From {
				if reach[s] && rule.To != "" && !reach[rule.To] {
					reach[rule.To], changed = true, true
				}
			}
		}
	}
	for _, s := range state.States {
		if !reach[s] {
			t.Errorf("state %s is unreachable", s)
		}
	}
}

func TestApplyFields(t *testing.T) {
	t.Parallel()
	at := t0.Add(time.Hour)
	errInfo := &state.ErrorInfo{Class: "transient", Message: "503 from erp", HTTPStatus: 503}
	running := setup(t, state.Running)
	running.RunSeq, running.Reference = 7, "ref_1"

	tests := []struct {
		name  string
		from  state.Record
		a     state.Action
		check func(t *testing.T, r state.Record)
	}{
		{"claim sets run seq, clears next run", setup(t, state.Retrying), state.Action{Name: state.Claim, Seq: 42}, func(t *testing.T, r state.Record) {
			if r.Attempts != 3 || r.RunSeq != 42 || r.NextRunAt != nil {
				t.Errorf("want attempts 3, run_seq 42, no next run, got %d, %d, %v", r.Attempts, r.RunSeq, r.NextRunAt)
			}
		}},
		{"retry keeps the error and next run", running, state.Action{Name: state.Retry, Error: errInfo, NextRunAt: &at}, func(t *testing.T, r state.Record) {
			if r.LastError != errInfo || r.NextRunAt == nil || !r.NextRunAt.Equal(at) {
				t.Errorf("want last_error and next_run_at set, got %+v %v", r.LastError, r.NextRunAt)
			}
			e := r.History[len(r.History)-1]
			if e.HTTPStatus != 503 || e.Detail != "503 from erp" || e.Attempt != 2 {
				t.Errorf("want the entry to carry status 503, the message and attempt 2, got %+v", e)
			}
		}},
		{"fail keeps the error", running, state.Action{Name: state.Fail, Error: errInfo, Detail: "rejected"}, func(t *testing.T, r state.Record) {
			if r.LastError != errInfo || r.NextRunAt != nil {
				t.Errorf("want last_error set and no next run, got %+v %v", r.LastError, r.NextRunAt)
			}
			if d := r.History[len(r.History)-1].Detail; d != "rejected" {
				t.Errorf("want the given detail to win over the error message, got %q", d)
			}
		}},
		{"await callback keeps the reference", running, state.Action{Name: state.AwaitCallback, Reference: "ref_9", NextRunAt: &at}, func(t *testing.T, r state.Record) {
			if r.Reference != "ref_9" || r.NextRunAt == nil {
				t.Errorf("want reference ref_9 and a deadline, got %q %v", r.Reference, r.NextRunAt)
			}
		}},
		{"fallback resets the run", running, state.Action{Name: state.Fallback}, func(t *testing.T, r state.Record) {
			if r.Stage != state.StageFallback || r.Attempts != 0 || r.RunSeq != 0 || r.Reference != "" {
				t.Errorf("want stage fallback, attempts 0, no run seq or reference, got %+v", r)
			}
		}},
		{"replay keeps the stage unless asked", func() state.Record {
			r := setup(t, state.Dead)
			r.Stage = state.StageFallback
			return r
		}(), state.Action{Name: state.Replay}, func(t *testing.T, r state.Record) {
			if r.Stage != state.StageFallback || r.Attempts != 0 {
				t.Errorf("want stage kept and attempts 0, got %s %d", r.Stage, r.Attempts)
			}
		}},
		{"replay to primary", setup(t, state.ManualReview), state.Action{Name: state.Replay, Stage: state.StagePrimary}, func(t *testing.T, r state.Record) {
			if r.Stage != state.StagePrimary {
				t.Errorf("want stage primary, got %s", r.Stage)
			}
		}},
		{"succeed keeps the result", running, state.Action{Name: state.Succeed, Result: json.RawMessage(`{"ok":true}`)}, func(t *testing.T, r state.Record) {
			if string(r.Result) != `{"ok":true}` {
				t.Errorf("want the result kept, got %s", r.Result)
			}
		}},
		{"retry now moves the next run and keeps the state", func() state.Record {
			r := setup(t, state.Retrying)
			r.NextRunAt = &at
			return r
		}(), state.Action{Name: state.RetryNow, NextRunAt: &t0, Actor: "operator:alice", Detail: "provider back"}, func(t *testing.T, r state.Record) {
			e := r.History[len(r.History)-1]
			if r.Status != state.Retrying || r.NextRunAt == nil || !r.NextRunAt.Equal(t0) || r.Attempts != 2 {
				t.Errorf("want retrying, due at %v, attempts 2, got %s %v %d", t0, r.Status, r.NextRunAt, r.Attempts)
			}
			if e.Action != state.RetryNow || e.From != "" || e.To != state.Retrying || e.Actor != "operator:alice" || e.Detail != "provider back" {
				t.Errorf("want a retry_now entry with who and why, got %+v", e)
			}
		}},
		{"cancel wait ends the wait", func() state.Record {
			r := setup(t, state.AwaitingCallback)
			r.NextRunAt, r.Deadline, r.Reference = &at, &at, "ref_9"
			return r
		}(), state.Action{Name: state.CancelWait, Actor: "operator:alice", Detail: "provider lost it"}, func(t *testing.T, r state.Record) {
			e := r.History[len(r.History)-1]
			if r.Status != state.Cancelled || r.NextRunAt != nil || r.Deadline != nil || r.Reference != "ref_9" {
				t.Errorf("want cancelled with no next run or deadline and the reference kept, got %+v", r)
			}
			if e.From != state.AwaitingCallback || e.Actor != "operator:alice" || e.Detail != "provider lost it" {
				t.Errorf("want a cancel_wait entry from awaiting_callback with who and why, got %+v", e)
			}
		}},
		{"note changes nothing but history", running, state.Action{Name: state.Note, Detail: "late callback"}, func(t *testing.T, r state.Record) {
			want := running
			want.History = r.History
			want.UpdatedAt = r.UpdatedAt
			if !reflect.DeepEqual(r, want) {
				t.Errorf("want only history and updated_at changed, got %+v", r)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r, _, err := state.Apply(tt.from, tt.a, t0.Add(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, r)
		})
	}
}

func TestRecordJSONRoundTrip(t *testing.T) {
	t.Parallel()
	at := t0.Add(time.Hour)
	r := setup(t, state.Running)
	r, _, err := state.Apply(r, state.Action{Name: state.Retry, NextRunAt: &at, Error: &state.ErrorInfo{Class: "timeout", Message: "slow"}}, t0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back state.Record
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, r) {
		t.Errorf("want %+v back, got %+v", r, back)
	}
}
