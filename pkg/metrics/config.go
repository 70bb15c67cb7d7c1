package metrics

import "github.com/tenaz/tenaz/pkg/config"

// OptionsFrom reads the options of a Set from a validated config's
// metrics section.
func OptionsFrom(m config.Metrics) Options {
	return Options{
		Accounts: AccountOptions{Top: m.Accounts.Top, Allow: m.Accounts.Allow, Keep: m.Accounts.Keep.D()},
		NativeHistograms: NativeHistogramOptions{Enabled: m.NativeHistograms.Enabled,
			BucketFactor: m.NativeHistograms.BucketFactor, MaxBuckets: m.NativeHistograms.MaxBuckets},
	}
}
