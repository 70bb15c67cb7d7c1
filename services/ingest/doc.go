// Package ingest accepts events: from NATS (the INTAKE stream, subjects
// <p>.intake.<account>.<kind>) and over HTTP (POST /v1/events), and serves
// their status (GET /v1/events/{id}, …/history) and cancellation
// (DELETE /v1/events/{id}).
//
// Every submission, whichever way it came, goes through INTAKE and is
// accepted by one function: create the state record (the idempotency
// check: the id is derived from account and key), publish to EVENTS,
// and only then ack the INTAKE message. A crash anywhere in between
// leaves the INTAKE message unacked; its redelivery finds the record and
// re-publishes it (deduplicated by Nats-Msg-Id = event id), so nothing is
// lost and nothing doubles.
//
//	svc, err := ingest.New(ingest.Options{Conn: nc, Config: cfg, Logger: log})
//	err = svc.Start(ctx)
//	svc.Routes(mux)
package ingest
