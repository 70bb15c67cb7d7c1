// Command tenaz-chaos is tenaz's crash suite and soak (make chaos,
// make chaos-short, make soak): the four services and nats-server as
// separate processes, killed and restarted under load against
// fault-injecting providers, with every invariant checked and printed at
// the end. See docs/chaos.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/tenaz/tenaz/services/tenaz/internal/chaos"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "tenaz-chaos:", err)
		os.Exit(1)
	}
}

func run() error {
	if len(os.Args) == 4 && os.Args[1] == "serve-nats" { // the run's nats-server process
		return chaos.ServeNATS(os.Args[2], os.Args[3])
	}
	short := flag.Bool("short", false, "the CI run (under 3 minutes) instead of the full one (about 10)")
	soak := flag.Duration("soak", 0, "run the soak for this long instead of the crash suite (e.g. 30m)")
	rate := flag.Float64("rate", 20, "soak: events per second")
	events := flag.Int("events", 0, "override: events to submit")
	accounts := flag.Int("accounts", 0, "override: accounts")
	load := flag.Duration("load", 0, "override: how long the load and the faults last")
	outage := flag.Duration("outage", 0, "override: each account's outage")
	settle := flag.Duration("settle", 0, "override: the bound on settling after the load")
	dispatchers := flag.Int("dispatchers", 0, "override: dispatcher processes (1-10; both runs use 2)")
	seed := flag.Uint64("seed", 1, "seed of the plan and the faults")
	race := flag.Bool("race", false, "build the services with the race detector")
	keep := flag.Bool("keep", false, "keep the work directory (logs, store) even when the run passes")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *soak > 0 {
		return chaos.Soak(ctx, chaos.SoakOptions{Duration: *soak, Rate: *rate, Race: *race, Keep: *keep, Seed: *seed}, os.Stdout)
	}
	o := chaos.Full()
	if *short {
		o = chaos.Short()
	}
	for _, ov := range []struct {
		set bool
		fn  func()
	}{
		{*events > 0, func() { o.Events = *events }},
		{*accounts > 0, func() { o.Accounts = *accounts }},
		{*load > 0, func() { o.Load = *load }},
		{*outage > 0, func() { o.Outage = *outage }},
		{*settle > 0, func() { o.Settle = *settle }},
		{*dispatchers > 0, func() { o.DispatcherReplicas = *dispatchers }},
	} {
		if ov.set {
			ov.fn()
		}
	}
	o.Seed, o.Race, o.Keep = *seed, *race, *keep
	return chaos.Run(ctx, o, os.Stdout)
}
