package bench

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/natsd"
	standalone "github.com/tenaz/tenaz/services/tenaz"
)

// ServeNATS runs a nats-server on dir (default sync) until SIGTERM,
// printing "READY <url>" once it accepts connections.
func ServeNATS(dir string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	srv, err := natsd.Start(natsd.Options{StoreDir: dir, Listen: "127.0.0.1:-1"})
	if err != nil {
		return err
	}
	fmt.Println("READY", srv.ClientURL())
	<-ctx.Done()
	natsd.Shutdown(srv)
	return nil
}

// ServeTenaz runs tenaz (all services) with the config file until
// SIGTERM, printing "READY" once started.
func ServeTenaz(file string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	cfg, err := config.Load(file)
	if err != nil {
		return err
	}
	t, err := standalone.New(standalone.Options{Config: cfg})
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
