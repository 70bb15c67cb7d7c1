// Package dispatcher delivers events to their targets. It consumes the
// EVENTS stream through one durable consumer per account
// (acct_<account>, filter <p>.events.<account>.>), claims each event by a
// compare-and-set transition to running (two dispatchers never deliver the
// same attempt), calls the kind's target, and records the outcome: done,
// a retry re-entering EVENTS through a server-side schedule at the backoff
// time (so a long wait holds no consumer slot), or dead with the reason.
//
// The message is acked only after the outcome is stored (and, for a retry,
// after its schedule is stored), so a crash at any point leads to a
// redelivery that finds the record and carries on from there.
//
//	svc, err := dispatcher.New(dispatcher.Options{Conn: nc, Config: cfg, Logger: &log})
//	err = svc.Start(ctx)
//	defer svc.Stop(ctx)
package dispatcher
