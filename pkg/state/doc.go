// Package state is the event lifecycle as a pure function: the State
// enum, the Record of one event, the table of legal transitions, and
// Apply, which moves a record by one Action and says, as data, whether
// the event must be published to EVENTS once the new record is stored
// (EffectEnqueue). It does no I/O; the store applies it with
// compare-and-set.
//
//	next, effects, err := state.Apply(rec, state.Action{Name: state.Claim, Seq: 42}, now)
//	if errors.Is(err, state.ErrInvalidTransition) { /* someone else moved it */ }
package state
