// Command tenaz-bench measures tenaz end to end against a naive JetStream
// loop on the same machine in the same run (make bench; BENCH_QUICK=1 for
// a short run). It prints one figure per line: "name value unit".
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/tenaz/tenaz/services/tenaz/internal/bench"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "tenaz-bench:", err)
		os.Exit(1)
	}
}

func run() error {
	if len(os.Args) == 3 { // child processes of the accounts run
		switch os.Args[1] {
		case "serve-nats":
			return bench.ServeNATS(os.Args[2])
		case "serve-tenaz":
			return bench.ServeTenaz(os.Args[2])
		}
	}
	conc := flag.Int("concurrency", 64, "tenaz account concurrency for the bench account")
	out := flag.String("out", "", "write the markdown report here (not with BENCH_QUICK): a run of every phase writes it whole, one phase merges its figures into it")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run (server, tenaz, load) to this file")
	phase := flag.String("phase", envOr("BENCH_PHASE", "all"), "which runs (default $BENCH_PHASE, else all): all, default (server's default sync), fsync (sync always), noisy (noisy neighbour), accounts (many accounts), delayed (delayed events held and a burst due at once, callbacks applied), callbacks (the callbacks alone), capacity (concurrency: auto against a provider whose capacity halves), tracing (throughput with tracing off and on), partitions (fsync always over 16 accounts on 1, 4 and 8 partitions; also part of fsync), cluster (a 3-node R3 cluster, 1 partition against 6), search (1,000,000 events indexed, each filter queried), audit (the audit archive's cost per event)")
	partitions := flag.Int("partitions", 0, "streams.partitions of the many-accounts run (default: a new store's); a set count adds _partitions_<count> to its figures' names")
	accounts := flag.Int("accounts", 0, "accounts of the many-accounts run (default 10000, 2000 with BENCH_QUICK); a set count names its figures accounts_<count>_*")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	sz := bench.Full
	if os.Getenv("BENCH_QUICK") != "" {
		sz = bench.Quick
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Printf("# tenaz-bench: %d CPUs, %s, account concurrency %d, naive workers %d\n", runtime.NumCPU(), runtime.Version(), *conc, sz.Workers)
	start := time.Now()
	var figs []bench.Fig
	r := bench.Report{W: os.Stdout, Figures: &figs}
	switch *phase {
	case "all", "default", "fsync", "noisy", "accounts", "delayed", "callbacks", "capacity", "tracing", "partitions", "cluster", "search", "audit":
	default:
		return fmt.Errorf("unknown -phase %q", *phase)
	}
	if *phase == "all" || *phase == "cluster" {
		if err := bench.Cluster(ctx, sz, r, *conc); err != nil {
			return err
		}
	}
	if *phase == "partitions" {
		if err := bench.Partitions(ctx, sz, r, *conc); err != nil {
			return err
		}
	}
	if *phase != "accounts" && *phase != "delayed" && *phase != "callbacks" && *phase != "capacity" && *phase != "tracing" && *phase != "partitions" && *phase != "cluster" && *phase != "search" && *phase != "audit" {
		if err := bench.Run(ctx, sz, r, *conc, bench.Phases{Default: *phase == "all" || *phase == "default", Fsync: *phase == "all" || *phase == "fsync", Noisy: *phase == "all" || *phase == "noisy"}); err != nil {
			return err
		}
	}
	if *phase == "all" || *phase == "accounts" {
		n, name := sz.Accounts, "accounts_10k"
		if *accounts > 0 {
			n, name = *accounts, fmt.Sprintf("accounts_%d", *accounts)
		}
		if *partitions > 0 {
			name += fmt.Sprintf("_partitions_%d", *partitions)
		}
		if err := bench.Accounts(ctx, n, *partitions, name, r); err != nil {
			return err
		}
	}
	if *phase == "all" || *phase == "delayed" {
		if err := bench.Delayed(ctx, sz, r, *conc); err != nil {
			return err
		}
	}
	if *phase == "all" || *phase == "delayed" || *phase == "callbacks" {
		if err := bench.Callbacks(ctx, sz, r, *conc); err != nil {
			return err
		}
	}
	if *phase == "all" || *phase == "capacity" {
		if err := bench.Capacity(ctx, sz, r); err != nil {
			return err
		}
	}
	if *phase == "all" || *phase == "tracing" {
		if err := bench.Tracing(ctx, sz, r, *conc); err != nil {
			return err
		}
	}
	if *phase == "all" || *phase == "search" {
		if err := bench.Search(ctx, sz, r); err != nil {
			return err
		}
	}
	if *phase == "all" || *phase == "audit" {
		if err := bench.Audit(ctx, sz, r); err != nil {
			return err
		}
	}
	if *out != "" && *phase != "all" && os.Getenv("BENCH_QUICK") == "" {
		// One phase: its figures replace theirs in the report, the rest
		// of which stays as the last full run wrote it.
		if err := bench.MergeMarkdown(*out, figs, sz, *phase); err != nil {
			return err
		}
		fmt.Printf("# updated the %s figures of %s\n", *phase, *out)
	}
	if *out != "" && *phase == "all" && os.Getenv("BENCH_QUICK") == "" {
		// The analysis written by hand in the report this run replaces
		// is kept: only the figures and how they are measured are made
		// anew.
		prev, err := os.ReadFile(*out)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		f, err := os.Create(*out)
		if err != nil {
			return err
		}
		defer f.Close()
		bench.Markdown(f, figs, sz, *conc, time.Since(start), bench.Analysis(prev))
		fmt.Println("# wrote", *out)
	}
	return nil
}

// envOr is the environment variable k, or def when it is unset or empty.
func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
