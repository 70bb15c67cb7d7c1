package chaos

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/tenaz/tenaz/pkg/natsd"
)

// ServeNATS is the nats-server process of a run: JetStream on dir with
// fsync always (every acknowledged write is on disk), on listen, until
// SIGTERM or SIGINT, which shut it down gracefully. SIGKILL is the other
// way the run stops it.
func ServeNATS(dir, listen string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	srv, err := natsd.Start(natsd.Options{StoreDir: dir, Listen: listen, SyncAlways: true, ServerName: "chaos"})
	if err != nil {
		return err
	}
	fmt.Println("READY", srv.ClientURL())
	<-ctx.Done()
	natsd.Shutdown(srv)
	return nil
}
