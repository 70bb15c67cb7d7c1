// Package client is the Go client of tenaz: it submits events, reads
// their status and history, waits for their outcome, and makes the
// operator calls (replay, discard and resolve dead letters and reviews,
// close and open breakers, cancel events, pause and resume accounts, retry
// an event now, cancel a callback or poll wait, read the audit). The same Client talks to tenaz over
// NATS (the services' micro endpoints under <prefix>.api.…; NewNATS) or
// over its HTTP API (NewHTTP); the tenaz CLI is built on it.
//
// The request and answer types are tenaz's wire contract: event.View and
// event.HistoryView for events, the pkg/ops types for the operator calls.
// An error answer is an *Error carrying the HTTP status and the server's
// machine code, which errors.Is matches against the Code constants:
//
//	c := client.NewNATS(nc, client.WithOperatorKey(os.Getenv("TENAZ_OPERATOR_KEY")))
//	r, err := c.Submit(ctx, event.Submission{Account: "acme", Kind: "order.create",
//		Payload: json.RawMessage(`{"order_id":"o-1"}`)}, client.IdempotencyKey("o-1"))
//	if errors.Is(err, client.ErrIdempotencyKeyReused) { … }
//	v, err := c.Wait(ctx, r.ID) // done, cancelled, dead or manual_review
package client
