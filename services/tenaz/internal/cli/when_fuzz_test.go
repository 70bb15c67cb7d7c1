package cli

import (
	"errors"
	"testing"
	"time"
)

// --since and --until (events find, dead ls, audit export) are outside
// input: any string is a time or a usage error, and a duration ago is
// never in the future.
func FuzzParseWhen(f *testing.F) {
	for _, s := range []string{"", "24h", "2026-11-30", "2026-11-30T06:00:00Z", "2026-11-30T06:00:00", "-1h", "last tuesday", "9999999999h"} {
		f.Add(s)
	}
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, v string) {
		got, err := parseWhen("--since", v, now)
		switch {
		case err != nil:
			if !errors.Is(err, ErrUsage) || got != nil {
				t.Fatalf("%q: want a usage error alone, got %v %v", v, got, err)
			}
		case v == "":
			if got != nil {
				t.Fatalf("empty: want no time, got %v", got)
			}
		case got == nil:
			t.Fatalf("%q: no time and no error", v)
		default:
			if d, derr := time.ParseDuration(v); derr == nil && d >= 0 && got.After(now) {
				t.Fatalf("%q: %v ago is after now", v, got)
			}
		}
	})
}
