package tenaz_test

import (
	"context"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/services/tenaz/internal/cli"
	"github.com/tenaz/tenaz/streams"
)

// DEAD's bounds are deadletter.retention and max_bytes, which the
// services apply; `tenaz streams apply`, which has no config, keeps the
// ones DEAD has instead of putting back the defaults.
func TestCLIStreamsApplyKeepsDeadBounds(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	_, js := srv.Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := streams.Apply(ctx, js, streams.Options{DeadMaxAge: 7 * 24 * time.Hour, DeadMaxBytes: 8 << 20}); err != nil {
		t.Fatal(err)
	}
	newOperator(t, srv.ClientURL()).must(cli.ExitOK, "streams", "apply")
	s, err := js.Stream(ctx, names.StreamDead)
	if err != nil {
		t.Fatal(err)
	}
	if c := s.CachedInfo().Config; c.MaxAge != 7*24*time.Hour || c.MaxBytes != 8<<20 {
		t.Fatalf("DEAD after tenaz streams apply: want max_age 168h and max_bytes 8 MiB kept, got %s and %d", c.MaxAge, c.MaxBytes)
	}
}
