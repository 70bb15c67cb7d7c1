package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/daemon"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/size"
)

// A service binary refuses to start with an http.max_body_bytes whose
// events the NATS server it reaches cannot carry (its max_payload
// lowered): the error names the key and the figure that fits, and the
// service is never built.
func TestRunRefusesABodyTheServerCannotCarry(t *testing.T) {
	t.Parallel()
	const maxPayload = 256 << 10
	srv := natstest.Start(t, natstest.MaxPayload(maxPayload))
	path := filepath.Join(t.TempDir(), "tenaz.yaml")
	yaml := fmt.Sprintf("nats: {url: %q}\nhttp: {addr: \"127.0.0.1:0\", max_body_bytes: %d}\nauth: {disabled: true}\n", srv.ClientURL(), 200<<10)
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	built := false
	err := daemon.Run(ctx, "tenaz-test", path, nil, func(daemon.Process) (daemon.Component, error) {
		built = true
		return nil, errors.New("the service was built")
	})
	if built || !errors.Is(err, config.ErrInvalidConfig) {
		t.Fatalf("want the start refused before the service is built, got built=%v, %v", built, err)
	}
	for _, want := range []string{"http.max_body_bytes", fmt.Sprintf("at most %d fit", maxPayload-size.Overhead), "max_payload"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("want the error to say %q, got %v", want, err)
		}
	}
}
