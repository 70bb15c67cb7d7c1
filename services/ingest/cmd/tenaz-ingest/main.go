// Command tenaz-ingest runs the ingest service alone against an external NATS
// (NATS_URL or nats.url), for deployments that scale each service on its own.
package main

import (
	"github.com/tenaz/tenaz/pkg/daemon"
	"github.com/tenaz/tenaz/services/ingest"
)

func main() {
	daemon.Main(ingest.Name, func(p daemon.Process) (daemon.Component, error) {
		return ingest.New(ingest.Options{Conn: p.Conn, Config: p.Config, Live: p.Live, Logger: p.Logger, Auth: p.Auth})
	})
}
