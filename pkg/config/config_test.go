package config_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/config"
)

// specYAML is the product's reference config: account defaults and
// overrides, a sync, a callback and a polled target, and a kind of each
// completion with a fallback stage.
const specYAML = `
nats:
  url: ""                      # empty: embedded server (tenaz run)
  embedded: {store_dir: ./.tenaz, sync: always}   # or an interval, e.g. 1s
http: {addr: ":8080"}
accounts:
  "*":  {concurrency: 8, rate: 50/s, breaker: {failures: 5, cooldown: 2m}}
  acme: {concurrency: 4, targets: {erp: {headers: {X-App-Key: "${ACME_ERP_KEY}"}}}}
targets:
  erp:
    url: "http://127.0.0.1:9000/api/{{.Kind}}"
    method: POST
    timeout: 10s
    signing_secret: "${ERP_SIGNING_SECRET}"
    classify: {"409": success, "422": permanent, "423": transient}
  bureau_a: {url: "http://127.0.0.1:9001/proposals", callback_secret: "${BUREAU_A_SECRET}"}
  bureau_b:
    url: "http://127.0.0.1:9002/evaluations"
    poll: {url: "http://127.0.0.1:9002/evaluations/{{.Reference}}", interval: 30s,
           done_when: {field: status, in: [approved, rejected]}}
kinds:
  order.create:    {target: erp, attempts: 6, backoff: {initial: 30s, max: 1h, jitter: 0.2}, entity: order_id}
  fiscal.adjust:   {target: erp, ordered_by: order_id}
  reward.credit:   {target: erp, attempts: 5, backoff: {initial: 60s}}
  credit.evaluate:
    target: bureau_a
    completion: callback
    attempts: 3
    callback_sla: 30m
    on_callback_timeout: manual_review      # or: fallback
    fallback: {target: bureau_b, completion: poll, attempts: 3, poll_sla: 2h}
`

var specEnv = map[string]string{
	"ACME_ERP_KEY":       "acme-key-123",
	"ERP_SIGNING_SECRET": erpSecret,
	"BUREAU_A_SECRET":    testSecret,
}

// Standard Webhooks secrets of 32 bytes each.
const (
	testSecret = "whsec_dGVuYXotY29uZmlnLXRlc3Qtc2VjcmV0LTMyYnl0ZXM="
	erpSecret  = "whsec_dGVuYXotY29uZmlnLXRlc3QtZXJwLXNlY3JldC1rZXk="
)

// minimal is the smallest useful config; cases append to it.
const minimal = `
targets:
  erp: {url: "https://erp.example.com/api/{{.Kind}}"}
kinds:
  order.create: {target: erp}
`

// erpTarget and orderKind are the two halves of minimal, for cases that
// replace the other half.
const (
	erpTarget = "targets: {erp: {url: 'https://erp.example.com/api/{{.Kind}}'}}\n"
	orderKind = "kinds: {order.create: {target: erp}}\n"
)

func envOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

func merged(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

func mustParse(t *testing.T, doc string, env map[string]string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(doc), envOf(env))
	if err != nil {
		t.Fatalf("Parse: expected no error, got:\n%v", err)
	}
	return cfg
}

// wantErr asserts that err wraps ErrInvalidConfig and that its message
// contains every fragment (each normally starts with the key path).
func wantErr(t *testing.T, err error, fragments ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("expected an error containing %q, got nil", fragments)
	}
	if !errors.Is(err, config.ErrInvalidConfig) {
		t.Errorf("expected errors.Is(err, ErrInvalidConfig), got false for: %v", err)
	}
	for _, f := range fragments {
		if !strings.Contains(err.Error(), f) {
			t.Errorf("expected the error to contain %q, got:\n%v", f, err)
		}
	}
}

func eq[T comparable](t *testing.T, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("%s: expected %v, got %v", what, want, got)
	}
}

func TestParseSpecExample(t *testing.T) {
	t.Parallel()
	cfg := mustParse(t, specYAML, specEnv)

	k, ok := cfg.Kind("order.create")
	if !ok {
		t.Fatal("expected kind order.create to exist")
	}
	eq(t, "order.create target", k.Target, "erp")
	eq(t, "order.create entity", k.Entity, "order_id")
	eq(t, "order.create completion", k.Completion, config.CompletionSync)
	eq(t, "order.create backoff.max", k.Backoff.Max.D(), time.Hour)

	r, _ := cfg.Kind("reward.credit")
	eq(t, "reward.credit attempts", r.Attempts, 5)
	eq(t, "reward.credit backoff.initial", r.Backoff.Initial.D(), time.Minute)
	eq(t, "reward.credit backoff.max (default)", r.Backoff.Max.D(), time.Hour)

	ce, _ := cfg.Kind("credit.evaluate")
	fb, ok := ce.StageFor(true)
	if !ok {
		t.Fatal("expected credit.evaluate to have a fallback stage")
	}
	eq(t, "fallback target", fb.Target, "bureau_b")
	eq(t, "fallback completion", fb.Completion, config.CompletionPoll)
	eq(t, "fallback poll_sla", fb.PollSLA.D(), 2*time.Hour)
	eq(t, "fallback backoff.initial (default)", fb.Backoff.Initial.D(), 30*time.Second)
	eq(t, "on_callback_timeout", ce.OnCallbackTimeout, config.OnCallbackTimeoutManualReview)

	erp := cfg.TargetFor("acme", "erp")
	eq(t, "acme erp X-App-Key", erp.Headers["X-App-Key"].Reveal(), "acme-key-123")
	eq(t, "erp signing secret", erp.SigningSecret.Reveal(), erpSecret)
	eq(t, "erp classify 409", erp.Classify["409"], config.ClassSuccess)
	other := cfg.TargetFor("other", "erp")
	if _, has := other.Headers["X-App-Key"]; has {
		t.Errorf("expected account other not to get acme's header, got %v", other.Headers)
	}

	acme := cfg.Account("acme")
	eq(t, "acme concurrency", acme.Concurrency, 4)
	eq(t, "acme rate (inherited)", acme.Rate.PerSecond, 50.0)
	eq(t, "acme breaker failures (inherited)", acme.Breaker.Failures, 5)

	b, _ := cfg.Target("bureau_b")
	if b.Poll == nil {
		t.Fatal("expected bureau_b.poll to be set")
	}
	eq(t, "bureau_b poll done_when.field", b.Poll.DoneWhen.Field, "status")
	eq(t, "bureau_b poll done_when.in", strings.Join(b.Poll.DoneWhen.In, ","), "approved,rejected")
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	cfg := mustParse(t, `
targets:
  erp: {url: "https://erp.example.com/{{.Kind}}", poll: {url: "https://erp.example.com/jobs/{{.Reference}}", done_when: {field: status, in: [done]}}}
kinds:
  order.create: {target: erp, fallback: {target: erp}}
`, nil)

	eq(t, "prefix", cfg.Prefix, "tenaz")
	eq(t, "nats.url", cfg.NATS.URL, "")
	eq(t, "nats.embedded.store_dir", cfg.NATS.Embedded.StoreDir, "./.tenaz")
	eq(t, "nats.embedded.sync", cfg.NATS.Embedded.Sync, "always")
	eq(t, "nats.embedded.listen", cfg.NATS.Embedded.Listen, "127.0.0.1:4222")
	eq(t, "http.addr", cfg.HTTP.Addr, ":8080")
	eq(t, "http.max_body_bytes", cfg.HTTP.MaxBodyBytes, int64(768<<10))
	eq(t, "http.read_header_timeout", cfg.HTTP.ReadHeaderTimeout.D(), 5*time.Second)
	eq(t, "http.read_timeout", cfg.HTTP.ReadTimeout.D(), 30*time.Second)
	eq(t, "http.write_timeout", cfg.HTTP.WriteTimeout.D(), 60*time.Second)
	eq(t, "http.idle_timeout", cfg.HTTP.IdleTimeout.D(), 120*time.Second)
	eq(t, "log.format", cfg.Log.Format, "json")
	eq(t, "log.level", cfg.Log.Level, "info")
	eq(t, "streams.replicas", cfg.Streams.Replicas, 1)
	eq(t, "streams.retention", cfg.Streams.Retention.D(), 168*time.Hour)
	eq(t, "demo.provider", cfg.Demo.Provider, "")
	eq(t, "demo.failure_rate", cfg.Demo.FailureRate, 0.1)
	eq(t, "outbox.table", cfg.Outbox.Table, "tenaz_outbox")
	eq(t, "outbox.batch", cfg.Outbox.Batch, 100)
	eq(t, "outbox.poll_interval", cfg.Outbox.PollInterval.D(), time.Second)

	star, ok := cfg.Accounts["*"]
	if !ok {
		t.Fatal(`expected WithDefaults to add the "*" account`)
	}
	eq(t, "accounts.*.concurrency", star.Concurrency, 8)
	eq(t, "accounts.*.rate unlimited", star.Rate.Unlimited(), true)
	eq(t, "accounts.*.breaker.failures", star.Breaker.Failures, 5)
	eq(t, "accounts.*.breaker.cooldown", star.Breaker.Cooldown.D(), 2*time.Minute)

	tg, _ := cfg.Target("erp")
	eq(t, "targets.erp.method", tg.Method, "POST")
	eq(t, "targets.erp.timeout", tg.Timeout.D(), 10*time.Second)
	eq(t, "targets.erp.reference_field", tg.ReferenceField, "id")
	eq(t, "targets.erp.signing_secret", tg.SigningSecret, config.Secret(""))
	eq(t, "targets.erp.poll.interval", tg.Poll.Interval.D(), 30*time.Second)
	eq(t, "targets.erp PollEvery", tg.PollEvery().D(), 30*time.Second)
	eq(t, "PollEvery of a target without poll", config.Target{}.PollEvery().D(), 30*time.Second)

	k, _ := cfg.Kind("order.create")
	eq(t, "on_callback_timeout", k.OnCallbackTimeout, "manual_review")
	for _, fallback := range []bool{false, true} {
		s, ok := k.StageFor(fallback)
		if !ok {
			t.Fatalf("StageFor(%v): expected a stage", fallback)
		}
		what := fmt.Sprintf("stage (fallback=%v) ", fallback)
		eq(t, what+"completion", s.Completion, "sync")
		eq(t, what+"attempts", s.Attempts, 6)
		eq(t, what+"backoff.initial", s.Backoff.Initial.D(), 30*time.Second)
		eq(t, what+"backoff.max", s.Backoff.Max.D(), time.Hour)
		eq(t, what+"backoff.multiplier", s.Backoff.Multiplier, 2.0)
		eq(t, what+"backoff.jitter", s.Backoff.Jitter, 0.2)
		eq(t, what+"backoff.max_retry_after", s.Backoff.MaxRetryAfter.D(), time.Hour)
		eq(t, what+"callback_sla", s.CallbackSLA.D(), 30*time.Minute)
		eq(t, what+"poll_sla", s.PollSLA.D(), 2*time.Hour)
	}

	before := cfg.Redacted()
	if err := cfg.WithDefaults().Validate(); err != nil {
		t.Fatalf("expected WithDefaults twice to stay valid, got %v", err)
	}
	if after := cfg.Redacted(); after != before {
		t.Errorf("expected WithDefaults to be idempotent, got\n%s\nthen\n%s", before, after)
	}
}

