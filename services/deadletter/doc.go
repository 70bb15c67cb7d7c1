// Package deadletter will serve the dead-letter and manual-review screen
// and API and react to the server's max-deliveries advisories. For now it
// is a running, healthy service that registers as tenaz-deadletter and
// lists the DEAD stream's size; the operators issue fills it.
//
//	svc, err := deadletter.New(deadletter.Options{Conn: nc, Config: cfg})
//	err = svc.Start(ctx)
package deadletter
