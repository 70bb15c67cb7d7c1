// Command tenaz is the binary users meet first: `tenaz run` starts all of
// tenaz in one process on an embedded nats-server; its other subcommands
// are the operator CLI.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/alecthomas/kong"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/daemon"
	"github.com/tenaz/tenaz/pkg/logging"
	"github.com/tenaz/tenaz/pkg/tracing"
	"github.com/tenaz/tenaz/services/tenaz"
	"github.com/tenaz/tenaz/services/tenaz/internal/cli"
)

type root struct {
	Run    runCmd    `cmd:"" help:"Start everything in one process (embedded NATS unless nats.url is set)."`
	Config configCmd `cmd:"" help:"Validate a config and print it with secrets redacted."`
	Outbox outboxCmd `cmd:"" help:"The producer outbox: relay a PostgreSQL outbox table to tenaz, or print its DDL."`

	cli.Commands `embed:""`
}

type runCmd struct {
	Config string `short:"c" predictor:"file" help:"Config file (default: $TENAZ_CONFIG, else ./tenaz.yaml if present, else the built-in demo config)." type:"path"`
}

type configCmd struct {
	Config string `arg:"" optional:"" predictor:"file" help:"Config file (default: $TENAZ_CONFIG, else ./tenaz.yaml, else the demo config)." type:"path"`
}

func main() {
	os.Exit(cli.Main(&root{}, os.Args[1:], cli.OSEnv(), kong.Name("tenaz"),
		kong.Description("Deliver integration events to APIs that fail.\n\n"+
			"The operator commands (events, dead, review, breakers, streams) talk to tenaz over NATS "+
			"and take the nats CLI's connection flags, NATS_* variables and contexts. dead, review, breakers "+
			"and events cancel send the operator key of $"+cli.OperatorKeyEnv+" (auth.operators). "+
			"version prints the build; completion prints a bash, zsh or fish completion script.\n\n"+cli.ExitCodesHelp)))
}

// demoConfig names the built-in demo config where a path would be.
const demoConfig = "built-in demo config"

// loadConfig: the file daemon.ConfigPath finds (the flag, $TENAZ_CONFIG,
// ./tenaz.yaml), else the built-in demo.
func loadConfig(path string) (*config.Config, string, error) {
	if path = daemon.ConfigPath(path); path == "" {
		cfg, err := tenaz.DemoConfig(os.LookupEnv)
		return cfg, demoConfig, err
	}
	cfg, err := config.Load(path)
	return cfg, path, err
}

func (r *runCmd) Run() error {
	cfg, from, err := loadConfig(r.Config)
	if err != nil {
		return err
	}
	log := logging.New(cfg.Log.Format, cfg.Log.Level, nil)
	stopTracing, err := tracing.Setup(context.Background(), "tenaz", &log) // off unless OTEL_TRACES_EXPORTER names an exporter
	if err != nil {
		return err
	}
	defer daemon.StopTracing(stopTracing)
	log.Info().Str("config", from).Msg("starting tenaz")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	hup := make(chan os.Signal, 1) // reloads the config
	signal.Notify(hup, syscall.SIGHUP)
	path := ""
	if from != demoConfig {
		path = from
	}
	t, err := tenaz.New(tenaz.Options{Config: cfg, Logger: &log, Demo: from == demoConfig, ConfigPath: path, Reload: hup})
	if err != nil {
		return err
	}
	if err := t.Start(ctx); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "\ntenaz is running on http://%s (config: %s)\n", t.HTTPAddr(), from)
	if from == demoConfig {
		fmt.Fprintln(os.Stderr, tenaz.DemoNotice)
	}
	<-ctx.Done()
	log.Info().Msg("stopping")
	sctx, cancel := context.WithTimeout(context.Background(), cfg.StopTimeout.D())
	defer cancel()
	return t.Stop(sctx)
}

func (c *configCmd) Run() error {
	cfg, from, err := loadConfig(c.Config)
	if err != nil {
		return err
	}
	fmt.Printf("# %s: valid\n%s", from, cfg.Redacted())
	return nil
}
