package bench

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/natsd"
	"github.com/tenaz/tenaz/services/tenaz"
)

// ServeNATS runs a nats-server on dir (default sync) until SIGTERM,
// printing "READY <url>" once it accepts connections.
func ServeNATS(dir string) error {
	profileOnSignal("nats")
	return natsd.Serve(natsd.Options{StoreDir: dir, Listen: "127.0.0.1:-1"})
}

// ServeTenaz runs tenaz (all services) with the config file until
// SIGTERM, printing "READY" once started.
func ServeTenaz(file string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	profileOnSignal("tenaz")
	cfg, err := config.Load(file)
	if err != nil {
		return err
	}
	t, err := tenaz.New(tenaz.Options{Config: cfg})
	if err != nil {
		return err
	}
	if err := t.Start(ctx); err != nil {
		return err
	}
	fmt.Println("READY")
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return t.Stop(sctx)
}

// profileOnSignal lets the parent profile a window of this child's life:
// with BENCH_CHILD_PROFILE=<dir> set, each SIGUSR1 starts or stops a CPU
// profile written to <dir>/<name>-<n>.cpu.prof; a stop also writes the
// heap as it is then to <dir>/<name>-<n+1>.heap.prof.
func profileOnSignal(name string) {
	dir := os.Getenv("BENCH_CHILD_PROFILE")
	if dir == "" {
		return
	}
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGUSR1)
	go func() {
		var f *os.File
		for n := 1; ; n++ {
			<-ch
			if f != nil {
				pprof.StopCPUProfile()
				_ = f.Close()
				f = nil
				writeHeapProfile(filepath.Join(dir, fmt.Sprintf("%s-%d.heap.prof", name, n)))
				continue
			}
			var err error
			if f, err = os.Create(filepath.Join(dir, fmt.Sprintf("%s-%d.cpu.prof", name, n))); err != nil {
				fmt.Fprintln(os.Stderr, "profile:", err)
				continue
			}
			if err := pprof.StartCPUProfile(f); err != nil {
				fmt.Fprintln(os.Stderr, "profile:", err)
				_ = f.Close()
				f = nil
			}
		}
	}()
}

// writeHeapProfile writes what the heap holds at the end of a profiled
// window, after a collection, so it counts live memory only; beside it,
// the goroutines (.goroutine.prof) and the runtime's memory outside the
// heap profile, stacks first (.mem.txt).
func writeHeapProfile(path string) {
	runtime.GC()
	base := strings.TrimSuffix(path, ".heap.prof")
	for _, p := range []struct{ name, path string }{{"heap", path}, {"goroutine", base + ".goroutine.prof"}} {
		f, err := os.Create(p.path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "profile:", err)
			return
		}
		if err := pprof.Lookup(p.name).WriteTo(f, 0); err != nil {
			fmt.Fprintln(os.Stderr, "profile:", err)
		}
		_ = f.Close()
	}
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	mb := func(b uint64) float64 { return float64(b) / (1 << 20) }
	txt := fmt.Sprintf("goroutines %d\nstack_inuse_mb %.1f\nheap_inuse_mb %.1f\nheap_idle_mb %.1f\nheap_released_mb %.1f\nsys_mb %.1f\n",
		runtime.NumGoroutine(), mb(m.StackInuse), mb(m.HeapInuse), mb(m.HeapIdle), mb(m.HeapReleased), mb(m.Sys))
	if err := os.WriteFile(base+".mem.txt", []byte(txt), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "profile:", err)
	}
}

// toggleProfile starts or stops the child's CPU profile (BENCH_CHILD_PROFILE).
func (c *child) toggleProfile() {
	if os.Getenv("BENCH_CHILD_PROFILE") != "" {
		_ = c.cmd.Process.Signal(syscall.SIGUSR1)
	}
}
