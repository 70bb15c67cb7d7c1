package deadletter_test

import (
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/services/deadletter"
)

// The service starts, reports ready, answers as a NATS micro service, and
// stops cleanly (twice, and before Start, without error).
func TestLifecycle(t *testing.T) {
	t.Parallel()
	servicetest.CheckLifecycle(t, "tenaz-deadletter", func(nc *nats.Conn, cfg *config.Config) (*deadletter.Service, error) {
		return deadletter.New(deadletter.Options{Conn: nc, Config: cfg})
	})
}
