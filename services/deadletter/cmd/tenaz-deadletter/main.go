// Command tenaz-deadletter runs the deadletter service alone against an external NATS
// (NATS_URL or nats.url), for deployments that scale each service on its own.
package main

import (
	"github.com/tenaz/tenaz/pkg/daemon"
	"github.com/tenaz/tenaz/services/deadletter"
)

func main() {
	daemon.Main("tenaz-deadletter", func(p daemon.Process) (daemon.Component, error) {
		// p.Auth is the keys daemon.Run's Guard checks: the operator endpoints need an operator's.
		return deadletter.New(deadletter.Options{Conn: p.Conn, Config: p.Config, Live: p.Live, Logger: p.Logger, Auth: p.Auth})
	})
}
