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
// The account label is bounded per Set: the accounts of
// AccountOptions.Allow and at most Top others (the first seen, then the
// busiest, ranked once a minute) have series of their own; every other
// account is counted as account="other", so 10,000 accounts cost the
// series of a few hundred. Configure sets those bounds and native
// histograms at start-up (daemon.ConfigureMetrics reads them from the
// config's metrics section); tenaz_build_info names the binary's build.
//
// Catalog lists every metric (name, type, labels, meaning, emitter);
// docs/metrics.md documents them and a test keeps the two in step.
// WatchBacklog adds the per-account backlog, read from the server
// when Prometheus scrapes (bounded by a timeout, cached for a few seconds),
// and Snapshot sums the essentials for a NATS micro service's stats.
package metrics
