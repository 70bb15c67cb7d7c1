package config_test

import (
	"errors"
	"testing"

	"github.com/tenaz/tenaz/pkg/config"
)

// fuzzEnv is the environment every fuzzed document is parsed with: a few
// ${…} targets and a few TENAZ_ overrides.
var fuzzEnv = map[string]string{
	"A":                                 "a",
	"N":                                 "3",
	"SECRET":                            "fuzz-secret-value",
	"EMPTY":                             "",
	"TENAZ_HTTP_ADDR":                   ":9999",
	"TENAZ_KINDS_ORDER_CREATE_ATTEMPTS": "4",
	"TENAZ_ACCOUNTS_DEFAULT_RATE":       "5/s",
}

// FuzzParse checks that Parse never panics, that every error it returns
// wraps ErrInvalidConfig, and that whatever it accepts is valid and usable.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"",
		minimal,
		specYAML,
		"nats: {url: 'nats://${A}:4222', embedded: {sync: 1s}}\nstreams: {replicas: '${N}'}",
		"kinds:\n  a: &x {target: t, attempts: 2}\n  b: {<<: *x, completion: poll}\ntargets: {t: {url: 'http://h/{{.ID}}', poll: {url: 'http://h/{{.Reference}}', done_when: {field: s, in: [d]}}}}",
		"targets: {erp: {url: 'http://x/', signing_secret: '${SECRET}', classify: {'409': success}}}\naccounts: {acme: {rate: 10/m, targets: {erp: {headers: {X-K: '$${A}'}}}}}",
		"kinds: {order.create: {target: erp, schema: {type: object, required: [id]}}}\ntargets: {erp: {url: 'https://e/{{.Kind}}'}}",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := config.Parse(data, envOf(fuzzEnv))
		if err != nil {
			if !errors.Is(err, config.ErrInvalidConfig) {
				t.Fatalf("expected every error to wrap ErrInvalidConfig, got %v", err)
			}
			if cfg != nil {
				t.Fatal("expected a nil *Config with an error")
			}
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("Parse accepted a config that does not Validate: %v", err)
		}
		if err := cfg.WithDefaults().Validate(); err != nil {
			t.Fatalf("WithDefaults on a parsed config made it invalid: %v", err)
		}
		_ = cfg.Redacted()
		for name, k := range cfg.Kinds {
			if _, ok := k.StageFor(false); !ok {
				t.Fatalf("kind %q: expected a primary stage", name)
			}
			_, _ = k.StageFor(true)
			if _, err := cfg.SchemaFor(name); err != nil {
				t.Fatalf("kind %q: SchemaFor failed after Validate: %v", name, err)
			}
			for account := range cfg.Accounts {
				if tg := cfg.TargetFor(account, k.Target); tg.URL == "" {
					t.Fatalf("kind %q, account %q: expected target %q to exist", name, account, k.Target)
				}
				if a := cfg.Account(account); a.MaxConcurrency() < 1 || a.Breaker.Failures < 1 {
					t.Fatalf("account %q: expected positive limits, got %+v", account, a)
				}
			}
		}
		_, _ = cfg.NATS.Embedded.SyncInterval()
	})
}
