// Package cli is the operator side of the tenaz binary: `tenaz events`,
// `dead`, `review`, `breakers`, `streams`, `version` and `completion`.
// Every command talks to the services over NATS through pkg/client (their
// micro endpoints under <prefix>.api.…), or to JetStream directly for
// `streams`, connecting as the nats CLI does: flags, then NATS_*
// environment variables, then the natscli context (read with jsm.go's
// natscontext, as natscli reads it).
//
// Output is an aligned table for people and, with --json, one stable JSON
// document on stdout for scripts. The exit code says what happened (see
// ExitOK … ExitUnavailable).
//
//	os.Exit(cli.Main(&root, os.Args[1:], cli.OSEnv(), kong.Name("tenaz")))
package cli
