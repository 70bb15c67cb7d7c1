package tenaz_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/size"
)

// tenaz run refuses an http.max_body_bytes its events cannot fit: with
// the embedded server's 8 MiB max_payload, the state bucket's 1 MiB
// value limit binds, and the error names the key and the figure.
func TestRunRefusesABodyThatDoesNotFit(t *testing.T) {
	t.Parallel()
	cfg := servicetest.Config(t, testConfig(t.TempDir(), "http://127.0.0.1:1", ""), map[string]string{"TENAZ_HTTP_MAX_BODY_BYTES": "1048576"})
	err := refused(t, cfg)
	if !errors.Is(err, config.ErrInvalidConfig) {
		t.Fatalf("want a config error, got %v", err)
	}
	for _, want := range []string{"http.max_body_bytes", "tenaz_state", fmt.Sprintf("at most %d fit", 1<<20-size.Overhead)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("want the error to say %q, got %v", want, err)
		}
	}
}
