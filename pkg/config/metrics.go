package config

import "time"

// Metrics shapes the Prometheus metrics every service exports.
type Metrics struct {
	// Accounts bounds the account label, so that many accounts do not
	// make many series.
	Accounts MetricsAccounts `yaml:"accounts"`
	// NativeHistograms adds Prometheus native histograms to the latency
	// histograms, beside their classic buckets.
	NativeHistograms NativeHistograms `yaml:"native_histograms"`
}

// MetricsAccounts says which accounts have series of their own; every
// other account is counted as account="other".
type MetricsAccounts struct {
	// Top is how many accounts, besides Allow, have their own series on
	// each replica: the first ones seen while there is room, then the
	// busiest (an account takes the place of the least busy holder once it
	// has been more than twice as busy over the last ten minutes). 0: only
	// Allow. At most MaxMetricsTop. Defaults to 100.
	Top int `yaml:"top"`
	// Allow lists accounts that always have their own series, on every
	// replica, outside the top places. Defaults to none.
	Allow []string `yaml:"allow"`
	// Keep is how long an account that lost its place keeps its series,
	// unchanged, before they are removed (its new counts go to other
	// meanwhile): longer than a few scrape intervals, so that Prometheus
	// reads every count. Between 1m and 24h. Defaults to 10m.
	Keep Duration `yaml:"keep"`
}

// NativeHistograms configures the native histograms.
type NativeHistograms struct {
	// Enabled adds a native histogram to tenaz_wait_seconds and
	// tenaz_delivery_duration_seconds (scraped with the protobuf format).
	// Defaults to false.
	Enabled bool `yaml:"enabled"`
	// BucketFactor is the most one bucket's upper bound may grow to the
	// next's: 1.1 is about 10 % resolution. More than 1, at most 2.
	// Defaults to 1.1.
	BucketFactor float64 `yaml:"bucket_factor"`
	// MaxBuckets bounds the buckets one histogram series holds; past it
	// the resolution halves. At least 1. Defaults to 160.
	MaxBuckets int `yaml:"max_buckets"`
}

// MaxMetricsTop bounds metrics.accounts.top.
const MaxMetricsTop = 10000

const (
	defaultMetricsTop   = 100
	defaultMetricsKeep  = Duration(10 * time.Minute)
	defaultBucketFactor = 1.1
	defaultMaxBuckets   = 160
)

func (m *Metrics) withDefaults(explicitZero map[string]bool) {
	if m.Accounts.Top == 0 && !explicitZero["metrics.accounts.top"] {
		m.Accounts.Top = defaultMetricsTop
	}
	setDur(&m.Accounts.Keep, defaultMetricsKeep)
	if m.NativeHistograms.BucketFactor == 0 {
		m.NativeHistograms.BucketFactor = defaultBucketFactor
	}
	if m.NativeHistograms.MaxBuckets == 0 {
		m.NativeHistograms.MaxBuckets = defaultMaxBuckets
	}
}

func (v *validator) metrics() {
	m := v.c.Metrics
	if m.Accounts.Top < 0 || m.Accounts.Top > MaxMetricsTop {
		v.add("metrics.accounts.top", "must be between 0 (only metrics.accounts.allow) and %d, got %d", MaxMetricsTop, m.Accounts.Top)
	}
	seen := map[string]bool{}
	for i, a := range m.Accounts.Allow {
		key := index("metrics.accounts.allow", i)
		switch {
		case !token(a):
			v.add(key, "must be an account name of 1-64 characters of [A-Za-z0-9_-], got %q", a)
		case seen[a]:
			v.add(key, "%q is listed twice", a)
		}
		seen[a] = true
	}
	if k := m.Accounts.Keep; k < Duration(time.Minute) || k > Duration(24*time.Hour) {
		v.add("metrics.accounts.keep", "must be between 1m (the ranking runs once a minute) and 24h, got %s", k)
	}
	if f := m.NativeHistograms.BucketFactor; f <= 1 || f > 2 {
		v.add("metrics.native_histograms.bucket_factor", "must be more than 1 and at most 2, got %g", f)
	}
	if n := m.NativeHistograms.MaxBuckets; n < 1 {
		v.add("metrics.native_histograms.max_buckets", "must be at least 1, got %d", n)
	}
}