func TestDefaultsOnEmptyDocument(t *testing.T) {
	t.Parallel()
	for _, doc := range []string{"", "# only a comment\n", "---\n", "~\n"} {
		cfg, err := config.Parse([]byte(doc), nil)
		if err != nil {
			t.Errorf("Parse(%q): expected no error, got %v", doc, err)
			continue
		}
		eq(t, fmt.Sprintf("Parse(%q).HTTP.Addr", doc), cfg.HTTP.Addr, ":8080")
	}
}

func TestWithDefaultsOnBareStruct(t *testing.T) {
	t.Parallel()
	cfg := (&config.Config{}).WithDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("expected the zero Config with defaults to be valid, got %v", err)
	}
	if (*config.Config)(nil).WithDefaults() != nil {
		t.Error("expected nil.WithDefaults() to return nil")
	}
}

func TestExplicitZeroIsKept(t *testing.T) {
	t.Parallel()
	cfg := mustParse(t, erpTarget+`
kinds:
  order.create: {target: erp, backoff: {jitter: 0}, fallback: {target: erp, backoff: {jitter: 0.0}}}
  order.update: {target: erp}
demo: {failure_rate: 0}
`, nil)
	k, _ := cfg.Kind("order.create")
	eq(t, "kinds.order.create.backoff.jitter", k.Backoff.Jitter, 0.0)
	eq(t, "kinds.order.create.fallback.backoff.jitter", k.Fallback.Backoff.Jitter, 0.0)
	u, _ := cfg.Kind("order.update")
	eq(t, "kinds.order.update.backoff.jitter (default)", u.Backoff.Jitter, 0.2)
	eq(t, "demo.failure_rate", cfg.Demo.FailureRate, 0.0)

	cfg = mustParse(t, minimal, map[string]string{"TENAZ_DEMO_FAILURE_RATE": "0"})
	eq(t, "demo.failure_rate from TENAZ_DEMO_FAILURE_RATE=0", cfg.Demo.FailureRate, 0.0)
}

