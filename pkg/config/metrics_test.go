package config_test

import (
	"slices"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/config"
)

// The metrics keys: their defaults, top: 0 kept as written (only the
// allowlist), the environment overrides, and errors that name the key.
func TestMetricsKeys(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse([]byte(minimal), envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	if m := cfg.Metrics; m.Accounts.Top != 100 || m.Accounts.Keep.D() != 10*time.Minute || len(m.Accounts.Allow) != 0 ||
		m.NativeHistograms.Enabled || m.NativeHistograms.BucketFactor != 1.1 || m.NativeHistograms.MaxBuckets != 160 {
		t.Errorf("defaults: want top 100, keep 10m, no allow, native histograms off (factor 1.1, 160 buckets), got %+v", m)
	}

	cfg, err = config.Parse([]byte(minimal+"metrics: {accounts: {top: 0, allow: [acme, beta], keep: 30m}, native_histograms: {enabled: true, bucket_factor: 1.05}}"), envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	if m := cfg.Metrics; m.Accounts.Top != 0 || !slices.Equal(m.Accounts.Allow, []string{"acme", "beta"}) || m.Accounts.Keep.D() != 30*time.Minute ||
		!m.NativeHistograms.Enabled || m.NativeHistograms.BucketFactor != 1.05 || m.NativeHistograms.MaxBuckets != 160 {
		t.Errorf("from the file: want top 0, allow [acme beta], keep 30m, native histograms on at 1.05, got %+v", m)
	}

	env := map[string]string{
		"TENAZ_METRICS_ACCOUNTS_TOP":                  "0",
		"TENAZ_METRICS_ACCOUNTS_ALLOW":                "acme, gamma",
		"TENAZ_METRICS_NATIVE_HISTOGRAMS_ENABLED":     "true",
		"TENAZ_METRICS_NATIVE_HISTOGRAMS_MAX_BUCKETS": "80",
	}
	cfg, err = config.Parse([]byte(minimal), envOf(env))
	if err != nil {
		t.Fatal(err)
	}
	if m := cfg.Metrics; m.Accounts.Top != 0 || !slices.Equal(m.Accounts.Allow, []string{"acme", "gamma"}) ||
		!m.NativeHistograms.Enabled || m.NativeHistograms.MaxBuckets != 80 {
		t.Errorf("from the environment: want top 0, allow [acme gamma], native histograms on with 80 buckets, got %+v", m)
	}

	for _, c := range []struct{ doc, want string }{
		{"metrics: {accounts: {top: -1}}", "metrics.accounts.top: must be between 0 (only metrics.accounts.allow) and 10000, got -1"},
		{"metrics: {accounts: {top: 10001}}", "metrics.accounts.top: must be between 0"},
		{"metrics: {accounts: {top: lots}}", "metrics.accounts.top: expected an integer"},
		{"metrics: {accounts: {allow: [acme, 'no such name']}}", `metrics.accounts.allow[1]: must be an account name of 1-64 characters of [A-Za-z0-9_-], got "no such name"`},
		{"metrics: {accounts: {allow: [acme, acme]}}", `metrics.accounts.allow[1]: "acme" is listed twice`},
		{"metrics: {accounts: {keep: 10s}}", "metrics.accounts.keep: must be between 1m (the ranking runs once a minute) and 24h, got 10s"},
		{"metrics: {native_histograms: {bucket_factor: 1}}", "metrics.native_histograms.bucket_factor: must be more than 1 and at most 2, got 1"},
		{"metrics: {native_histograms: {max_buckets: -5}}", "metrics.native_histograms.max_buckets: must be at least 1, got -5"},
		{"metrics: {acounts: {top: 5}}", `metrics.acounts: unknown key (did you mean "accounts"?)`},
	} {
		_, err := config.Parse([]byte(minimal+c.doc), envOf(nil))
		wantErr(t, err, c.want)
	}
}
