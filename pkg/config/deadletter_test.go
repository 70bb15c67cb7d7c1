package config_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/config"
)

func TestDeadletterDefaultsAndCron(t *testing.T) {
	t.Parallel()
	cfg := mustParse(t, `deadletter: {digest: {at: "06:30", webhook: "${SLACK_URL}"}}`, map[string]string{"SLACK_URL": "https://hooks.example.com/x"})
	d := cfg.Deadletter
	if d.CountsEvery.D().String() != "30s" || d.ReplayRate != 100 || d.Digest.Timezone != "UTC" || d.Retention.D() != 720*time.Hour || d.MaxBytes != 0 {
		t.Fatalf("defaults: want counts_every 30s, replay_rate 100, timezone UTC, retention 720h, max_bytes 0, got %+v", d)
	}
	set := mustParse(t, `{http: {max_body_bytes: 1024}, deadletter: {retention: 168h, max_bytes: 4096, max_per_account: 500}}`, nil)
	if set.Deadletter.Retention.D() != 168*time.Hour || set.Deadletter.MaxBytes != 4096 || set.Deadletter.MaxPerAccount != 500 {
		t.Fatalf("set: want retention 168h and max_bytes 4096, got %+v", set.Deadletter)
	}
	if !d.Digest.Enabled() || d.Digest.Cron() != "0 30 6 * * *" {
		t.Fatalf("at 06:30: want cron %q, got %q", "0 30 6 * * *", d.Digest.Cron())
	}
	if d.Digest.Webhook.Reveal() != "https://hooks.example.com/x" || strings.Contains(d.Digest.Webhook.String(), "hooks") {
		t.Fatalf("webhook: want the URL from the env, redacted when printed, got %q", d.Digest.Webhook.String())
	}
	off := mustParse(t, ``, nil)
	if off.Deadletter.Digest.Enabled() || off.Deadletter.Digest.Cron() != "" {
		t.Fatal("no at and no schedule: the digest must be off")
	}
	sched := mustParse(t, `deadletter: {digest: {schedule: "0 0 7 * * 1-5", timezone: Europe/Madrid}}`, nil)
	if sched.Deadletter.Digest.Cron() != "0 0 7 * * 1-5" {
		t.Fatalf("schedule: want it as the cron, got %q", sched.Deadletter.Digest.Cron())
	}
}

func TestDeadletterInvalid(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ doc, key string }{
		{`deadletter: {digest: {at: "6am"}}`, "deadletter.digest.at"},
		{`deadletter: {digest: {at: "25:00"}}`, "deadletter.digest.at"},
		{`deadletter: {digest: {schedule: "0 6 * * *"}}`, "deadletter.digest.schedule"},
		{`deadletter: {digest: {schedule: "a b c d e f"}}`, "deadletter.digest.schedule"},
		{`deadletter: {digest: {schedule: "0 0 25 * * *"}}`, "deadletter.digest.schedule"},
		{`deadletter: {digest: {schedule: "@every 1ms"}}`, "deadletter.digest.schedule"},
		{`deadletter: {digest: {schedule: "@every soon"}}`, "deadletter.digest.schedule"},
		{`deadletter: {digest: {schedule: "@fortnightly"}}`, "deadletter.digest.schedule"},
		{`deadletter: {digest: {schedule: "TZ=UTC"}}`, "deadletter.digest.schedule"},
		{`deadletter: {digest: {schedule: "TZ=Europe/Madrid 0 0 6 * * *"}}`, "deadletter.digest.schedule"},
		{`deadletter: {digest: {schedule: "0 0 0 30 2 *"}}`, "deadletter.digest.schedule"},
		{`deadletter: {digest: {schedule: "@every  1h"}}`, "deadletter.digest.schedule"},
		{`deadletter: {digest: {at: "06:00", schedule: "0 0 6 * * *"}}`, "deadletter.digest.schedule"},
		{`deadletter: {digest: {schedule: "@every 1h", timezone: Europe/Madrid}}`, "deadletter.digest.schedule"},
		{`deadletter: {digest: {at: "06:00", timezone: Mars/Olympus}}`, "deadletter.digest.timezone"},
		{`deadletter: {digest: {at: "06:00", webhook: "hooks.slack.com/x"}}`, "deadletter.digest.webhook"},
		{`deadletter: {replay_rate: -1}`, "deadletter.replay_rate"},
		{`deadletter: {counts_every: -1s}`, "deadletter.counts_every"},
		{`deadletter: {retention: -1h}`, "deadletter.retention"},
		{`deadletter: {max_bytes: -1}`, "deadletter.max_bytes"},
		{`{http: {max_body_bytes: 1024}, deadletter: {max_bytes: 4095}}`, "deadletter.max_bytes"},
		{`deadletter: {max_per_account: -1}`, "deadletter.max_per_account"},
		{`deadletter: {max_refusals_per_account: -1}`, "deadletter.max_refusals_per_account"},
		{`accounts: {acme: {dead_letters: -1}}`, "accounts.acme.dead_letters"},
	} {
		_, err := config.Parse([]byte(tc.doc), func(string) (string, bool) { return "", false })
		var ke *config.KeyError
		if !errors.As(err, &ke) || !errors.Is(err, config.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.key+":") {
			t.Errorf("%s: want an error naming %s, got %v", tc.doc, tc.key, err)
		}
	}
}

// An account's bound in DEAD is its own dead_letters, else the "*"
// entry's, else deadletter.max_per_account; 0 everywhere is no bound.
func TestDeadLettersOf(t *testing.T) {
	cfg := mustParse(t, `
deadletter: {max_per_account: 1000}
accounts:
  "*": {dead_letters: 50}
  acme: {dead_letters: 5}
  other: {rate: 10/s}
`, nil)
	for account, want := range map[string]int64{"acme": 5, "other": 50, "unlisted": 50} {
		if got := cfg.DeadLettersOf(account); got != want {
			t.Errorf("%s: want %d, got %d", account, want, got)
		}
	}
	if got := mustParse(t, `deadletter: {max_per_account: 1000}`, nil).DeadLettersOf("acme"); got != 1000 {
		t.Errorf("without dead_letters: want deadletter.max_per_account (1000), got %d", got)
	}
	if got := mustParse(t, `{}`, nil).DeadLettersOf("acme"); got != 0 {
		t.Errorf("unset: want 0 (no bound), got %d", got)
	}
}
