package config

import (
	"encoding/base64"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// maxWholeSeconds is the largest number of plain seconds a Duration holds.
const maxWholeSeconds = math.MaxInt64 / int64(time.Second)

// ParseDuration parses a Duration: a Go duration ("30s", "2m", "1h30m") or
// a plain integer number of seconds ("90"). The empty string is 0, which
// means "use the default" wherever a default exists.
func ParseDuration(s string) (Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	if isInteger(s) {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n > maxWholeSeconds || n < -maxWholeSeconds {
			return 0, fmt.Errorf("duration %q is out of range", s)
		}
		return Duration(time.Duration(n) * time.Second), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q: write a number of seconds or a number with a unit, such as 30s, 2m or 1h", s)
	}
	return Duration(d), nil
}

func isInteger(s string) bool {
	if s != "" && (s[0] == '-' || s[0] == '+') {
		s = s[1:]
	}
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// String formats d like time.Duration but without trailing zero units:
// "30s", "2m", "1h", "1h30m".
func (d Duration) String() string {
	s := time.Duration(d).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// UnmarshalYAML reads "30s", "2m", "1h" or a plain integer of seconds.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	s, err := scalarText(n, "a duration such as \"30s\"")
	if err != nil {
		return err
	}
	v, err := ParseDuration(s)
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// MarshalYAML writes d as String does.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// ParseRate parses a Rate: "<n>/s", "<n>/m", "<n>/h" or a bare number of
// events per second. "", "0" and "unlimited" mean no limit; "unlimited"
// (unlike "") also stops an account from inheriting the "*" account's rate.
func ParseRate(s string) (Rate, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Rate{}, nil
	}
	if s == "unlimited" {
		return Rate{Text: s}, nil
	}
	num, unit, hasUnit := strings.Cut(s, "/")
	n, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil || math.IsNaN(n) || math.IsInf(n, 0) || n < 0 {
		return Rate{}, fmt.Errorf("invalid rate %q: write <n>/s, <n>/m or <n>/h with n >= 0, such as 50/s", s)
	}
	per := 1.0
	if hasUnit {
		switch strings.TrimSpace(unit) {
		case "s":
		case "m":
			per = 60
		case "h":
			per = 3600
		default:
			return Rate{}, fmt.Errorf("invalid rate %q: the unit after / must be s, m or h", s)
		}
	}
	r := Rate{PerSecond: n / per, Text: s}
	if n > 0 && (r.PerSecond < MinRate || r.PerSecond > MaxRate) {
		// Outside these, 1/rate is no interval a timer keeps: a smaller
		// rate overflows it, a larger one rounds it to nothing.
		return Rate{}, fmt.Errorf("invalid rate %q: must be at least one a day (0.0417/h) and at most %d/s, or 0 for unlimited", s, int(MaxRate))
	}
	return r, nil
}

// The bounds of a limited Rate, in calls per second.
const (
	MinRate = 1.0 / 86400 // one a day
	MaxRate = 1_000_000
)

// Unlimited reports whether r puts no limit on calls.
func (r Rate) Unlimited() bool { return !(r.PerSecond > 0) }

// IsZero reports whether r was never set (it then inherits, see
// Config.Account).
func (r Rate) IsZero() bool { return r.PerSecond == 0 && r.Text == "" }

// String returns the rate as written, or "<n>/s" when it was built in code.
func (r Rate) String() string {
	if r.Text != "" || r.PerSecond == 0 {
		return r.Text
	}
	return strconv.FormatFloat(r.PerSecond, 'g', -1, 64) + "/s"
}

// UnmarshalYAML reads "50/s", "600/m", "10/h", a number (per second) or
// "unlimited".
func (r *Rate) UnmarshalYAML(n *yaml.Node) error {
	s, err := scalarText(n, "a rate such as \"50/s\"")
	if err != nil {
		return err
	}
	v, err := ParseRate(s)
	if err != nil {
		return err
	}
	*r = v
	return nil
}

// MarshalYAML writes r as String does.
func (r Rate) MarshalYAML() (any, error) { return r.String(), nil }

// UnmarshalYAML reads a secret as a plain string (after ${ENV} substitution).
func (s *Secret) UnmarshalYAML(n *yaml.Node) error {
	v, err := scalarText(n, "a string")
	if err != nil {
		return err
	}
	*s = Secret(v)
	return nil
}

// MarshalYAML redacts.
func (s Secret) MarshalYAML() (any, error) { return s.String(), nil }

// GoString redacts (fmt's %#v uses it).
func (s Secret) GoString() string { return strconv.Quote(s.String()) }

// scalarText returns the text of a scalar node, decoding !!binary.
func scalarText(n *yaml.Node, want string) (string, error) {
	if n.Kind != yaml.ScalarNode {
		return "", fmt.Errorf("expected %s, got %s", want, describe(n))
	}
	if n.ShortTag() == "!!binary" {
		b, err := base64.StdEncoding.DecodeString(n.Value)
		if err != nil {
			return "", fmt.Errorf("invalid !!binary value")
		}
		return string(b), nil
	}
	return n.Value, nil
}

// describe names what a node is, for error messages. It never shows more
// than a short prefix of a value.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.DocumentNode:
		return "a document"
	}
	v := n.Value
	if len(v) > 40 {
		v = v[:40] + "…"
	}
	return strconv.Quote(v)
}

// Concurrency is a number of calls at once, or ConcurrencyAuto: written
// as a positive integer or "auto".
type Concurrency int

// ConcurrencyAuto is "concurrency: auto": the dispatcher learns how many
// calls at once the account's targets take, between the account's
// concurrency_min and concurrency_max.
const ConcurrencyAuto Concurrency = -1

// ConcurrencyCeiling is the most calls at once a concurrency (or its
// concurrency_max) may set: each slot is buffered memory in every
// dispatcher, and no API takes more from one account.
const ConcurrencyCeiling = 10_000

// Auto reports whether c is ConcurrencyAuto.
func (c Concurrency) Auto() bool { return c == ConcurrencyAuto }

// String returns "auto" or the number.
func (c Concurrency) String() string {
	if c.Auto() {
		return "auto"
	}
	return strconv.Itoa(int(c))
}

// UnmarshalYAML reads a positive integer or "auto".
func (c *Concurrency) UnmarshalYAML(n *yaml.Node) error {
	const want = `a positive integer or "auto"`
	s, err := scalarText(n, want)
	if err != nil {
		return err
	}
	s = strings.TrimSpace(s)
	if strings.EqualFold(s, "auto") {
		*c = ConcurrencyAuto
		return nil
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 0 {
		return fmt.Errorf("expected %s, got %s", want, describe(n))
	}
	if v > ConcurrencyCeiling {
		return fmt.Errorf("must be at most %d calls at once, got %s", ConcurrencyCeiling, describe(n))
	}
	*c = Concurrency(v)
	return nil
}

// MarshalYAML writes c as String does.
func (c Concurrency) MarshalYAML() (any, error) {
	if c.Auto() {
		return "auto", nil
	}
	return int(c), nil
}
