package chaos

import (
	"github.com/tenaz/tenaz/pkg/natsd"
)

// ServeNATS is the nats-server process of a run: JetStream on dir with
// fsync always (every acknowledged write is on disk), on listen, until
// SIGTERM or SIGINT, which shut it down gracefully. SIGKILL is the other
// way the run stops it.
func ServeNATS(dir, listen string) error {
	return natsd.Serve(natsd.Options{StoreDir: dir, Listen: listen, SyncAlways: true, ServerName: "chaos"})
}
