// Package live is the config in force in a running process: one
// snapshot, swapped whole and read per call (Config.Load), made of the
// tenaz.yaml it started with, what a reload of that file may change while
// running, and the accounts kept in the accounts bucket.
//
// A reload (SIGHUP, or the file changing on disk) reads the file again and
// validates it; a file with any problem is refused with every one of its
// errors, and the config in force stays. What can change live is taken:
// accounts (limits, target overrides), auth keys and operators, targets
// (URLs, headers, secrets, limits) and sealing_key. Anything else the file
// changes (nats, http, streams, kinds, …) keeps the value it started with
// and is reported (Status.Restart) until a restart.
//
// The accounts bucket holds accounts added without a deploy (the operator
// API and `tenaz accounts set`), their target overrides and API keys. The
// file wins: an account the file declares is taken from the file. Header
// values are sealed in the bucket (AES-256-GCM under sealing_key) and
// never read back in clear; API keys are kept as hashes only.
//
//	lv := live.New(cfg, live.Options{Path: path, Logger: &log})
//	go lv.Run(ctx, hup)                    // SIGHUP and file changes
//	err := lv.Watch(ctx, js)               // the accounts bucket
//	lv.OnChange(func(c *config.Config) { … })
//	limit := lv.Load().Account("acme").Rate
package live
