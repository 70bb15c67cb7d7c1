// Command tenaz-deadletter runs the deadletter service alone against an external NATS
// (NATS_URL or nats.url), for deployments that scale each service on its own.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/tenaz/tenaz/pkg/daemon"
	"github.com/tenaz/tenaz/services/deadletter"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "tenaz-deadletter:", err)
		os.Exit(1)
	}
}

func run() error {
	configPath := flag.String("config", "", "path to tenaz.yaml (default: $TENAZ_CONFIG, then ./tenaz.yaml)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	hup := make(chan os.Signal, 1) // reloads the config
	signal.Notify(hup, syscall.SIGHUP)
	return daemon.Run(ctx, "tenaz-deadletter", *configPath, hup, func(p daemon.Process) (daemon.Component, error) {
		// p.Auth is the keys daemon.Run's Guard checks: the operator endpoints need an operator's.
		return deadletter.New(deadletter.Options{Conn: p.Conn, Config: p.Config, Live: p.Live, Logger: p.Logger, Auth: p.Auth})
	})
}
