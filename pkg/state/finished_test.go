package state_test

import (
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/state"
)

// FinishedAt is the first finish, LastFinishedAt the last step that
// entered a finished state: a replayed event's second finish, not a note
// written while finished nor a move between finished states.
func TestFinishedAtAndLastFinishedAt(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	r := state.Record{History: []state.Entry{
		{Action: state.Claim, To: state.Running, At: at(1)},
		{Action: state.Succeed, To: state.Dead, At: at(2)},
		{Action: state.Note, To: state.Dead, At: at(3)},
		{Action: state.Replay, To: state.Pending, At: at(4)},
		{Action: state.Claim, To: state.Running, At: at(5)},
		{Action: state.Succeed, To: state.Done, At: at(6)},
		{Action: state.Note, To: state.Done, At: at(7)},
	}}
	if got, ok := r.FinishedAt(); !ok || !got.Equal(at(2)) {
		t.Errorf("FinishedAt = %v, %v; want %v", got, ok, at(2))
	}
	if got, ok := r.LastFinishedAt(); !ok || !got.Equal(at(6)) {
		t.Errorf("LastFinishedAt = %v, %v; want %v", got, ok, at(6))
	}
	r.History = r.History[:2]
	r.History = append(r.History, state.Entry{Action: state.Resolve, To: state.Done, At: at(8)})
	if got, ok := r.LastFinishedAt(); !ok || !got.Equal(at(2)) {
		t.Errorf("dead then resolved: LastFinishedAt = %v, %v; want the death at %v", got, ok, at(2))
	}
	if _, ok := (state.Record{}).LastFinishedAt(); ok {
		t.Error("LastFinishedAt of an empty history: want none")
	}
}
