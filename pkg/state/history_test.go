package state_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/state"
)

// apply applies a on r at t0 + dt and fails the test on an error.
func apply(t *testing.T, r state.Record, a state.Action, dt time.Duration) state.Record {
	t.Helper()
	n, _, err := state.Apply(r, a, t0.Add(dt))
	if err != nil {
		t.Fatalf("%s from %s: %v", a.Name, r.Status, err)
	}
	return n
}

// steps lists the history's actions other than notes and repolls.
func steps(h []state.Entry) []state.ActionName {
	var out []state.ActionName
	for _, e := range h {
		if e.Action != state.Note && e.Action != state.Repoll {
			out = append(out, e.Action)
		}
	}
	return out
}

// A polling event's timeline, flooded with 1,000 repolls and 1,000
// distinct notes of 1 KiB (a webhook sent again and again, late
// outcomes), keeps every claim and attempt's outcome and stays within
// MaxHistory and MaxHistoryBytes.
func TestHistoryKeepsStepsUnderNotesAndRepolls(t *testing.T) {
	t.Parallel()
	r, _, err := state.New(state.Record{ID: "ev_0123456789abcdefghijklmnop", Account: "acme", Kind: "k"}, state.Action{Name: state.Accept, Actor: "ingest"}, t0)
	if err != nil {
		t.Fatal(err)
	}
	next := t0.Add(time.Hour)
	r = apply(t, r, state.Action{Name: state.Claim, Seq: 1, Actor: "dispatcher/a"}, time.Second)
	r = apply(t, r, state.Action{Name: state.Retry, Actor: "dispatcher/a", Error: &state.ErrorInfo{Class: "transient", Message: "503", HTTPStatus: 503}, NextRunAt: &next}, 2*time.Second)
	r = apply(t, r, state.Action{Name: state.Claim, Seq: 2, Actor: "dispatcher/b"}, 3*time.Second)
	r = apply(t, r, state.Action{Name: state.Poll, Actor: "dispatcher/b", Reference: "job-1", NextRunAt: &next, Deadline: &next}, 4*time.Second)
	want := steps(r.History)
	pad := strings.Repeat("x", 1024)
	for i := range 1000 {
		dt := time.Duration(5+i) * time.Second
		r = apply(t, r, state.Action{Name: state.Repoll, Actor: "poller/a", Detail: fmt.Sprintf("answer %d: still running", i), NextRunAt: &next}, dt)
		r = apply(t, r, state.Action{Name: state.Note, Actor: "ingest", Detail: fmt.Sprintf("callback %d ignored: %s", i, pad)}, dt)
	}
	if got := steps(r.History); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("want the steps %v kept, got %v", want, got)
	}
	b, err := json.Marshal(r.History)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > state.MaxHistoryBytes || len(r.History) > state.MaxHistory {
		t.Errorf("want at most %d entries and %d bytes, got %d and %d", state.MaxHistory, state.MaxHistoryBytes, len(r.History), len(b))
	}
	if r.Truncated == 0 || r.Polls != 1000 {
		t.Errorf("want dropped notes counted and 1000 polls, got truncated %d, polls %d", r.Truncated, r.Polls)
	}
	if last := r.History[len(r.History)-1]; !strings.HasPrefix(last.Detail, "callback 999 ignored") {
		t.Errorf("want the newest note kept, got %+v", last)
	}
}

// The same note again shares its line, with a count; another note
// starts a new one.
func TestRepeatedNoteSharesALine(t *testing.T) {
	t.Parallel()
	r := setup(t, state.AwaitingCallback)
	for i := range 1000 {
		r = apply(t, r, state.Action{Name: state.Note, Actor: "ingest", Detail: "callback ignored: bad signature"}, time.Duration(i)*time.Second)
	}
	r = apply(t, r, state.Action{Name: state.Note, Actor: "ingest", Detail: "something else"}, time.Hour)
	if len(r.History) != 3 {
		t.Fatalf("want accept and two note lines, got %d entries", len(r.History))
	}
	if e := r.History[1]; e.Count != 1000 || !e.At.Equal(t0.Add(999*time.Second)) {
		t.Errorf("want the repeated note once with count 1000 at its latest time, got %+v", e)
	}
	if e := r.History[2]; e.Count != 0 || e.Detail != "something else" {
		t.Errorf("want the other note on its own line, got %+v", e)
	}
}

// A result or reference too large to keep is left out with a note; the
// step itself happens. Texts are cut to their bounds.
func TestOversizedInputsAreBounded(t *testing.T) {
	t.Parallel()
	big := json.RawMessage(`{"data":"` + strings.Repeat("x", 2*state.MaxResult) + `"}`)
	ref := strings.Repeat("r", state.MaxReference+1)
	r := apply(t, setup(t, state.Running), state.Action{Name: state.Succeed, Actor: strings.Repeat("a", 2*state.MaxName),
		Detail: "target answered 200", Result: big, Reference: ref}, time.Minute)
	if r.Status != state.Done || r.Result != nil || r.Reference != "" {
		t.Fatalf("want done without the result and the reference, got %s, %d bytes, %q", r.Status, len(r.Result), r.Reference)
	}
	e := r.History[len(r.History)-1]
	for _, want := range []string{"target answered 200", fmt.Sprintf("result of %d bytes not kept", len(big)), fmt.Sprintf("reference of %d bytes not kept", len(ref))} {
		if !strings.Contains(e.Detail, want) {
			t.Errorf("want the entry's detail to say %q, got %q", want, e.Detail)
		}
	}
	if len(e.Actor) > state.MaxName {
		t.Errorf("want the actor cut to %d bytes, got %d", state.MaxName, len(e.Actor))
	}
	msg := strings.Repeat("é", state.MaxDetail) // 2 bytes each: the cut must fall between runes
	r = apply(t, setup(t, state.Running), state.Action{Name: state.Fail, Error: &state.ErrorInfo{Class: "permanent", Message: msg}}, time.Minute)
	if m := r.LastError.Message; len(m) > state.MaxDetail || !strings.HasSuffix(m, "…") || !json.Valid([]byte(`"`+m+`"`)) {
		t.Errorf("want the error message cut to %d bytes of valid UTF-8 ending in …, got %d bytes", state.MaxDetail, len(m))
	}
}
