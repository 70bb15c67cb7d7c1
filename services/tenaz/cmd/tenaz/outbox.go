package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/tenaz/tenaz/pkg/daemon"
	"github.com/tenaz/tenaz/pkg/logging"
	"github.com/tenaz/tenaz/pkg/natsconn"
	"github.com/tenaz/tenaz/services/tenaz/internal/outbox"
)

// outboxCmd is `tenaz outbox`: the producer outbox (docs/producers.md).
type outboxCmd struct {
	Relay  outboxRelayCmd  `cmd:"" help:"Relay the outbox table's committed rows to tenaz until SIGTERM (outbox.* and nats.* keys)."`
	Schema outboxSchemaCmd `cmd:"" help:"Print the DDL of the outbox table (outbox.table), to apply once in the producer's database."`
}

type outboxRelayCmd struct {
	Config string `short:"c" help:"Config file (default: $TENAZ_CONFIG, else ./tenaz.yaml if present, else the defaults and TENAZ_* variables)." type:"path"`
}

type outboxSchemaCmd struct {
	Config string `short:"c" help:"Config file (default: $TENAZ_CONFIG, else ./tenaz.yaml if present, else the defaults and TENAZ_* variables)." type:"path"`
}

func (c *outboxSchemaCmd) Run() error {
	cfg, err := daemon.LoadConfig(c.Config)
	if err != nil {
		return err
	}
	fmt.Print(outbox.Schema(cfg.Outbox.Table))
	return nil
}

func (c *outboxRelayCmd) Run() error {
	cfg, err := daemon.LoadConfig(c.Config)
	if err != nil {
		return err
	}
	log := logging.New(cfg.Log.Format, cfg.Log.Level, nil)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	nc, err := natsconn.Connect(cfg.NATS, outbox.ConnName(cfg.Outbox), "", natsconn.Logged(&log))
	if err != nil {
		return err
	}
	defer nc.Close()
	r, err := outbox.New(outbox.Options{Config: cfg.Outbox, Prefix: cfg.Prefix, Conn: nc, Logger: &log})
	if err != nil {
		return err
	}
	if err := r.Start(ctx); err != nil {
		return err
	}
	log.Info().Str("table", cfg.Outbox.Table).Msg("outbox relay running")
	<-ctx.Done()
	log.Info().Msg("stopping")
	sctx, cancel := context.WithTimeout(context.Background(), cfg.StopTimeout.D())
	defer cancel()
	err = r.Stop(sctx)
	_ = nc.Drain()
	return err
}
