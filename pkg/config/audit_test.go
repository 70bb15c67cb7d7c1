package config_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/config"
)

// audit.retention defaults to 400 days, independent of streams.retention;
// TENAZ_AUDIT_RETENTION sets it; anything but a positive duration is
// refused naming the key.
func TestAuditRetention(t *testing.T) {
	t.Parallel()
	none := func(string) (string, bool) { return "", false }
	c, err := config.Parse([]byte("streams: {retention: 1h}\n"), none)
	if err != nil || c.Audit.Retention.D() != 400*24*time.Hour || c.Streams.Retention.D() != time.Hour {
		t.Fatalf("default: want 400 days beside streams.retention 1h, got %v (%v)", c.Audit.Retention, err)
	}
	env := func(k string) (string, bool) { return "9000h", k == "TENAZ_AUDIT_RETENTION" }
	if c, err = config.Parse(nil, env); err != nil || c.Audit.Retention.D() != 9000*time.Hour {
		t.Fatalf("TENAZ_AUDIT_RETENTION=9000h: got %v (%v)", c.Audit.Retention, err)
	}
	for _, bad := range []string{"audit: {retention: -1h}", "audit: {retention: soon}"} {
		_, err := config.Parse([]byte(bad+"\n"), none)
		if !errors.Is(err, config.ErrInvalidConfig) || !strings.Contains(err.Error(), "audit.retention") {
			t.Fatalf("%s: want an invalid config naming audit.retention, got %v", bad, err)
		}
	}
}
