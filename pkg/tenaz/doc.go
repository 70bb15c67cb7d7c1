// Package tenaz holds the lowest-level names every other tenaz package
// shares: the event State enum, header names, subject builders and the
// validation of the tokens (account, kind) that go into subjects.
//
// It has no dependencies outside the standard library so that anything,
// including the streams data module and external clients, may import it.
//
//	s := tenaz.NewSubjects("tenaz")
//	subj, err := s.Intake("acme", "order.create") // "tenaz.intake.acme.order.create"
package tenaz
