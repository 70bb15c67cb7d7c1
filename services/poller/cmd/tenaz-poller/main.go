// Command tenaz-poller runs the poller service alone against an external NATS
// (NATS_URL or nats.url), for deployments that scale each service on its own.
package main

import (
	"github.com/tenaz/tenaz/pkg/daemon"
	"github.com/tenaz/tenaz/services/poller"
)

func main() {
	daemon.Main("tenaz-poller", func(p daemon.Process) (daemon.Component, error) {
		return poller.New(poller.Options{Conn: p.Conn, Config: p.Config, Live: p.Live, Logger: p.Logger, Auth: p.Auth})
	})
}
