package tenaz_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/size"
	"github.com/tenaz/tenaz/services/tenaz"
)

// tenaz run refuses an http.max_body_bytes its events cannot fit: with
// the embedded server's 8 MiB max_payload, the state bucket's 1 MiB
// value limit binds, and the error names the key and the figure.
func TestRunRefusesABodyThatDoesNotFit(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse([]byte(testConfig(t.TempDir(), "http://127.0.0.1:1", "")), func(k string) (string, bool) {
		if k == "TENAZ_HTTP_MAX_BODY_BYTES" {
			return "1048576", true
		}
		return "", false
	})
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	tz, err := tenaz.New(tenaz.Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = tz.Start(ctx)
	if err == nil {
		_ = tz.Stop(ctx)
		t.Fatal("want the start refused, got it running")
	}
	if !errors.Is(err, config.ErrInvalidConfig) {
		t.Fatalf("want a config error, got %v", err)
	}
	for _, want := range []string{"http.max_body_bytes", "tenaz_state", fmt.Sprintf("at most %d fit", 1<<20-size.Overhead)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("want the error to say %q, got %v", want, err)
		}
	}
}
