package daemon

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// Main is the whole main of a service binary: it reads -config, runs the
// service built by build until SIGINT or SIGTERM, reloads the config on
// SIGHUP, and exits 1 with the error.
//
//	func main() {
//		daemon.Main("tenaz-poller", func(p daemon.Process) (daemon.Component, error) {
//			return poller.New(poller.Options{Conn: p.Conn, Config: p.Config, Live: p.Live, Logger: p.Logger})
//		})
//	}
func Main(name string, build Build) {
	configPath := flag.String("config", "", "path to tenaz.yaml (default: $TENAZ_CONFIG, then ./tenaz.yaml)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	hup := make(chan os.Signal, 1) // reloads the config
	signal.Notify(hup, syscall.SIGHUP)
	err := Run(ctx, name, *configPath, hup, build)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}