func TestValidConfigs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	schemaFile := filepath.Join(dir, "order.json")
	if err := os.WriteFile(schemaFile, []byte(`{"type": "object", "required": ["order_id"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		doc   string
		env   map[string]string
		check func(t *testing.T, c *config.Config)
	}{
		{name: "minimal", doc: minimal},
		{name: "spec example", doc: specYAML, env: specEnv},
		{
			name: "anchors and merge keys",
			doc: erpTarget + `
kinds:
  order.create: &base {target: erp, attempts: 3, backoff: {initial: 5s}}
  order.update: {<<: *base, attempts: 4}
`,
			check: func(t *testing.T, c *config.Config) {
				u, _ := c.Kind("order.update")
				eq(t, "order.update target (merged)", u.Target, "erp")
				eq(t, "order.update attempts (explicit wins)", u.Attempts, 4)
				eq(t, "order.update backoff.initial (merged)", u.Backoff.Initial.D(), 5*time.Second)
			},
		},
		{
			name: "durations and rates in every form",
			doc: minimal + `
accounts:
  a: {rate: 600/m, breaker: {cooldown: 90}}
  b: {rate: "0.5"}
  c: {rate: 36/h}
  d: {rate: unlimited}
  "*": {rate: 100/s}
`,
			check: func(t *testing.T, c *config.Config) {
				eq(t, "a rate", c.Account("a").Rate.PerSecond, 10.0)
				eq(t, "a cooldown (plain seconds)", c.Account("a").Breaker.Cooldown.D(), 90*time.Second)
				eq(t, "b rate", c.Account("b").Rate.PerSecond, 0.5)
				eq(t, "c rate", c.Account("c").Rate.PerSecond, 0.01)
				eq(t, "d rate unlimited (does not inherit)", c.Account("d").Rate.Unlimited(), true)
				eq(t, "e rate (inherits *)", c.Account("e").Rate.PerSecond, 100.0)
			},
		},
		{
			name: "provider-wide target limits",
			doc:  "targets: {bureau: {url: 'http://x/', rate: 20/s, concurrency: 3}, erp: {url: 'http://y/'}, open: {url: 'http://z/', rate: unlimited}}",
			check: func(t *testing.T, c *config.Config) {
				b, _ := c.Target("bureau")
				eq(t, "bureau rate", b.Rate.PerSecond, 20.0)
				eq(t, "bureau concurrency", b.Concurrency, 3)
				eq(t, "bureau limited", b.Limited(), true)
				e, _ := c.Target("erp")
				eq(t, "erp limited (no limit set)", e.Limited(), false)
				o, _ := c.Target("open")
				eq(t, "open limited (rate unlimited)", o.Limited(), false)
			},
		},
		{
			name: "concurrency auto with bounds",
			doc: minimal + `
accounts:
  "*": {concurrency_max: 40}
  learn: {concurrency: auto}
  bounded: {concurrency: AUTO, concurrency_min: 2, concurrency_max: 10}
  fixed: {concurrency: 4}
`,
			check: func(t *testing.T, c *config.Config) {
				l := c.Account("learn")
				eq(t, "learn auto", l.Concurrency.Auto(), true)
				eq(t, "learn concurrency_min (built in)", l.ConcurrencyMin, 1)
				eq(t, "learn concurrency_max (from *)", l.ConcurrencyMax, 40)
				eq(t, "learn max concurrency", l.MaxConcurrency(), 40)
				b := c.Account("bounded")
				eq(t, "bounded bounds", [2]int{b.ConcurrencyMin, b.ConcurrencyMax}, [2]int{2, 10})
				eq(t, "bounded max concurrency", b.MaxConcurrency(), 10)
				f := c.Account("fixed")
				eq(t, "fixed auto", f.Concurrency.Auto(), false)
				eq(t, "fixed max concurrency", f.MaxConcurrency(), 4)
				eq(t, "other max concurrency (built-in 8)", c.Account("other").MaxConcurrency(), 8)
				again, err := config.Parse([]byte(c.Redacted()), func(string) (string, bool) { return "", false })
				if err != nil {
					t.Fatalf("want Redacted to parse again, got %v", err)
				}
				eq(t, "bounded max concurrency (parsed again)", again.Account("bounded").MaxConcurrency(), 10)
				eq(t, "fixed auto (parsed again)", again.Account("fixed").Concurrency.Auto(), false)
			},
		},
		{name: "concurrency auto from the environment", doc: minimal, env: map[string]string{"TENAZ_ACCOUNTS_DEFAULT_CONCURRENCY": "auto", "TENAZ_ACCOUNTS_DEFAULT_CONCURRENCY_MAX": "12"},
			check: func(t *testing.T, c *config.Config) {
				a := c.Account("acme")
				eq(t, "acme auto", a.Concurrency.Auto(), true)
				eq(t, "acme max concurrency", a.MaxConcurrency(), 12)
			}},
		{name: "sync interval", doc: minimal + "nats: {embedded: {sync: 1s}}"},
		{name: "three replicas", doc: minimal + "streams: {replicas: 3, tags: [ssd, eu], cluster: c1, retention: 720h}"},
		{name: "five replicas", doc: minimal + "streams: {replicas: 5}"},
		{name: "external nats with tls", doc: minimal + "nats: {url: 'nats://a:4222,nats://b:4222', tls: {ca: ca.pem, cert: c.pem, key: k.pem}}"},
		{name: "console log", doc: minimal + "log: {format: console, level: debug}"},
		{name: "demo", doc: minimal + "demo: {provider: '127.0.0.1:9000', failure_rate: 1}"},
		{name: "replay field", doc: "targets: {erp: {url: 'http://x/?tag={{.Replay}}', callback: {replay_field: tenaz_replay}}}"},
		{name: "tolerance of an hour", doc: "targets: {erp: {url: 'http://x/', callback: {tolerance: 1h}}}"},
		{name: "timeout at the drain's limit", doc: "targets: {erp: {url: 'http://x/', timeout: 15s}}"},
		{name: "long timeout with a raised drain", doc: "stop_timeout: 2m\ntargets: {erp: {url: 'http://x/', timeout: 115s}}"},
		{
			name: "callback with fallback on timeout",
			doc: `
targets:
  a: {url: "https://a.example.com/x", callback_secret: "` + testSecret + `"}
  b: {url: "https://b.example.com/x", poll: {url: "https://b.example.com/x/{{.Reference | urlquery}}", done_when: {field: status, in: [done]}}}
kinds:
  credit.evaluate: {target: a, completion: callback, on_callback_timeout: fallback, fallback: {target: b, completion: poll}}
`,
		},
		{
			name: "url template with if and functions",
			doc: `
targets:
  erp: {url: "https://erp.example.com/{{if .EntityID}}{{.EntityID | urlquery}}{{else}}{{.ID}}{{end}}?kind={{printf \"%s\" .Kind}}"}
kinds:
  order.create: {target: erp}
`,
		},
		{name: "inline JSON schema", doc: erpTarget + `
kinds:
  order.create: {target: erp, schema: '{"type": "object", "required": ["order_id"]}'}
`},
		{name: "schema written as YAML", doc: erpTarget + `
kinds:
  order.create:
    target: erp
    schema:
      type: object
      required: [order_id]
      properties: {order_id: {type: string}}
`},
		{name: "schema file", doc: erpTarget + "kinds: {order.create: {target: erp, schema: " + schemaFile + "}}"},
		{name: "classify every class", doc: orderKind + "targets: {erp: {url: 'http://x/', classify: {'100': success, '409': success, '599': permanent, '429': transient}}}"},
		{name: "methods and headers", doc: orderKind + "targets: {erp: {url: 'http://x/', method: PUT, headers: {X-Api-Key: k, Authorization: 'Bearer ${TOKEN}'}}}", env: map[string]string{"TOKEN": "t"}},
		{name: "account target override", doc: minimal + "accounts: {acme: {targets: {erp: {url: 'https://acme.example.com/{{.Kind}}', headers: {X-Key: k}}}}}"},
		{name: "numbers from the environment", doc: minimal + "streams: {replicas: '${R}'}\naccounts:\n  '*':\n    concurrency: ${C}\n", env: map[string]string{"R": "3", "C": "16"},
			check: func(t *testing.T, c *config.Config) {
				eq(t, "streams.replicas", c.Streams.Replicas, 3)
				eq(t, "accounts.*.concurrency", c.Account("*").Concurrency, 16)
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := mustParse(t, tc.doc, tc.env)
			if tc.check != nil {
				tc.check(t, cfg)
			}
		})
	}
}

func TestInvalidConfigs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		doc  string
		env  map[string]string
		want []string // fragments of the message, starting with the key path
	}{
		// decoding
		{name: "unknown top-level key", doc: minimal + "nope: 1", want: []string{"nope: unknown key"}},
		{name: "unknown nested key", doc: minimal + "nats: {urll: x}", want: []string{`nats.urll: unknown key (did you mean "url"?)`}},
		{name: "unknown key in a kind", doc: "targets: {erp: {url: 'http://x/'}}\nkinds: {order.create: {target: erp, retries: 3}}", want: []string{"kinds.order.create.retries: unknown key"}},
		{name: "unknown key in a fallback", doc: "targets: {erp: {url: 'http://x/'}}\nkinds: {order.create: {target: erp, fallback: {target: erp, entity: x}}}", want: []string{"kinds.order.create.fallback.entity: unknown key"}},
		{name: "unknown key in a target", doc: "targets: {erp: {url: 'http://x/', timout: 1s}}", want: []string{`targets.erp.timout: unknown key (did you mean "timeout"?)`}},
		{name: "duplicate key", doc: minimal + "prefix: a\nprefix: b", want: []string{"prefix: duplicate key"}},
		{name: "wrong scalar type", doc: minimal + "streams: {replicas: abc}", want: []string{`streams.replicas: expected an integer, got "abc"`}},
		{name: "mapping for a scalar", doc: minimal + "http: {addr: {a: 1}}", want: []string{"http.addr: expected a string, got a mapping"}},
		{name: "scalar for a mapping", doc: minimal + "nats: localhost", want: []string{"nats: expected a mapping"}},
		{name: "list for a map", doc: minimal + "accounts: [a, b]", want: []string{"accounts: expected a mapping, got a list"}},
		{name: "bad duration", doc: "targets: {erp: {url: 'http://x/', timeout: 10 parsecs}}", want: []string{`targets.erp.timeout: invalid duration "10 parsecs"`}},
		{name: "bad rate unit", doc: minimal + "accounts: {acme: {rate: 5/d}}", want: []string{`accounts.acme.rate: invalid rate "5/d"`}},
		{name: "negative rate", doc: minimal + "accounts: {acme: {rate: -5/s}}", want: []string{"accounts.acme.rate: invalid rate"}},
		{name: "negative target rate", doc: "targets: {erp: {url: 'http://x/', rate: -5/s}}", want: []string{"targets.erp.rate: invalid rate"}},
		{name: "bad target rate unit", doc: "targets: {erp: {url: 'http://x/', rate: 5/d}}", want: []string{`targets.erp.rate: invalid rate "5/d"`}},
		{name: "negative target concurrency", doc: "targets: {erp: {url: 'http://x/', concurrency: -1}}", want: []string{`targets.erp.concurrency: expected a positive integer or "auto", got "-1"`}},
		{name: "target concurrency bounds without auto", doc: "targets: {erp: {url: 'http://x/', concurrency: 3, concurrency_max: 10}}", want: []string{"targets.erp.concurrency_max: applies only with concurrency: auto; the target's concurrency is 3"}},
		{name: "target concurrency bounds crossed", doc: "targets: {erp: {url: 'http://x/', concurrency: auto, concurrency_min: 20, concurrency_max: 10}}", want: []string{"targets.erp.concurrency_min: concurrency_min (20) must not exceed concurrency_max (10)"}},
		{name: "target concurrency bound crossing the default", doc: "targets: {erp: {url: 'http://x/', concurrency: auto, concurrency_min: 100}}", want: []string{"targets.erp.concurrency_min: concurrency_min (100) must not exceed concurrency_max (64)"}},
		{name: "negative target concurrency bound", doc: "targets: {erp: {url: 'http://x/', concurrency: auto, concurrency_max: -2}}", want: []string{"targets.erp.concurrency_max: must be at least 1, got -2"}},
		{name: "concurrency neither a number nor auto", doc: minimal + "accounts: {acme: {concurrency: lots}}", want: []string{`accounts.acme.concurrency: expected a positive integer or "auto", got "lots"`}},
		{name: "concurrency bounds without auto", doc: minimal + "accounts: {acme: {concurrency: 4, concurrency_max: 10}}", want: []string{"accounts.acme.concurrency_max: applies only with concurrency: auto; the account's concurrency is 4"}},
		{name: "concurrency bounds crossed", doc: minimal + "accounts: {acme: {concurrency: auto, concurrency_min: 20, concurrency_max: 10}}", want: []string{"accounts.acme.concurrency_max: concurrency_min (20) must not exceed concurrency_max (10)"}},
		{name: "concurrency bound crossing the inherited one", doc: minimal + "accounts: {acme: {concurrency: auto, concurrency_min: 100}}", want: []string{"accounts.acme.concurrency_min: concurrency_min (100) must not exceed concurrency_max (64)"}},
		{name: "negative concurrency bound", doc: minimal + "accounts: {acme: {concurrency: auto, concurrency_min: -2}}", want: []string{"accounts.acme.concurrency_min: must be at least 1, got -2"}},
		{name: "concurrency above the ceiling", doc: minimal + "accounts: {acme: {concurrency: 10001}}", want: []string{`accounts.acme.concurrency: must be at most 10000 calls at once, got "10001"`}},
		{name: "huge concurrency", doc: minimal + "accounts: {acme: {concurrency: 1000000000000}}", want: []string{`accounts.acme.concurrency: must be at most 10000 calls at once`}},
		{name: "concurrency bound above the ceiling", doc: minimal + "accounts: {acme: {concurrency: auto, concurrency_max: 20000}}", want: []string{"accounts.acme.concurrency_max: must be at most 10000, got 20000"}},
		{name: "target concurrency above the ceiling", doc: "targets: {erp: {url: 'http://x/', concurrency: 10001}}", want: []string{`targets.erp.concurrency: must be at most 10000 calls at once`}},
		{name: "rate too fast to pace", doc: minimal + "accounts: {acme: {rate: 2000000000/s}}", want: []string{`accounts.acme.rate: invalid rate "2000000000/s": must be at least one a day (0.0417/h) and at most 1000000/s`}},
		{name: "rate too slow to pace", doc: minimal + "accounts: {acme: {rate: 1e-10/s}}", want: []string{`accounts.acme.rate: invalid rate "1e-10/s"`}},
		{name: "key rate too fast", doc: minimal + "auth: {keys: {k1: {account: acme, scopes: [submit], hash: 'sha256:0000000000000000000000000000000000000000000000000000000000000000', rate: 2e9}}}", want: []string{`auth.keys.k1.rate: invalid rate "2e9"`}},
		{name: "poller concurrency above the ceiling", doc: minimal + "poller: {concurrency: 10001}", want: []string{"poller.concurrency: must be between 1 and 10000, got 10001"}},
		{name: "replay rate above the replay job's", doc: minimal + "deadletter: {replay_rate: 20000}", want: []string{"deadletter.replay_rate: must be a number of events per second in (0, 10000], got 20000"}},
		{name: "not a finite number", doc: erpTarget + "kinds: {order.create: {target: erp, backoff: {jitter: .nan}}}", want: []string{"kinds.order.create.backoff.jitter: expected a finite number"}},
		{name: "syntax error", doc: "targets: {erp: [", want: []string{"yaml:"}},
		{name: "two documents", doc: minimal + "---\nprefix: x\n", want: []string{"more than one YAML document"}},
		{name: "top level is a list", doc: "- a\n- b\n", want: []string{"the document must be a mapping"}},
		{name: "alias that contains itself", doc: minimal + "streams: {tags: &a [*a]}", want: []string{"streams.tags[0][0]: alias *a refers to a value that contains it"}},
		{name: "billion laughs", doc: "a: &a [x,x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]\n", want: []string{"the document has more than 100000 values once aliases are expanded"}},
		{name: "null key", doc: minimal + "accounts: {~: {}}", want: []string{"accounts.~: keys must be strings, got null"}},
		{name: "merge of a scalar", doc: minimal + "http: {<<: x}", want: []string{"http.<<: can only merge"}},
		// ${ENV}
		{name: "unset variable", doc: "targets: {erp: {url: 'http://x/', signing_secret: '${ERP_SIGNING_SECRET}'}}", want: []string{"targets.erp.signing_secret: ${ERP_SIGNING_SECRET} is not set"}},
		{name: "account's callback_secret set but empty", doc: "targets: {bureau: {url: 'http://x/', callback_secret: 'whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LTMyYg=='}}\naccounts: {acme: {targets: {bureau: {callback_secret: '${ACME_SECRET}'}}}}", env: map[string]string{"ACME_SECRET": ""}, want: []string{"accounts.acme.targets.bureau.callback_secret: ${ACME_SECRET} is set but empty"}},
		{name: "signing_secret set but empty", doc: "targets: {erp: {url: 'http://x/', signing_secret: '${ERP_SIGNING_SECRET}'}}", env: map[string]string{"ERP_SIGNING_SECRET": ""}, want: []string{"targets.erp.signing_secret: ${ERP_SIGNING_SECRET} is set but empty"}},
		{name: "unset variable in a map value", doc: "targets: {erp: {url: 'http://x/', headers: {X-Key: 'k-${KEY}'}}}", want: []string{"targets.erp.headers.X-Key: ${KEY} is not set"}},
		{name: "unterminated reference", doc: minimal + "prefix: '${A'", want: []string{`prefix: "${" without a closing "}"`}},
		{name: "bad variable name", doc: minimal + "prefix: '${1A}'", want: []string{"prefix: ${1A}: invalid variable name"}},
		{name: "substituted value of the wrong type", doc: minimal + "streams: {replicas: '${R}'}", env: map[string]string{"R": "many"}, want: []string{`streams.replicas: expected an integer, got "many"`}},
		// names
		{name: "bad account name", doc: minimal + "accounts: {'bad.name': {}}", want: []string{"accounts.bad.name: invalid name"}},
		{name: "bad kind name", doc: "targets: {erp: {url: 'http://x/'}}\nkinds: {'order..create': {target: erp}}", want: []string{"kinds.order..create: invalid name"}},
		{name: "bad target name", doc: "targets: {'my.erp': {url: 'http://x/'}}", want: []string{"targets.my.erp: a target name must be"}},
		{name: "bad prefix", doc: minimal + "prefix: a.b", want: []string{`prefix: must be one subject token`}},
		// routing
		{name: "unknown target", doc: "targets: {erp: {url: 'http://x/'}}\nkinds: {order.create: {target: nope}}", want: []string{`kinds.order.create.target: unknown target "nope"`}},
		{name: "missing target", doc: "kinds: {order.create: {attempts: 3}}", want: []string{"kinds.order.create.target: is required"}},
		{name: "unknown fallback target", doc: erpTarget + "kinds: {order.create: {target: erp, fallback: {target: nope}}}", want: []string{`kinds.order.create.fallback.target: unknown target "nope"`}},
		{name: "bad completion", doc: erpTarget + "kinds: {order.create: {target: erp, completion: async}}", want: []string{`kinds.order.create.completion: must be sync, callback or poll, got "async"`}},
		{name: "poll without poll url", doc: erpTarget + "kinds: {order.create: {target: erp, completion: poll}}", want: []string{"kinds.order.create.completion: poll requires targets.erp.poll.url"}},
		{name: "callback without secret", doc: erpTarget + "kinds: {order.create: {target: erp, completion: callback}}", want: []string{"kinds.order.create.completion: callback requires targets.erp.callback_secret"}},
		{name: "fallback completion checked too", doc: erpTarget + "kinds: {order.create: {target: erp, fallback: {target: erp, completion: poll}}}", want: []string{"kinds.order.create.fallback.completion: poll requires targets.erp.poll.url"}},
		{name: "bad on_callback_timeout", doc: erpTarget + "kinds: {order.create: {target: erp, on_callback_timeout: retry}}", want: []string{`kinds.order.create.on_callback_timeout: must be manual_review or fallback, got "retry"`}},
		{name: "fallback on timeout without fallback", doc: erpTarget + "kinds: {order.create: {target: erp, on_callback_timeout: fallback}}", want: []string{"kinds.order.create.on_callback_timeout: fallback requires kinds.order.create.fallback"}},
		{name: "too many attempts", doc: erpTarget + "kinds: {order.create: {target: erp, attempts: 101}}", want: []string{"kinds.order.create.attempts: must be between 1 and 100, got 101"}},
		{name: "negative attempts", doc: erpTarget + "kinds: {order.create: {target: erp, attempts: -1}}", want: []string{"kinds.order.create.attempts: must be between 1 and 100, got -1"}},
		{name: "multiplier below 1", doc: erpTarget + "kinds: {order.create: {target: erp, backoff: {multiplier: 0.5}}}", want: []string{"kinds.order.create.backoff.multiplier: must be at least 1"}},
		{name: "jitter of 1", doc: erpTarget + "kinds: {order.create: {target: erp, backoff: {jitter: 1}}}", want: []string{"kinds.order.create.backoff.jitter: must be at least 0 and less than 1"}},
		{name: "negative jitter", doc: erpTarget + "kinds: {order.create: {target: erp, backoff: {jitter: -0.1}}}", want: []string{"kinds.order.create.backoff.jitter:"}},
		{name: "initial above max", doc: erpTarget + "kinds: {order.create: {target: erp, backoff: {initial: 2h, max: 1h}}}", want: []string{"kinds.order.create.backoff.initial: 2h is more than backoff.max 1h"}},
		{name: "negative max_retry_after", doc: erpTarget + "kinds: {order.create: {target: erp, backoff: {max_retry_after: -1s}}}", want: []string{"kinds.order.create.backoff.max_retry_after: must be a positive duration"}},
		{name: "negative callback_sla", doc: erpTarget + "kinds: {order.create: {target: erp, callback_sla: -5m}}", want: []string{"kinds.order.create.callback_sla: must be a positive duration"}},
		{name: "callback_sla past ten years", doc: erpTarget + "kinds: {order.create: {target: erp, callback_sla: 1500000h}}", want: []string{"kinds.order.create.callback_sla: must be at most 87600h (ten years)"}},
		{name: "retention past ten years", doc: "streams: {retention: 1500000h}\n" + erpTarget, want: []string{"streams.retention: must be at most 87600h (ten years)"}},
		{name: "negative poll_sla", doc: erpTarget + "kinds: {order.create: {target: erp, fallback: {target: erp, poll_sla: -5m}}}", want: []string{"kinds.order.create.fallback.poll_sla: must be a positive duration"}},
		// targets
		{name: "missing url", doc: "targets: {erp: {method: POST}}", want: []string{"targets.erp.url: required"}},
		{name: "url template does not parse", doc: "targets: {erp: {url: 'http://x/{{.Kind'}}", want: []string{"targets.erp.url: url:1: unclosed action"}},
		{name: "url template unknown field", doc: "targets: {erp: {url: 'http://x/{{.Nope}}'}}", want: []string{"targets.erp.url:", "names the field .Nope, which a URL template does not have"}},
		{name: "url template with range", doc: "targets: {erp: {url: 'http://x/{{range 3}}a{{end}}'}}", want: []string{"targets.erp.url: range is not allowed"}},
		{name: "url template with define", doc: `targets: {erp: {url: 'http://x/{{define "a"}}b{{end}}'}}`, want: []string{"targets.erp.url: define and block are not allowed"}},
		{name: "url template with a huge printf width", doc: `targets: {erp: {url: 'http://x/{{printf "%0999999999d" 1}}'}}`, want: []string{"targets.erp.url: printf widths and precisions above 999 are not allowed"}},
		{name: "url template expanding too far", doc: `targets: {erp: {url: 'http://x/{{printf "%999d%999d%999d%999d%999d%999d%999d%999d%999d" 1 2 3 4 5 6 7 8 9}}'}}`, want: []string{"targets.erp.url: expands to more than 8192 bytes"}},
		{name: "url not http", doc: "targets: {erp: {url: 'ftp://x/{{.Kind}}'}}", want: []string{`targets.erp.url: must be an http:// or https:// URL, got scheme "ftp"`}},
		{name: "url without host", doc: "targets: {erp: {url: 'http:///{{.Kind}}'}}", want: []string{"targets.erp.url: has no host"}},
		{name: "bad poll url", doc: "targets: {erp: {url: 'http://x/', poll: {url: '/jobs/{{.Reference}}', done_when: {field: s, in: [d]}}}}", want: []string{"targets.erp.poll.url: must be an http:// or https:// URL"}},
		{name: "poll without done_when", doc: "targets: {erp: {url: 'http://x/', poll: {url: 'http://x/{{.Reference}}'}}}", want: []string{"targets.erp.poll.done_when.field: is required", "targets.erp.poll.done_when.in: must list at least one value"}},
		{name: "negative poll interval", doc: "targets: {erp: {url: 'http://x/', poll: {url: 'http://x/', interval: -1s, done_when: {field: s, in: [d]}}}}", want: []string{"targets.erp.poll.interval: must be a positive duration"}},
		{name: "bad method", doc: "targets: {erp: {url: 'http://x/', method: 'PO ST'}}", want: []string{`targets.erp.method: must be an HTTP method such as POST, got "PO ST"`}},
		{name: "negative timeout", doc: "targets: {erp: {url: 'http://x/', timeout: -1s}}", want: []string{"targets.erp.timeout: must be a positive duration, got -1s"}},
		{name: "classify key not a status", doc: "targets: {erp: {url: 'http://x/', classify: {4xx: permanent}}}", want: []string{"targets.erp.classify.4xx: must be a 3-digit HTTP status"}},
		{name: "classify status out of range", doc: "targets: {erp: {url: 'http://x/', classify: {'600': permanent, '099': success}}}", want: []string{"targets.erp.classify.600: must be a 3-digit", "targets.erp.classify.099: must be a 3-digit"}},
		{name: "classify bad class", doc: "targets: {erp: {url: 'http://x/', classify: {'409': maybe}}}", want: []string{`targets.erp.classify.409: must be success, transient or permanent, got "maybe"`}},
		{name: "bad header name", doc: "targets: {erp: {url: 'http://x/', headers: {'Bad Header': v}}}", want: []string{"targets.erp.headers.Bad Header: is not a valid header name"}},
		{name: "header value with newline", doc: "targets: {erp: {url: 'http://x/', headers: {X-A: \"a\\nb\"}}}", want: []string{"targets.erp.headers.X-A: value must not contain CR, LF or NUL"}},
		// accounts
		{name: "account override of an unknown target", doc: minimal + "accounts: {acme: {targets: {nope: {url: 'http://y/'}}}}", want: []string{`accounts.acme.targets.nope: unknown target "nope"`}},
		{name: "account override with a bad url", doc: minimal + "accounts: {acme: {targets: {erp: {url: 'y/'}}}}", want: []string{"accounts.acme.targets.erp.url: must be an http:// or https:// URL"}},
		{name: "account callback secret on a target that receives no callbacks", doc: minimal + "accounts: {acme: {targets: {erp: {callback_secret: 'whsec_YWNtZS1vd24tY2FsbGJhY2stc2VjcmV0LWtleS0zMg=='}}}}", want: []string{"accounts.acme.targets.erp.callback_secret: needs targets.erp.callback_secret"}},
		{name: "callback secret on every account", doc: "targets: {erp: {url: 'http://x/', callback_secret: 'whsec_YWNtZS1vd24tY2FsbGJhY2stc2VjcmV0LWtleS0zMg=='}}\naccounts: {'*': {targets: {erp: {callback_secret: 'whsec_YWNtZS1vd24tY2FsbGJhY2stc2VjcmV0LWtleS0zMg=='}}}}", want: []string{"accounts.*.targets.erp.callback_secret: is per account; every account's is targets.erp.callback_secret"}},
		{name: "account callback secret that is the target's", doc: "targets: {erp: {url: 'http://x/', callback_secret: 'whsec_YWNtZS1vd24tY2FsbGJhY2stc2VjcmV0LWtleS0zMg=='}}\naccounts: {acme: {targets: {erp: {callback_secret: 'whsec_YWNtZS1vd24tY2FsbGJhY2stc2VjcmV0LWtleS0zMg=='}}}}", want: []string{"accounts.acme.targets.erp.callback_secret: is targets.erp.callback_secret"}},
		{name: "account callback secret that is the target's, written otherwise", doc: "targets: {erp: {url: 'http://x/', callback_secret: 'whsec_YWNtZS1vd24tY2FsbGJhY2stc2VjcmV0LWtleS0zMg=='}}\naccounts: {acme: {targets: {erp: {callback_secret: \"whsec_YWNtZS1vd24tY2FsbGJh\\r\\nY2stc2VjcmV0LWtleS0zMg==\"}}}}", want: []string{"accounts.acme.targets.erp.callback_secret: is targets.erp.callback_secret"}},
		{name: "account callback secret too short", doc: "targets: {erp: {url: 'http://x/', callback_secret: 'whsec_YWNtZS1vd24tY2FsbGJhY2stc2VjcmV0LWtleS0zMg=='}}\naccounts: {acme: {targets: {erp: {callback_secret: 'whsec_c2hvcnQ='}}}}", want: []string{"accounts.acme.targets.erp.callback_secret: decodes to a 5-byte key"}},
		{name: "negative concurrency", doc: minimal + "accounts: {acme: {concurrency: -1}}", want: []string{`accounts.acme.concurrency: expected a positive integer or "auto", got "-1"`}},
		{name: "negative breaker failures", doc: minimal + "accounts: {'*': {breaker: {failures: -2}}}", want: []string{"accounts.*.breaker.failures: must be at least 1, got -2"}},
		{name: "negative cooldown", doc: minimal + "accounts: {acme: {breaker: {cooldown: -1m}}}", want: []string{"accounts.acme.breaker.cooldown: must not be negative"}},
		// the rest
		{name: "bad sync", doc: minimal + "nats: {embedded: {sync: sometimes}}", want: []string{`nats.embedded.sync: must be "always" or a positive duration such as "1s", got "sometimes"`}},
		{name: "negative sync", doc: minimal + "nats: {embedded: {sync: -1s}}", want: []string{"nats.embedded.sync: must be"}},
		{name: "bad embedded listen", doc: minimal + "nats: {embedded: {listen: localhost}}", want: []string{"nats.embedded.listen: must be host:port"}},
		{name: "tls cert without key", doc: minimal + "nats: {tls: {cert: c.pem}}", want: []string{"nats.tls.key: is required when nats.tls.cert is set"}},
		{name: "empty nats url entry", doc: minimal + "nats: {url: 'nats://a:4222,,nats://b:4222'}", want: []string{"nats.url: has an empty entry"}},
		{name: "two replicas", doc: minimal + "streams: {replicas: 2}", want: []string{"streams.replicas: must be 1, 3 or 5, got 2"}},
		{name: "negative retention", doc: minimal + "streams: {retention: -1h}", want: []string{"streams.retention: must be a positive duration"}},
		{name: "empty tag", doc: minimal + "streams: {tags: [a, '']}", want: []string{"streams.tags[1]: must not be empty"}},
		{name: "negative max body", doc: minimal + "http: {max_body_bytes: -1}", want: []string{"http.max_body_bytes: must be positive, got -1"}},
		{name: "max body past any server", doc: minimal + "http: {max_body_bytes: 99999999999}", want: []string{"http.max_body_bytes: must be at most 67108864, the largest max_payload a NATS server takes"}},
		{name: "bad http addr", doc: minimal + "http: {addr: '8080'}", want: []string{"http.addr: must be host:port"}},
		{name: "negative read timeout", doc: minimal + "http: {read_timeout: -1s}", want: []string{"http.read_timeout: must be a positive duration"}},
		{name: "header timeout over read timeout", doc: minimal + "http: {read_header_timeout: 10s, read_timeout: 5s}", want: []string{"http.read_header_timeout: must not exceed http.read_timeout"}},
		{name: "public url without a scheme", doc: minimal + "http: {public_url: tenaz.internal.example:8080}", want: []string{"http.public_url: must be an http or https URL"}},
		{name: "public url with a query", doc: minimal + `http: {public_url: "https://tenaz.example.com/?token=s3cret"}`, want: []string{"http.public_url: must be an http or https URL"}},
		{name: "public url with a user", doc: minimal + `http: {public_url: "https://ops:pw@tenaz.example.com"}`, want: []string{"http.public_url: must be an http or https URL"}},
		{name: "bad log format", doc: minimal + "log: {format: text}", want: []string{`log.format: must be "json" or "console", got "text"`}},
		{name: "bad log level", doc: minimal + "log: {level: verbose}", want: []string{`log.level: must be one of`}},
		{name: "failure rate above 1", doc: minimal + "demo: {failure_rate: 1.5}", want: []string{"demo.failure_rate: must be between 0 and 1, got 1.5"}},
		{name: "bad demo provider", doc: minimal + "demo: {provider: nowhere}", want: []string{"demo.provider: must be host:port"}},
		// replay window and drain
		{name: "replay field that is the event field", doc: "targets: {erp: {url: 'http://x/', callback: {replay_field: event_id}}}", want: []string{`targets.erp.callback.replay_field: must differ from event_field and reference_field, got "event_id"`}},
		{name: "tolerance above an hour", doc: "targets: {erp: {url: 'http://x/', callback: {tolerance: 61m}}}", want: []string{"targets.erp.callback.tolerance: must be at most 1h (Standard Webhooks recommends 5m), got 1h1m"}},
		{name: "timeout longer than the drain", doc: "targets: {erp: {url: 'http://x/', timeout: 16s}}", want: []string{"targets.erp.timeout: 16s does not fit in the drain on stop: at most stop_timeout (20s) minus 5s, so 15s"}},
		{name: "timeout of a poll target longer than the drain", doc: "targets: {b: {url: 'http://x/', timeout: 1m, poll: {url: 'http://x/{{.Reference}}', done_when: {field: s, in: [d]}}}}", want: []string{"targets.b.timeout: 1m does not fit in the drain on stop"}},
		{name: "handler timeout longer than the drain", doc: "kinds: {reward.credit: {handler: reward, timeout: 16s}}", want: []string{"kinds.reward.credit.timeout: 16s does not fit in the drain on stop"}},
		{name: "handler timeout not positive", doc: "kinds: {reward.credit: {handler: reward, fallback: {handler: reward, timeout: -1s}}}", want: []string{"kinds.reward.credit.fallback.timeout: must be a positive duration"}},
		{name: "timeout on a target stage", doc: erpTarget + "kinds: {order.create: {target: erp, timeout: 5s}}", want: []string{"kinds.order.create.timeout: bounds a handler's calls; a target's calls take targets.erp.timeout"}},
		{name: "timeout longer than a raised drain", doc: "stop_timeout: 1m\ntargets: {erp: {url: 'http://x/', timeout: 56s}}", want: []string{"targets.erp.timeout: 56s does not fit in the drain on stop: at most stop_timeout (1m) minus 5s, so 55s"}},
		{name: "default timeout longer than a lowered drain", doc: "stop_timeout: 3s\ntargets: {erp: {url: 'http://x/'}}", want: []string{"targets.erp.timeout: 10s does not fit in the drain on stop: at most stop_timeout (3s) minus 5s, so 0s"}},
		{name: "timeout over a drain lowered by the environment", doc: minimal, env: map[string]string{"TENAZ_STOP_TIMEOUT": "12s"}, want: []string{"targets.erp.timeout: 10s does not fit in the drain on stop: at most stop_timeout (12s) minus 5s, so 7s"}},
		{name: "negative stop_timeout", doc: minimal + "stop_timeout: -1s", want: []string{"stop_timeout: must be a positive duration, got -1s"}},
		// schemas
		{name: "schema not JSON", doc: erpTarget + "kinds: {order.create: {target: erp, schema: '{not json'}}", want: []string{"kinds.order.create.schema: inline schema is not valid JSON"}},
		{name: "schema not a schema", doc: erpTarget + `kinds: {order.create: {target: erp, schema: '{"type": 5}'}}`, want: []string{"kinds.order.create.schema: invalid JSON Schema"}},
		{name: "schema file missing", doc: erpTarget + "kinds: {order.create: {target: erp, schema: /nonexistent/order.json}}", want: []string{"kinds.order.create.schema: schema file:"}},
		{name: "schema file is a directory", doc: erpTarget + "kinds: {order.create: {target: erp, schema: /}}", want: []string{"kinds.order.create.schema: schema file / is not a regular file"}},
		{name: "schema ref to a device", doc: erpTarget + `kinds: {order.create: {target: erp, schema: '{"$ref": "file:///dev/zero"}'}}`, want: []string{"kinds.order.create.schema: invalid JSON Schema", "not a regular file"}},
		{name: "schema with a remote ref", doc: erpTarget + `kinds: {order.create: {target: erp, schema: '{"$ref": "https://example.com/s.json"}'}}`, want: []string{"kinds.order.create.schema: invalid JSON Schema"}},
		// outbox
		{name: "outbox table with a quote", doc: minimal + `outbox: {table: 'x"; drop table y'}`, want: []string{"outbox.table: must be a table name"}},
		{name: "outbox table upper case", doc: minimal + "outbox: {table: Outbox}", want: []string{`outbox.table: must be a table name, optionally schema-qualified, each of 1-48 characters of [a-z0-9_] not starting with a digit, got "Outbox"`}},
		{name: "outbox table three parts", doc: minimal + "outbox: {table: a.b.c}", want: []string{"outbox.table: must be a table name"}},
		{name: "outbox batch too big", doc: minimal + "outbox: {batch: 10001}", want: []string{"outbox.batch: must be between 1 and 10000, got 10001"}},
		{name: "outbox negative poll", doc: minimal + "outbox: {poll_interval: -1s}", want: []string{"outbox.poll_interval: must be a positive duration"}},
		{name: "outbox bad poll override", doc: minimal, env: map[string]string{"TENAZ_OUTBOX_POLL_INTERVAL": "often"}, want: []string{`outbox.poll_interval: from TENAZ_OUTBOX_POLL_INTERVAL: invalid duration "often"`}},
		// environment overrides
		{name: "bad override value", doc: minimal, env: map[string]string{"TENAZ_STREAMS_REPLICAS": "many"}, want: []string{`streams.replicas: from TENAZ_STREAMS_REPLICAS: expected an integer, got "many"`}},
		{name: "override fails validation", doc: minimal, env: map[string]string{"TENAZ_KINDS_ORDER_CREATE_TARGET": "nope"}, want: []string{`kinds.order.create.target: unknown target "nope"`}},
		{name: "bad override duration", doc: minimal, env: map[string]string{"TENAZ_TARGETS_ERP_TIMEOUT": "soon"}, want: []string{`targets.erp.timeout: from TENAZ_TARGETS_ERP_TIMEOUT: invalid duration "soon"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := config.Parse([]byte(tc.doc), envOf(tc.env))
			if cfg != nil {
				t.Errorf("expected a nil *Config with the error, got one")
			}
			wantErr(t, err, tc.want...)
		})
	}
}

// A signing_secret or callback_secret is "whsec_" and the standard base64
// of a key of at least 24 bytes (Standard Webhooks); anything else fails
// the start naming the key, and the message never shows the value.
func TestWebhookSecrets(t *testing.T) {
	t.Parallel()
	key := func(n int) string { return base64.StdEncoding.EncodeToString([]byte(strings.Repeat("k", n))) }
	tests := []struct {
		name, secret, want string // want "" for a valid secret
	}{
		{"empty key", "whsec_", "decodes to a 0-byte key; at least 24 bytes are required"},
		{"23 bytes", "whsec_" + key(23), "decodes to a 23-byte key; at least 24"},
		{"raw secret", strings.Repeat("r", 40), `must be "whsec_" followed by the standard base64 of the key`},
		{"not base64", "whsec_" + strings.Repeat("*", 40), `is not valid standard base64 after "whsec_"`},
		{"url-safe alphabet", "whsec_" + base64.URLEncoding.EncodeToString(bytes.Repeat([]byte{0xfb, 0xff, 0xbf}, 10)), "is not valid standard base64"},
		{"unpadded", "whsec_" + base64.RawStdEncoding.EncodeToString([]byte(strings.Repeat("k", 25))), "is not valid standard base64"},
		{"24 bytes", "whsec_" + key(24), ""},
		{"64 bytes", "whsec_" + key(64), ""},
	}
	for _, tc := range tests {
		for _, field := range []string{"signing_secret", "callback_secret"} {
			t.Run(tc.name+"/"+field, func(t *testing.T) {
				t.Parallel()
				doc := fmt.Sprintf("targets: {erp: {url: 'http://x/', %s: %q}}\n", field, tc.secret)
				_, err := config.Parse([]byte(doc), envOf(nil))
				if tc.want == "" {
					if err != nil {
						t.Fatalf("expected a valid secret, got %v", err)
					}
					return
				}
				wantErr(t, err, "targets.erp."+field+": "+tc.want)
				if v := strings.TrimPrefix(tc.secret, "whsec_"); v != "" && strings.Contains(err.Error(), v) {
					t.Errorf("expected the error not to show the secret, got %v", err)
				}
			})
		}
	}
}

func TestAllProblemsReportedAtOnce(t *testing.T) {
	t.Parallel()
	_, err := config.Parse([]byte(`
targets: {erp: {url: "http://x/", method: "A B"}}
kinds:
  a: {target: nope}
  b: {target: erp, attempts: 0, completion: later}
streams: {replicas: 4}
`), nil)
	wantErr(t, err,
		`kinds.a.target: unknown target "nope"`,
		"kinds.b.completion: must be sync, callback or poll",
		"streams.replicas: must be 1, 3 or 5",
		"targets.erp.method: must be an HTTP method",
	)
	// Sorted by key, one per line.
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 4 {
		t.Fatalf("expected 4 lines, got %d:\n%v", len(lines), err)
	}
	if !strings.HasPrefix(lines[0], "kinds.a.target") || !strings.HasPrefix(lines[3], "targets.erp.method") {
		t.Errorf("expected errors sorted by key, got:\n%v", err)
	}
	// Decoding problems are reported together too.
	_, err = config.Parse([]byte("nats: {urll: x}\nhttp: {max_body_bytes: big}\ntargets: {erp: {url: '${NOPE}'}}"), nil)
	wantErr(t, err, "nats.urll: unknown key", "http.max_body_bytes: expected an integer", "targets.erp.url: ${NOPE} is not set")
}

func TestKeyError(t *testing.T) {
	t.Parallel()
	_, err := config.Parse([]byte("nats: {urll: x}"), nil)
	var ke *config.KeyError
	if !errors.As(err, &ke) {
		t.Fatalf("expected a *KeyError in %v", err)
	}
	eq(t, "KeyError.Key", ke.Key, "nats.urll")
	eq(t, "KeyError.Line", ke.Line, 1)

	_, err = config.Parse([]byte("accounts: {'a b': {}}"), nil)
	if !errors.Is(err, config.ErrInvalidConfig) {
		t.Errorf("expected ErrInvalidConfig, got %v", err)
	}
}

func TestEnvSubstitution(t *testing.T) {
	t.Parallel()
	doc := `
prefix: "${PREFIX}"
nats: {url: "nats://${NATS_HOST}:4222", password: "${NATS_PASSWORD}"}
targets:
  erp:
    url: "https://erp.example.com/$${literal}/{{.Kind}}"
    headers: {Authorization: "Bearer ${TOKEN}", X-Empty: "${EMPTY}", X-Price: "$5 and $$"}
    signing_secret: ${SIGNING}
kinds:
  order.create: {target: erp, attempts: "${ATTEMPTS}"}
`
	env := map[string]string{
		"PREFIX": "acme", "NATS_HOST": "nats.internal", "NATS_PASSWORD": "p4ss",
		"TOKEN": "tok", "EMPTY": "", "SIGNING": testSecret, "ATTEMPTS": "4",
	}
	cfg := mustParse(t, doc, env)
	eq(t, "prefix", cfg.Prefix, "acme")
	eq(t, "nats.url", cfg.NATS.URL, "nats://nats.internal:4222")
	eq(t, "nats.password", cfg.NATS.Password.Reveal(), "p4ss")
	erp, _ := cfg.Target("erp")
	eq(t, "targets.erp.url ($${ escape)", erp.URL, "https://erp.example.com/${literal}/{{.Kind}}")
	eq(t, "targets.erp.headers.Authorization", erp.Headers["Authorization"].Reveal(), "Bearer tok")
	eq(t, "targets.erp.headers.X-Empty (set to empty)", erp.Headers["X-Empty"].Reveal(), "")
	eq(t, "targets.erp.headers.X-Price (lone $ kept)", erp.Headers["X-Price"].Reveal(), "$5 and $$")
	eq(t, "targets.erp.signing_secret", erp.SigningSecret.Reveal(), testSecret)
	k, _ := cfg.Kind("order.create")
	eq(t, "kinds.order.create.attempts", k.Attempts, 4)

}

func TestEnvValueIsNotExpandedAgain(t *testing.T) {
	t.Parallel()
	cfg := mustParse(t, orderKind+"targets: {erp: {url: 'http://x/', headers: {X-Key: '${S}'}}}", map[string]string{"S": "${NOT_EXPANDED}"})
	erp, _ := cfg.Target("erp")
	eq(t, "headers.X-Key", erp.Headers["X-Key"].Reveal(), "${NOT_EXPANDED}")
}

func TestUnsetVariableMessage(t *testing.T) {
	t.Parallel()
	_, err := config.Parse([]byte(`
targets:
  erp:
    url: "http://x/"
    signing_secret: "${ERP_SIGNING_SECRET}"
`), envOf(nil))
	wantErr(t, err)
	const want = "targets.erp.signing_secret: ${ERP_SIGNING_SECRET} is not set (line 5)"
	if err.Error() != want {
		t.Errorf("expected exactly %q, got %q", want, err.Error())
	}
}

func TestUnknownKeyNamesPath(t *testing.T) {
	t.Parallel()
	_, err := config.Parse([]byte(`
accounts:
  acme:
    targets:
      erp:
        header: {X-A: b}
`), nil)
	wantErr(t, err, `accounts.acme.targets.erp.header: unknown key (did you mean "headers"?) (line 6)`)
}

func TestEnvOverrides(t *testing.T) {
	t.Parallel()
	doc := `
nats: {url: "nats://file:4222"}
accounts:
  acme: {concurrency: 4}
targets:
  erp: {url: "https://erp.example.com/{{.Kind}}", headers: {X-App-Key: file}}
  bureau: {url: "https://bureau.example.com/x", callback_secret: "` + testSecret + `"}
kinds:
  order.create: {target: erp}
`
	tests := []struct {
		name  string
		env   map[string]string
		check func(t *testing.T, c *config.Config)
	}{
		{"TENAZ_NATS_URL", map[string]string{"TENAZ_NATS_URL": "nats://env:4222"}, func(t *testing.T, c *config.Config) {
			eq(t, "nats.url", c.NATS.URL, "nats://env:4222")
		}},
		{"NATS_URL when TENAZ_NATS_URL is unset", map[string]string{"NATS_URL": "nats://plain:4222"}, func(t *testing.T, c *config.Config) {
			eq(t, "nats.url", c.NATS.URL, "nats://plain:4222")
		}},
		{"TENAZ_NATS_URL wins over NATS_URL", map[string]string{"NATS_URL": "nats://plain:4222", "TENAZ_NATS_URL": "nats://tenaz:4222"}, func(t *testing.T, c *config.Config) {
			eq(t, "nats.url", c.NATS.URL, "nats://tenaz:4222")
		}},
		{"empty TENAZ_NATS_URL selects embedded", map[string]string{"TENAZ_NATS_URL": ""}, func(t *testing.T, c *config.Config) {
			eq(t, "nats.url", c.NATS.URL, "")
		}},
		{"LOG_FORMAT and LOG_LEVEL", map[string]string{"LOG_FORMAT": "console", "LOG_LEVEL": "debug"}, func(t *testing.T, c *config.Config) {
			eq(t, "log.format", c.Log.Format, "console")
			eq(t, "log.level", c.Log.Level, "debug")
		}},
		{"TENAZ_LOG_LEVEL wins over LOG_LEVEL", map[string]string{"LOG_LEVEL": "debug", "TENAZ_LOG_LEVEL": "warn"}, func(t *testing.T, c *config.Config) {
			eq(t, "log.level", c.Log.Level, "warn")
		}},
		{"top-level and nested scalars", map[string]string{
			"TENAZ_PREFIX": "acme", "TENAZ_HTTP_ADDR": ":9090", "TENAZ_NATS_EMBEDDED_SYNC": "2s",
			"TENAZ_STREAMS_REPLICAS": "3", "TENAZ_HTTP_MAX_BODY_BYTES": "2048", "TENAZ_STREAMS_RETENTION": "24h",
			"TENAZ_STREAMS_TAGS": "ssd, eu ,", "TENAZ_DEMO_FAILURE_RATE": "0.5", "TENAZ_HTTP_READ_HEADER_TIMEOUT": "2s",
		}, func(t *testing.T, c *config.Config) {
			eq(t, "http.read_header_timeout", c.HTTP.ReadHeaderTimeout.D(), 2*time.Second)
			eq(t, "prefix", c.Prefix, "acme")
			eq(t, "http.addr", c.HTTP.Addr, ":9090")
			eq(t, "nats.embedded.sync", c.NATS.Embedded.Sync, "2s")
			always, every := c.NATS.Embedded.SyncInterval()
			eq(t, "SyncInterval always", always, false)
			eq(t, "SyncInterval every", every, 2*time.Second)
			eq(t, "streams.replicas", c.Streams.Replicas, 3)
			eq(t, "http.max_body_bytes", c.HTTP.MaxBodyBytes, int64(2048))
			eq(t, "streams.retention", c.Streams.Retention.D(), 24*time.Hour)
			eq(t, "streams.tags", strings.Join(c.Streams.Tags, "|"), "ssd|eu")
			eq(t, "demo.failure_rate", c.Demo.FailureRate, 0.5)
		}},
		{"map entries", map[string]string{
			"TENAZ_TARGETS_ERP_URL": "https://erp2.example.com/{{.ID}}", "TENAZ_ACCOUNTS_ACME_CONCURRENCY": "2",
			"TENAZ_KINDS_ORDER_CREATE_ATTEMPTS": "9", "TENAZ_KINDS_ORDER_CREATE_BACKOFF_INITIAL": "1s",
			"TENAZ_TARGETS_ERP_HEADERS_X_APP_KEY": "${LITERAL}", "TENAZ_TARGETS_ERP_SIGNING_SECRET": erpSecret,
			"TENAZ_TARGETS_ERP_RATE": "20/s", "TENAZ_TARGETS_ERP_CONCURRENCY": "3",
		}, func(t *testing.T, c *config.Config) {
			erp, _ := c.Target("erp")
			eq(t, "targets.erp.rate", erp.Rate.PerSecond, 20.0)
			eq(t, "targets.erp.concurrency", erp.Concurrency, 3)
			eq(t, "targets.erp.url", erp.URL, "https://erp2.example.com/{{.ID}}")
			eq(t, "targets.erp.headers.X-App-Key (taken literally)", erp.Headers["X-App-Key"].Reveal(), "${LITERAL}")
			eq(t, "targets.erp.signing_secret", erp.SigningSecret.Reveal(), erpSecret)
			eq(t, "accounts.acme.concurrency", c.Account("acme").Concurrency, 2)
			k, _ := c.Kind("order.create")
			eq(t, "kinds.order.create.attempts", k.Attempts, 9)
			eq(t, "kinds.order.create.backoff.initial", k.Backoff.Initial.D(), time.Second)
		}},
		{"the * account is spelled DEFAULT", map[string]string{"TENAZ_ACCOUNTS_DEFAULT_RATE": "10/m", "TENAZ_ACCOUNTS_DEFAULT_CONCURRENCY": "32"}, func(t *testing.T, c *config.Config) {
			eq(t, "accounts.*.rate", c.Account("other").Rate.String(), "10/m")
			eq(t, "accounts.*.concurrency", c.Account("other").Concurrency, 32)
			eq(t, "accounts.acme.concurrency (own)", c.Account("acme").Concurrency, 4)
		}},
		{"a new entry cannot be created", map[string]string{"TENAZ_TARGETS_NEW_URL": "https://new/", "TENAZ_ACCOUNTS_ZED_CONCURRENCY": "1"}, func(t *testing.T, c *config.Config) {
			if _, ok := c.Target("new"); ok {
				t.Error("expected TENAZ_TARGETS_NEW_URL not to create target new")
			}
			if _, ok := c.Accounts["zed"]; ok {
				t.Error("expected TENAZ_ACCOUNTS_ZED_CONCURRENCY not to create account zed")
			}
		}},
		{"a fallback stage comes into being", map[string]string{"TENAZ_KINDS_ORDER_CREATE_FALLBACK_TARGET": "bureau", "TENAZ_KINDS_ORDER_CREATE_FALLBACK_COMPLETION": "callback"}, func(t *testing.T, c *config.Config) {
			k, _ := c.Kind("order.create")
			fb, ok := k.StageFor(true)
			if !ok {
				t.Fatal("expected a fallback stage from the environment")
			}
			eq(t, "fallback.target", fb.Target, "bureau")
			eq(t, "fallback.completion", fb.Completion, "callback")
			eq(t, "fallback.attempts (default)", fb.Attempts, 6)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.check(t, mustParse(t, doc, tc.env))
		})
	}
}

func TestEnvOverrideLongestKeyWins(t *testing.T) {
	t.Parallel()
	doc := `
targets:
  erp: {url: "https://erp.example.com/", poll: {url: "https://erp.example.com/p", done_when: {field: s, in: [d]}}}
  erp_poll: {url: "https://erp-poll.example.com/"}
`
	cfg := mustParse(t, doc, map[string]string{"TENAZ_TARGETS_ERP_POLL_URL": "https://chosen.example.com/"})
	erpPoll, _ := cfg.Target("erp_poll")
	erp, _ := cfg.Target("erp")
	eq(t, "targets.erp_poll.url", erpPoll.URL, "https://chosen.example.com/")
	eq(t, "targets.erp.poll.url (untouched)", erp.Poll.URL, "https://erp.example.com/p")
}

func TestEnvOverrideAmbiguous(t *testing.T) {
	t.Parallel()
	doc := erpTarget + `
kinds:
  order.create: {target: erp}
  order_create: {target: erp}
`
	// Unset: no problem.
	mustParse(t, doc, nil)
	_, err := config.Parse([]byte(doc), envOf(map[string]string{"TENAZ_KINDS_ORDER_CREATE_ATTEMPTS": "2"}))
	wantErr(t, err, "TENAZ_KINDS_ORDER_CREATE_ATTEMPTS is ambiguous", "kinds.order.create.attempts", "kinds.order_create.attempts")
}

func TestEnvName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		keys []string
		want string
	}{
		{[]string{"nats", "url"}, "TENAZ_NATS_URL"},
		{[]string{"targets", "erp", "url"}, "TENAZ_TARGETS_ERP_URL"},
		{[]string{"kinds", "order.create", "backoff", "max_retry_after"}, "TENAZ_KINDS_ORDER_CREATE_BACKOFF_MAX_RETRY_AFTER"},
		{[]string{"accounts", "*", "rate"}, "TENAZ_ACCOUNTS_DEFAULT_RATE"},
		{[]string{"targets", "erp", "headers", "X-App-Key"}, "TENAZ_TARGETS_ERP_HEADERS_X_APP_KEY"},
	} {
		eq(t, fmt.Sprintf("EnvName(%q)", tc.keys), config.EnvName(tc.keys...), tc.want)
	}
}

func TestDurationAndRate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want time.Duration
		err  bool
	}{
		{"30s", 30 * time.Second, false},
		{"2m", 2 * time.Minute, false},
		{"1h", time.Hour, false},
		{"1h30m", 90 * time.Minute, false},
		{"90", 90 * time.Second, false},
		{"", 0, false},
		{"-5", -5 * time.Second, false},
		{"1.5", 0, true},
		{"soon", 0, true},
		{"99999999999999999999", 0, true},
	} {
		d, err := config.ParseDuration(tc.in)
		if (err != nil) != tc.err {
			t.Errorf("ParseDuration(%q): expected error=%v, got %v", tc.in, tc.err, err)
			continue
		}
		eq(t, fmt.Sprintf("ParseDuration(%q)", tc.in), d.D(), tc.want)
	}
	for d, want := range map[time.Duration]string{30 * time.Second: "30s", 2 * time.Minute: "2m", time.Hour: "1h", 90 * time.Minute: "1h30m", 0: "0s", 1500 * time.Millisecond: "1.5s"} {
		eq(t, fmt.Sprintf("Duration(%v).String()", d), config.Duration(d).String(), want)
	}
	for _, tc := range []struct {
		in   string
		want float64
		err  bool
	}{
		{"50/s", 50, false},
		{"600/m", 10, false},
		{"36/h", 0.01, false},
		{"7", 7, false},
		{"0.5", 0.5, false},
		{"", 0, false},
		{"0", 0, false},
		{"unlimited", 0, false},
		{"5/d", 0, true},
		{"x/s", 0, true},
		{"-1/s", 0, true},
		{"NaN", 0, true},
		{"Inf/s", 0, true},
		{"1000000/s", 1e6, false},
		{"0.0417/h", 0.0417 / 3600, false},
		{"1000001/s", 0, true}, // 1/rate rounds to no interval at all
		{"2e9", 0, true},       // …and the pacer divides by it
		{"0.04/h", 0, true},    // less than one a day
		{"1e-10/s", 0, true},   // 1/rate overflows a duration
	} {
		r, err := config.ParseRate(tc.in)
		if (err != nil) != tc.err {
			t.Errorf("ParseRate(%q): expected error=%v, got %v", tc.in, tc.err, err)
			continue
		}
		eq(t, fmt.Sprintf("ParseRate(%q).PerSecond", tc.in), r.PerSecond, tc.want)
		if !tc.err {
			eq(t, fmt.Sprintf("ParseRate(%q).Text", tc.in), r.Text, tc.in)
		}
	}
}

func TestSecretNeverPrints(t *testing.T) {
	t.Parallel()
	s := config.Secret("hunter2")
	for _, got := range []string{fmt.Sprint(s), fmt.Sprintf("%v %s %+v %#v", s, s, s, s)} {
		if strings.Contains(got, "hunter2") {
			t.Errorf("expected fmt to redact the secret, got %q", got)
		}
	}
	js, _ := json.Marshal(struct{ S config.Secret }{s})
	if strings.Contains(string(js), "hunter2") {
		t.Errorf("expected JSON to redact the secret, got %s", js)
	}
	eq(t, "Reveal", s.Reveal(), "hunter2")
	eq(t, "empty secret String", config.Secret("").String(), "")

	cfg := mustParse(t, specYAML+"\n", merged(specEnv, map[string]string{"TENAZ_NATS_URL": "nats://user:natspw@a:4222,nats://tok3n@b:4222"}))
	out := cfg.Redacted()
	for _, secret := range []string{"acme-key-123", erpSecret, testSecret, "natspw", "tok3n"} {
		if strings.Contains(out, secret) {
			t.Errorf("expected Redacted to hide %q, got:\n%s", secret, out)
		}
	}
	for _, want := range []string{"[redacted]", "order.create:", "rate: 50/s", "cooldown: 2m", "nats://user:redacted@a:4222"} {
		if !strings.Contains(out, want) {
			t.Errorf("expected Redacted to contain %q, got:\n%s", want, out)
		}
	}
}

func TestAccountMerge(t *testing.T) {
	t.Parallel()
	cfg := mustParse(t, orderKind+`
targets:
  erp: {url: "https://erp.example.com/", headers: {X-Base: base, X-Key: target}}
accounts:
  "*": {concurrency: 16, rate: 100/s, targets: {erp: {headers: {x-key: star, X-Star: s}}}}
  acme: {rate: 5/s, breaker: {failures: 2}, targets: {erp: {url: "https://acme.example.com/", headers: {X-KEY: acme}}}}
  free: {rate: unlimited}
`, nil)
	acme := cfg.Account("acme")
	eq(t, "acme.concurrency (from *)", acme.Concurrency, 16)
	eq(t, "acme.rate (own)", acme.Rate.PerSecond, 5.0)
	eq(t, "acme.breaker.failures (own)", acme.Breaker.Failures, 2)
	eq(t, "acme.breaker.cooldown (built-in)", acme.Breaker.Cooldown.D(), 2*time.Minute)
	eq(t, "free.rate (explicitly unlimited)", cfg.Account("free").Rate.Unlimited(), true)
	eq(t, "unknown account gets *", cfg.Account("nobody").Concurrency, 16)

	got := cfg.TargetFor("acme", "erp")
	eq(t, "acme erp url", got.URL, "https://acme.example.com/")
	eq(t, "acme erp header count", len(got.Headers), 3)
	eq(t, "acme erp X-Base", got.Headers["X-Base"].Reveal(), "base")
	eq(t, "acme erp X-Star", got.Headers["X-Star"].Reveal(), "s")
	eq(t, "acme erp X-KEY (case-insensitive replace)", got.Headers["X-KEY"].Reveal(), "acme")

	other := cfg.TargetFor("other", "erp")
	eq(t, "other erp url", other.URL, "https://erp.example.com/")
	eq(t, "other erp x-key (from *)", other.Headers["x-key"].Reveal(), "star")

	base, _ := cfg.Target("erp")
	eq(t, "TargetFor leaves the target alone", base.Headers["X-Key"].Reveal(), "target")
	eq(t, "TargetFor of an unknown target", cfg.TargetFor("acme", "nope").URL, "")

	// The result is a copy.
	acme.Targets["erp"].Headers["X-KEY"] = "changed"
	eq(t, "Account returns a copy", cfg.TargetFor("acme", "erp").Headers["X-KEY"].Reveal(), "acme")
}

func TestKindAndStageFor(t *testing.T) {
	t.Parallel()
	cfg := mustParse(t, minimal, nil)
	if _, ok := cfg.Kind("nope"); ok {
		t.Error("expected Kind(nope) to be false")
	}
	k, _ := cfg.Kind("order.create")
	if _, ok := k.StageFor(true); ok {
		t.Error("expected no fallback stage")
	}
	if s, ok := k.StageFor(false); !ok || s.Target != "erp" {
		t.Errorf("expected primary stage with target erp, got %+v, %v", s, ok)
	}
	if _, ok := (config.Kind{}).StageFor(false); ok {
		t.Error("expected the zero Kind to have no primary stage")
	}
}

func TestSyncInterval(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		sync   string
		always bool
		every  time.Duration
	}{
		{"always", true, 0},
		{"", true, 0},
		{"1s", false, time.Second},
		{"2m", false, 2 * time.Minute},
		{"nonsense", true, 0},
		{"-1s", true, 0},
	} {
		always, every := config.Embedded{Sync: tc.sync}.SyncInterval()
		if always != tc.always || every != tc.every {
			t.Errorf("SyncInterval(%q): expected (%v, %v), got (%v, %v)", tc.sync, tc.always, tc.every, always, every)
		}
	}
}

func TestSchemaFor(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "schemas"), 0o700); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"schemas/order.json":  `{"type": "object", "required": ["order_id"], "properties": {"order_id": {"$ref": "defs.json#/$defs/id"}}}`,
		"schemas/defs.json":   `{"$defs": {"id": {"type": "string", "minLength": 1}}}`,
		"schemas/fiscal.yaml": "type: object\nrequired: [amount]\n",
		"tenaz.yaml":          erpTarget + "kinds:\n  order.create: {target: erp, schema: schemas/order.json}\n  fiscal.adjust: {target: erp, schema: schemas/fiscal.yaml}\n  reward.credit: {target: erp, schema: '{\"type\": \"object\", \"maxProperties\": 1}'}\n  plain: {target: erp}\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := config.Load(filepath.Join(dir, "tenaz.yaml"))
	if err != nil {
		t.Fatalf("Load: expected no error, got %v", err)
	}
	for _, tc := range []struct {
		kind    string
		payload string
		valid   bool
	}{
		{"order.create", `{"order_id": "o-1"}`, true},
		{"order.create", `{"order_id": ""}`, false},
		{"order.create", `{}`, false},
		{"fiscal.adjust", `{"amount": 1}`, true},
		{"fiscal.adjust", `{}`, false},
		{"reward.credit", `{"a": 1}`, true},
		{"reward.credit", `{"a": 1, "b": 2}`, false},
	} {
		s, err := cfg.SchemaFor(tc.kind)
		if err != nil || s == nil {
			t.Fatalf("SchemaFor(%s): expected a schema, got %v, %v", tc.kind, s, err)
		}
		var v any
		if err := json.Unmarshal([]byte(tc.payload), &v); err != nil {
			t.Fatal(err)
		}
		if err := s.Validate(v); (err == nil) != tc.valid {
			t.Errorf("%s schema on %s: expected valid=%v, got %v", tc.kind, tc.payload, tc.valid, err)
		}
	}
	a, _ := cfg.SchemaFor("order.create")
	b, _ := cfg.SchemaFor("order.create")
	if a != b {
		t.Error("expected SchemaFor to return the cached schema")
	}
	for _, kind := range []string{"plain", "unknown"} {
		if s, err := cfg.SchemaFor(kind); s != nil || err != nil {
			t.Errorf("SchemaFor(%s): expected nil, nil, got %v, %v", kind, s, err)
		}
	}
}

func TestLoad(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "tenaz.yaml")

	_, err := config.Load(path)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), path) {
		t.Errorf("expected a not-exist error naming %s, got %v", path, err)
	}

	if err := os.WriteFile(path, []byte("kinds: {order.create: {target: nope}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = config.Load(path)
	wantErr(t, err, path, `kinds.order.create.target: unknown target "nope"`)

	if err := os.WriteFile(path, []byte(minimal), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatalf("Load: expected no error, got %v", err)
	}
	eq(t, "loaded prefix", cfg.Prefix, "tenaz")
}

func TestParseURLTemplate(t *testing.T) {
	t.Parallel()
	tmpl, err := config.ParseURLTemplate("https://x/{{.Account}}/{{.Kind}}/{{.Reference | urlquery}}")
	if err != nil {
		t.Fatal(err)
	}
	u, err := tmpl.Render(config.URLVars{Account: "acme", Kind: "order.create", Reference: "a b"})
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "rendered URL (urlquery in a path escapes for the path)", u, "https://x/acme/order.create/a%20b")
	if _, err := config.ParseURLTemplate("{{range .Kind}}{{end}}"); err == nil {
		t.Error("expected range to be refused")
	}
	// A field a branch names is checked whichever branch Validate's one
	// rendering takes: each of these would fail at every call that took
	// the branch.
	for text, say := range map[string]string{
		"https://x/{{if .EntityID}}{{.EntityID}}{{else}}{{.Entity}}{{end}}": "the field .Entity, which",
		"https://x/{{with .Reference}}{{.ID}}{{end}}":                       "the field .ID of a value",
		"https://x/{{$k := .Kind}}{{$k.Name}}":                              "the field .Name of a value",
		"https://x/{{$.Acount}}":                                            "the field .Acount, which",
		"https://x/{{.Kind.Len}}":                                           "the field .Kind.Len of a value",
	} {
		if _, err := config.ParseURLTemplate(text); err == nil || !strings.Contains(err.Error(), say) {
			t.Errorf("%s: want it refused saying %q, got %v", text, say, err)
		}
	}
	for _, text := range []string{
		"https://x/{{with .Reference}}{{.}}{{else}}{{.ID}}{{end}}",
		"https://x/{{if .EntityID}}{{$.Account}}/{{.EntityID}}{{end}}",
	} {
		if _, err := config.ParseURLTemplate(text); err != nil {
			t.Errorf("%s: want it taken, got %v", text, err)
		}
	}
}

func TestSchemaForConcurrent(t *testing.T) {
	t.Parallel()
	// A Config built in code, never parsed: the cache is created lazily.
	cfg := (&config.Config{
		Targets: map[string]config.Target{"erp": {URL: "https://erp.example.com/"}},
		Kinds: map[string]config.Kind{
			"order.create": {Stage: config.Stage{Target: "erp"}, Schema: `{"type": "object"}`},
		},
	}).WithDefaults()
	errs := make(chan error, 8)
	for range 8 {
		go func() {
			_, err := cfg.SchemaFor("order.create")
			errs <- err
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Errorf("SchemaFor: expected no error, got %v", err)
		}
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("expected the built config to be valid, got %v", err)
	}
}

// A call begun may run for the longest of the targets' timeouts and the
// handler stages' (a replica taken for dead keeps its accounts that long).
func TestLongestCallCountsHandlers(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse([]byte(`stop_timeout: 1m
targets: {erp: {url: "http://x/", timeout: 5s}}
kinds:
  order.create: {target: erp}
  reward.credit: {handler: reward, fallback: {handler: reward, timeout: 40s}}
  reward.other: {handler: reward}
`), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	if d := cfg.LongestCall(); d != 40*time.Second {
		t.Fatalf("want the fallback handler's 40s, got %s", d)
	}
	if k, _ := cfg.Kind("reward.other"); k.Timeout.D() != 10*time.Second {
		t.Fatalf("want a handler stage's timeout to default to 10s, got %s", k.Timeout)
	}
}
