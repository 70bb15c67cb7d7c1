// Package chaos is tenaz's crash suite and soak, run by cmd/tenaz-chaos
// (make chaos, make chaos-short, make soak).
//
// The crash suite runs a nats-server process (this binary in its
// serve-nats mode, fsync always) and the four services as separate
// processes, built from this tree, against fault-injecting providers
// (package provider) behind a gate that takes each account down for a
// while. It submits events across many accounts and every completion mode
// over HTTP and NATS while it SIGKILLs (and now and then SIGTERMs) a random
// service every few seconds, restarts nats-server with SIGTERM and SIGKILL
// in turn, and sends forged, replayed and out-of-order webhooks. Then it
// waits, bounded, until everything settles, checks the invariants, prints
// each with its count and fails on any violation (see docs/chaos.md).
//
// The soak runs the same processes at a steady rate without faults of our
// own, samples the resident memory and goroutines of every process, prints
// the table and fails if a service grows beyond the stated bound after
// warm-up.
//
//	err := chaos.Run(ctx, chaos.Full(), os.Stdout)
//	err := chaos.Soak(ctx, chaos.SoakOptions{Duration: 30 * time.Minute}, os.Stdout)
package chaos
