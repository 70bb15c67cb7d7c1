// Package deadletter keeps what failed for good — and what waits for a
// person — findable and fixable. DEAD is the one durable feed: dead letters
// (permanent errors, exhausted attempts, crashes the server gave up on,
// refused submissions) and manual reviews all arrive there. The service
// confirms each arrival against the event's record and keeps an index of
// what is still dead or in review (the bucket tenaz_deadindex, watched by
// every replica into memory), serves it as filtered, cursor-paginated
// lists, and carries out the operators' actions — replay (optionally with
// an edited payload, or everything matching a filter as a durable job),
// discard, resolve a review, requeue to the primary or fallback stage,
// close a breaker — each recorded in the event's history with who and
// why. It also steers what is still on its way (operator.go): pause and
// resume an account's dispatch, retry an event now, cancel a callback or
// poll wait, open a breaker until a time, with the actions on accounts and
// breakers kept in an audit in tenaz_ops. It serves them as the screen at /ui/, the JSON API under /v1/dead,
// /v1/review and /v1/breakers, and the NATS micro service tenaz-deadletter
// whose wire types are in pkg/ops. A server-side cron schedule fires the
// nightly digest. Its archiver (archive.go) keeps the audit archive
// TENAZ_AUDIT from the state buckets' change feed, off the events' path,
// which answers "what happened to X" across an entity's events and the
// export of the audit after the records have expired (timeline.go).
//
//	svc, err := deadletter.New(deadletter.Options{Conn: nc, Config: cfg})
//	err = svc.Start(ctx)
//	svc.Routes(mux) // the screen and the JSON API
package deadletter
