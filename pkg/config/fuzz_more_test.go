package config_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/config"
)

// FuzzRepeatScheduleIsFiredOrRefusedByKey checks a repeat's cron, every
// and timezone, both as the API hands them to ValidateRepeat and as
// tenaz.yaml declares them: neither path panics; every refusal wraps
// ErrInvalidConfig and is a KeyError at the repeat or one of those three
// keys; and an accepted repeat has the schedule the server is given: a
// cron fires after now and the firing it names is the one before
// (Occurrence), an interval is at least 1s and reads back from its
// Pattern.
func FuzzRepeatScheduleIsFiredOrRefusedByKey(f *testing.F) {
	base, err := config.Parse([]byte(repeatBase), noEnv)
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range [][3]string{
		{"0 30 6 * * 1-5", "", "America/Sao_Paulo"}, {"", "90s", ""}, {"", "1h", ""}, {"", "60", ""},
		{"0 61 * * * *", "", ""}, {"30 6 * * *", "", ""}, {"0 0 0 30 2 *", "", ""}, {"@every 1h", "", ""},
		{"@daily", "", "Mars/Olympus"}, {"", "1h", "Europe/Madrid"}, {"", "500ms", ""}, {"@daily", "1h", ""},
		{"", "", ""}, {"bad", "", ""}, {"*/7 * * * * *", "", "Australia/Lord_Howe"}, {"0 0 0 29 2 *", "", ""},
		{"@monthly", "", "Local"}, {"0 0 12 1,15 * *", "", "Asia/Kolkata"}, {"30 59 23 31 12 *", "", ""},
		{"0 30 2 * * *", "", "America/New_York"}, {"CRON_TZ=Europe/Madrid 0 0 * * * *", "", ""},
		{"TZ=UTC @hourly", "", ""}, {"", "-1s", ""}, {"", "1e3s", ""}, {"", "9223372036s", ""},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, cron, every, timezone string) {
		const key = "accounts.acme.repeats.r"
		// The API: every is parsed first (ingest answers 400 itself when
		// it does not), then the repeat is validated.
		r := config.Repeat{Kind: "report.daily", Cron: cron, Timezone: timezone}
		if d, err := config.ParseDuration(every); err == nil {
			r.Every = d
			if err := base.ValidateRepeat("acme", "r", r); err != nil {
				checkRepeatRefusal(t, err, key)
			} else {
				checkRepeatSchedule(t, r)
			}
		}
		// tenaz.yaml: JSON strings are YAML double-quoted scalars.
		doc := repeatBase + "accounts:\n  acme:\n    repeats:\n      r: {kind: report.daily"
		for _, kv := range [][2]string{{"cron", cron}, {"every", every}, {"timezone", timezone}} {
			if kv[1] != "" {
				q, _ := json.Marshal(kv[1])
				doc += ", " + kv[0] + ": " + string(q)
			}
		}
		cfg, err := config.Parse([]byte(doc+"}\n"), noEnv)
		if err != nil {
			checkRepeatRefusal(t, err, key)
			return
		}
		r = cfg.Accounts["acme"].Repeats["r"]
		if err := base.ValidateRepeat("acme", "r", r); err != nil {
			t.Fatalf("Parse accepted repeat %+v, which ValidateRepeat refuses: %v", r, err)
		}
		checkRepeatSchedule(t, r)
	})
}

// checkRepeatRefusal: err wraps ErrInvalidConfig, and each of its errors is
// a KeyError at key or at its cron, every or timezone.
func checkRepeatRefusal(t *testing.T, err error, key string) {
	t.Helper()
	if !errors.Is(err, config.ErrInvalidConfig) {
		t.Fatalf("want an error wrapping ErrInvalidConfig, got %v", err)
	}
	for _, e := range leaves(err) {
		ke, ok := e.(*config.KeyError)
		if !ok {
			t.Fatalf("want KeyErrors, got %T %v", e, e)
		}
		switch strings.TrimPrefix(ke.Key, key) {
		case "", ".cron", ".every", ".timezone":
		default:
			t.Fatalf("want an error at %s or its cron, every or timezone, got one at %q: %v", key, ke.Key, ke)
		}
	}
}

// checkRepeatSchedule checks what the server is given of an accepted
// repeat.
func checkRepeatSchedule(t *testing.T, r config.Repeat) {
	t.Helper()
	if (r.Cron == "") == (r.Every == 0) {
		t.Fatalf("accepted %+v: want cron or every, exactly one", r)
	}
	p := r.Pattern()
	now := time.Now()
	if r.Cron != "" {
		next := r.Next(now)
		if p != r.Cron || !next.After(now) {
			t.Fatalf("accepted cron %q in %q: pattern %q, next %v after now %v", r.Cron, r.Timezone, p, next, now)
		}
		if after := r.Next(next); !after.IsZero() {
			if occ := r.Occurrence(after); !occ.Equal(next) {
				t.Fatalf("cron %q in %q: the firing before %v is %v, Occurrence says %v", r.Cron, r.Timezone, after, next, occ)
			}
		}
		return
	}
	d, err := config.ParseDuration(strings.TrimPrefix(p, "@every "))
	if r.Timezone != "" || r.Every < config.MinRepeatEvery || !strings.HasPrefix(p, "@every ") || err != nil || d != r.Every {
		t.Fatalf("accepted every %v (timezone %q): pattern %q reads as %v, %v", r.Every, r.Timezone, p, d, err)
	}
	if !r.Next(now).IsZero() {
		t.Fatalf("every %v: want no next time of its own (the server's), got %v", r.Every, r.Next(now))
	}
}

// leaves are the errors joined in err (a KeyError, which also unwraps to
// more than one, is a leaf).
func leaves(err error) []error {
	j, ok := err.(interface{ Unwrap() []error })
	if _, leaf := err.(*config.KeyError); leaf || !ok {
		return []error{err}
	}
	var out []error
	for _, e := range j.Unwrap() {
		out = append(out, leaves(e)...)
	}
	return out
}
