// Package metrics defines every tenaz_* Prometheus metric in one place, with
// bounded labels (account, kind, state, class, target, reason — never an
// event id), and the small typed functions the services call to record
// them. The metrics live on a Set; Default is registered on Prometheus'
// default registry, the one daemon.Mux serves on /metrics, and the
// package-level functions record on it.
//
//	metrics.Accepted("acme", "order.create")
//	metrics.WaitTime("acme", "order.create", time.Since(rec.CreatedAt))
//	metrics.Attempt("acme", "order.create", outcome.ClassOf(err))
//
// Catalog lists every metric (name, type, labels, meaning, emitter);
// docs/metrics.md documents them and a test keeps the two in step.
// WatchBacklog adds the per-account consumer backlog, read from the server
// when Prometheus scrapes (bounded by a timeout, cached for a few seconds),
// and Snapshot sums the essentials for a NATS micro service's stats.
package metrics
