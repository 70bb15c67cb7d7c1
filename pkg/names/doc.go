// Package names holds the names every tenaz package shares on the wire:
// header names, the stream, bucket and consumer names, the subject
// builders (Subjects, over the prefix and the partitions) and the
// validation of the tokens (account, kind) that go into subjects.
//
// It imports only the streams module, which owns the streams' and
// buckets' definitions and the partitioning (streams.StreamName,
// streams.PartitionOf); the event State enum is pkg/state's.
//
//	s := names.NewSubjects("tenaz")
//	subj, err := s.Intake("acme", "order.create") // "tenaz.intake.acme.order.create"
package names
