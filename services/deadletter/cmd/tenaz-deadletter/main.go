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

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/tenaz/tenaz/pkg/auth"
	"github.com/tenaz/tenaz/pkg/config"
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
	return daemon.Run(ctx, "tenaz-deadletter", *configPath, func(nc *nats.Conn, cfg *config.Config, log *zerolog.Logger) (daemon.Component, error) {
		a, err := auth.New(cfg) // the same keys daemon.Run's Guard checks: the operator endpoints need an operator's
		if err != nil {
			return nil, err
		}
		return deadletter.New(deadletter.Options{Conn: nc, Config: cfg, Logger: log, Auth: a})
	})
}
