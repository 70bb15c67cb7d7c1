// Package poller will poll providers for events in the polling state, fire
// watchdog deadlines and run the reconciler. For now it is a running,
// healthy service that registers as tenaz-poller; the completion-over-time
// issue fills it.
//
//	svc, err := poller.New(poller.Options{Conn: nc, Config: cfg})
//	err = svc.Start(ctx)
package poller
