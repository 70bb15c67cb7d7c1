// Package search finds events by account, kind, state, entity id,
// idempotency key, provider reference and creation time without scanning
// every record. An Indexer follows the state buckets' change feeds (one
// durable consumer per partition, off the hot path) and keeps one small
// entry per searchable fact in the tenaz_search bucket, under keys the
// server's subject index can filter; a Searcher reads a page of a filter
// from the subject index (multi-last) or with batched direct gets, and
// checks each hit against the event's record. An entity is searched the
// same way in the audit archive (pkg/audit), whose subjects hold it, so
// the index keeps no entry for it.
//
//	x := search.NewIndexer(js, subj, search.IndexerOptions{Retention: 7 * 24 * time.Hour})
//	err := x.Start(ctx)
//	s, err := search.Open(ctx, js, st, subj)
//	page, err := s.Find(ctx, ops.FindRequest{Account: "acme", State: state.Retrying})
package search
