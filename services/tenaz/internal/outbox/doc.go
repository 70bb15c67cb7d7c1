// Package outbox relays a PostgreSQL outbox table to tenaz: a producer
// writes its business row and an outbox row in one transaction, and the
// relay submits each committed row to ingest's NATS submit endpoint under
// the row's id as idempotency key, marking it sent only once tenaz has
// accepted it. Rows are claimed with SELECT … FOR UPDATE SKIP LOCKED, so
// any number of relays may run on one table; NOTIFY wakes them, a poll
// finds what a notification missed. docs/producers.md has the whole story.
//
//	fmt.Print(outbox.Schema(cfg.Outbox.Table)) // the DDL, applied once
//	r, err := outbox.New(outbox.Options{Config: cfg.Outbox, Prefix: cfg.Prefix, Conn: nc})
//	err = r.Start(ctx)
//	defer r.Stop(ctx)
package outbox
