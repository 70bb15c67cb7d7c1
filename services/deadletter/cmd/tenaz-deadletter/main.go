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
	"github.com/tenaz/tenaz/pkg/logging"
	"github.com/tenaz/tenaz/pkg/natsconn"
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
	cfg, err := daemon.LoadConfig(*configPath)
	if err != nil {
		return err
	}
	log := logging.New(cfg.Log.Format, cfg.Log.Level, nil)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	nc, err := natsconn.Connect(cfg.NATS, "tenaz-deadletter", "")
	if err != nil {
		return err
	}
	defer nc.Close()
	svc, err := deadletter.New(deadletter.Options{Conn: nc, Config: cfg, Logger: &log})
	if err != nil {
		return err
	}
	if err := svc.Start(ctx); err != nil {
		return err
	}
	srv, err := daemon.Serve(cfg.HTTP.Addr, daemon.Mux(svc))
	if err != nil {
		_ = svc.Stop(context.Background())
		return err
	}
	log.Info().Str("http", srv.Addr).Msg("tenaz-deadletter running")
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), daemon.StopTimeout)
	defer cancel()
	_ = srv.Stop(sctx)
	err = svc.Stop(sctx)
	_ = nc.Drain()
	return err
}
