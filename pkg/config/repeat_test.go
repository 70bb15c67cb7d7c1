package config_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tenaz/tenaz/pkg/config"
)

const repeatBase = `
http: {max_body_bytes: 256}
targets:
  erp: {url: "http://127.0.0.1:9000/api/{{.Kind}}"}
kinds:
  report.daily: {target: erp}
  order.create:
    target: erp
    schema: {type: object, required: [order_id], properties: {total: {maximum: 9007199254740992}}}
  order.sync: {target: erp, entity: order_id, ordered_by: lane}
`

func noEnv(string) (string, bool) { return "", false }

// Declared repeats are read with their payload written as JSON, and a
// payload may come from the environment as JSON text.
func TestRepeatsDeclared(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse([]byte(repeatBase+`
accounts:
  acme:
    repeats:
      morning: {kind: report.daily, cron: "0 30 6 * * 1-5", timezone: America/Sao_Paulo, payload: {scope: all, n: [1, 2]}}
      sync: {kind: order.create, every: 90s, payload: {order_id: o-1}, entity_id: o-1}
      plain: {kind: report.daily, every: 1h}
`), func(k string) (string, bool) {
		if k == "TENAZ_ACCOUNTS_ACME_REPEATS_PLAIN_PAYLOAD" {
			return `{"from": "env"}`, true
		}
		return "", false
	})
	if err != nil {
		t.Fatalf("want a valid config, got %v", err)
	}
	rs := cfg.Accounts["acme"].Repeats
	if m := rs["morning"]; m.Payload != `{"n":[1,2],"scope":"all"}` || m.Pattern() != "0 30 6 * * 1-5" || m.Timezone != "America/Sao_Paulo" {
		t.Fatalf("morning: want the cron, zone and payload as JSON, got %+v (pattern %q)", m, m.Pattern())
	}
	if s := rs["sync"]; s.Pattern() != "@every 1m30s" || s.EntityID != "o-1" {
		t.Fatalf("sync: want @every 1m30s and the entity, got %+v (pattern %q)", s, s.Pattern())
	}
	if p := rs["plain"].Payload; p != `{"from": "env"}` {
		t.Fatalf("plain: want the payload of the environment, got %q", p)
	}
	if p := (config.Repeat{}).WithDefaults().Payload; p != "{}" {
		t.Fatalf("want an empty payload to default to {}, got %q", p)
	}
}

// Every mistake in a repeat is refused with its key named.
func TestRepeatsRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, repeat, key, msg string
	}{
		{"bad cron", `{kind: report.daily, cron: "0 61 * * * *"}`, "accounts.acme.repeats.r.cron", "above maximum"},
		{"five fields", `{kind: report.daily, cron: "30 6 * * *"}`, "accounts.acme.repeats.r.cron", "6 fields"},
		{"never", `{kind: report.daily, cron: "0 0 0 30 2 *"}`, "accounts.acme.repeats.r.cron", "matches no time"},
		{"every in cron", `{kind: report.daily, cron: "@every 1h"}`, "accounts.acme.repeats.r.cron", "every:"},
		{"unknown kind", `{kind: report.dayly, every: 1h}`, "accounts.acme.repeats.r.kind", `did you mean "report.daily"`},
		{"no kind", `{every: 1h}`, "accounts.acme.repeats.r.kind", "required"},
		{"unknown zone", `{kind: report.daily, cron: "@daily", timezone: Mars/Olympus}`, "accounts.acme.repeats.r.timezone", "IANA"},
		{"zone with every", `{kind: report.daily, every: 1h, timezone: Europe/Madrid}`, "accounts.acme.repeats.r.timezone", "no time zone"},
		{"short interval", `{kind: report.daily, every: 500ms}`, "accounts.acme.repeats.r.every", "at least 1s"},
		{"both", `{kind: report.daily, every: 1h, cron: "@daily"}`, "accounts.acme.repeats.r", "not both"},
		{"neither", `{kind: report.daily}`, "accounts.acme.repeats.r", "set cron"},
		{"not JSON", `{kind: report.daily, every: 1h, payload: "{nope"}`, "accounts.acme.repeats.r.payload", "must be JSON"},
		{"schema", `{kind: order.create, every: 1h, payload: {total: 1}}`, "accounts.acme.repeats.r.payload", "schema"},
		{"schema, a number past 2^53", `{kind: order.create, every: 1h, payload: {order_id: o, total: 9007199254740993}}`, "accounts.acme.repeats.r.payload", "at most 9007199254740992"},
		{"null", `{kind: report.daily, every: 1h, payload: "null"}`, "accounts.acme.repeats.r.payload", "payload is required"},
		{"a member given twice", `{kind: report.daily, every: 1h, payload: '{"scope":"all","scope":"one"}'}`, "accounts.acme.repeats.r.payload", `gives the member "scope" twice`},
		{"a lone surrogate escape", `{kind: report.daily, every: 1h, payload: '{"note":"\ud800"}'}`, "accounts.acme.repeats.r.payload", "lone UTF-16 surrogate escape"},
		{"too large", `{kind: report.daily, every: 1h, payload: {x: "` + strings.Repeat("x", 300) + `"}}`, "accounts.acme.repeats.r.payload", "max_body_bytes"},
		{"entity", `{kind: report.daily, every: 1h, entity_id: "a b"}`, "accounts.acme.repeats.r.entity_id", "printable"},
		{"the kind's entity field", `{kind: order.sync, every: 1h, payload: {order_id: "a b"}}`, "accounts.acme.repeats.r.payload", `the payload's "order_id", the kind's entity field`},
		{"the kind's ordering field", `{kind: order.sync, every: 1h, payload: {order_id: o, lane: "x y"}}`, "accounts.acme.repeats.r.payload", `the payload's "lane", the kind's ordering field`},
		{"unknown key", `{kind: report.daily, every: 1h, time_zone: UTC}`, "accounts.acme.repeats.r.time_zone", "unknown key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := config.Parse([]byte(repeatBase+"accounts:\n  acme:\n    repeats:\n      r: "+tc.repeat+"\n"), noEnv)
			assertKeyError(t, err, tc.key, tc.msg)
		})
	}
	t.Run("name", func(t *testing.T) {
		t.Parallel()
		_, err := config.Parse([]byte(repeatBase+"accounts:\n  acme:\n    repeats:\n      \"a.b\": {kind: report.daily, every: 1h}\n"), noEnv)
		assertKeyError(t, err, "accounts.acme.repeats.a.b", "name")
	})
	t.Run("star", func(t *testing.T) {
		t.Parallel()
		_, err := config.Parse([]byte(repeatBase+"accounts:\n  \"*\":\n    repeats:\n      r: {kind: report.daily, every: 1h}\n"), noEnv)
		assertKeyError(t, err, "accounts.*.repeats", "one account")
	})
	t.Run("api", func(t *testing.T) {
		t.Parallel()
		cfg, err := config.Parse([]byte(repeatBase), noEnv)
		if err != nil {
			t.Fatal(err)
		}
		err = cfg.ValidateRepeat("acme", "r", config.Repeat{Kind: "report.daily", Cron: "bad"})
		assertKeyError(t, err, "accounts.acme.repeats.r.cron", "6 fields")
		if err := cfg.ValidateRepeat("acme", "r", config.Repeat{Kind: "report.daily", Every: config.Duration(time.Minute)}); err != nil {
			t.Fatalf("want a valid repeat, got %v", err)
		}
	})
}

