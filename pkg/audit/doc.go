// Package audit is the layout of the audit archive (stream TENAZ_AUDIT):
// its subjects, what one message holds, and how a state record's revision
// becomes one. The archive outlives the records (audit.retention against
// streams.retention), so "what happened to X" can be answered after X's
// record is gone.
//
// One message is one revision of an event's record, holding the history
// entries that revision added (Diff against the last message of the
// event); an operator action on an account or a breaker is one message
// too. Subjects put an event's messages under its account and its entity,
// so one event or one entity is read without a scan:
//
//	<prefix>.audit.<account>.<entity token>.<event id>   a revision
//	<prefix>.audit.<account>.ops.<nanoseconds>           an operator action
//
//	rev, ok := audit.Diff(rec, last) // what rec adds to the archive
package audit
