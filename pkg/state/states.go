package state

import "fmt"

// State is where an event is in its lifecycle: docs/state-machine.md has
// what each state means, the diagram and the transitions.
type State string

// The states of an event. See docs/state-machine.md for the diagram.
const (
	Scheduled        State = "scheduled"         // held until not_before by a server-side schedule
	Pending          State = "pending"           // accepted, queued for delivery
	Running          State = "running"           // claimed by one dispatcher, call in flight
	Retrying         State = "retrying"          // a transient failure; next attempt at next_run_at
	AwaitingCallback State = "awaiting_callback" // provider accepted; its webhook is awaited
	Polling          State = "polling"           // provider accepted; the poller asks for the result
	Done             State = "done"              // terminal: delivered / completed
	Dead             State = "dead"              // parked: permanent failure or attempts exhausted
	ManualReview     State = "manual_review"     // parked: a person must decide
	Cancelled        State = "cancelled"         // terminal: cancelled by a caller or operator
)

// States lists every state, in lifecycle order.
var States = []State{
	Scheduled, Pending, Running, Retrying,
	AwaitingCallback, Polling, Done, Dead,
	ManualReview, Cancelled,
}

// Terminal reports whether no transition leaves s.
func (s State) Terminal() bool { return s == Done || s == Cancelled }

// Parked reports whether s waits for an operator (dead-letter or review).
func (s State) Parked() bool { return s == Dead || s == ManualReview }

// Valid reports whether s is one of States.
func (s State) Valid() bool {
	for _, v := range States {
		if s == v {
			return true
		}
	}
	return false
}

// ParseState returns the State named by v or an error.
func ParseState(v string) (State, error) {
	s := State(v)
	if !s.Valid() {
		return "", fmt.Errorf("unknown state %q", v)
	}
	return s, nil
}