func assertKeyError(t *testing.T, err error, key, msg string) {
	t.Helper()
	if !errors.Is(err, config.ErrInvalidConfig) {
		t.Fatalf("want ErrInvalidConfig naming %s, got %v", key, err)
	}
	for _, e := range flatten(err) {
		if ke, ok := errors.AsType[*config.KeyError](e); ok && ke.Key == key && strings.Contains(ke.Msg, msg) {
			return
		}
	}
	t.Fatalf("want an error at %s saying %q, got %v", key, msg, err)
}

func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// A cron repeat's next fire time is read in its zone, daylight saving
// included: 02:30 in New York is 06:30 UTC in summer and 07:30 in winter,
// and on the spring-forward day (no 02:30) it does not fire.
func TestRepeatNext(t *testing.T) {
	t.Parallel()
	r := config.Repeat{Kind: "k", Cron: "0 30 2 * * *", Timezone: "America/New_York"}
	for _, tc := range []struct{ after, want string }{
		{"2026-07-01T00:00:00Z", "2026-07-01T06:30:00Z"},
		{"2026-07-01T06:30:00Z", "2026-07-02T06:30:00Z"},
		{"2026-01-15T12:00:00Z", "2026-01-16T07:30:00Z"},
		{"2026-03-07T08:00:00Z", "2026-03-09T06:30:00Z"}, // 8 March 2026 has no 02:30
	} {
		after, _ := time.Parse(time.RFC3339, tc.after)
		if got := r.Next(after).UTC().Format(time.RFC3339); got != tc.want {
			t.Errorf("Next(%s): want %s, got %s", tc.after, tc.want, got)
		}
	}
	if got := (config.Repeat{Every: config.Duration(time.Minute)}).Next(time.Now()); !got.IsZero() {
		t.Errorf("an interval's next time is the server's; want zero, got %s", got)
	}
	utc := config.Repeat{Cron: "@daily"}
	after, _ := time.Parse(time.RFC3339, "2026-05-01T10:00:00-03:00")
	if got := utc.Next(after).UTC().Format(time.RFC3339); got != "2026-05-02T00:00:00Z" {
		t.Errorf("without a zone cron is read in UTC: want 2026-05-02T00:00:00Z, got %s", got)
	}
}

// The occurrence a fired message names is the one before the next fire
// time the server announces: for every cron expression and time, the
// occurrence of Next(Next(t)) is Next(t).
func TestRepeatOccurrence(t *testing.T) {
	t.Parallel()
	every := config.Repeat{Every: config.Duration(90 * time.Second)}
	next, _ := time.Parse(time.RFC3339, "2026-05-01T10:01:30Z")
	if got := every.Occurrence(next).Format(time.RFC3339); got != "2026-05-01T10:00:00Z" {
		t.Fatalf("every 90s: want the occurrence 90s before the next, got %s", got)
	}
	crons := []string{"*/7 * * * * *", "0 30 2 * * *", "0 0 9 * * 1-5", "0 15 */6 * * *", "0 0 0 29 2 *", "@monthly", "0 0 12 1,15 * *", "30 59 23 31 12 *"}
	zones := []string{"", "America/New_York", "Europe/Madrid", "Asia/Kolkata", "Australia/Lord_Howe"}
	rapid.Check(t, func(rt *rapid.T) {
		r := config.Repeat{Cron: rapid.SampledFrom(crons).Draw(rt, "cron"), Timezone: rapid.SampledFrom(zones).Draw(rt, "zone")}
		at := time.Unix(rapid.Int64Range(1.7e9, 2.0e9).Draw(rt, "unix"), 0)
		occ := r.Next(at)
		if occ.IsZero() {
			rt.Fatalf("%q: no next time after %s", r.Cron, at)
		}
		if got := r.Occurrence(r.Next(occ)); !got.Equal(occ) {
			rt.Fatalf("%q in %q: want the occurrence %s before %s, got %s", r.Cron, r.Timezone, occ, r.Next(occ), got)
		}
	})
}
