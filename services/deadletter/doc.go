// Package deadletter keeps what failed for good findable and fixable. So
// far it closes the crash backstop: the server's max-deliveries advisories
// for INTAKE and EVENTS (kept in the TENAZ_ADVISORIES stream, so none is
// missed while the service is down) move each message a worker died on
// every time to DEAD — the event's record goes to dead with class "crash",
// its DEAD entry keeps the payload and history, the message leaves its
// work queue, and tenaz.advisory.dead.<account>.<kind> is published. The
// screen, API and replay come with the operators issue.
//
//	svc, err := deadletter.New(deadletter.Options{Conn: nc, Config: cfg})
//	err = svc.Start(ctx)
package deadletter
