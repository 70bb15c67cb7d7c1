package config_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/tenaz/tenaz/pkg/config"
)

// storedBase is the config stored accounts are merged into.
const storedBase = `
auth: {disabled: true}
accounts:
  acme: {rate: 10/s}
targets:
  erp: {url: "http://127.0.0.1:1/erp"}
kinds:
  order.create: {target: erp}
`

// FuzzParseStoredAccount checks that a stored account's JSON (what the
// operator API and the accounts bucket hand over) never panics the
// decoder, that every error wraps ErrInvalidConfig, and that what
// decodes either merges into a valid config or is left out with an error
// that wraps ErrInvalidConfig.
func FuzzParseStoredAccount(f *testing.F) {
	base, err := config.Parse([]byte(storedBase), nil)
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{
		`{}`,
		`{"rate":"5/s","concurrency":"auto","concurrency_max":9}`,
		`{"breaker":{"failures":3,"cooldown":"1m"},"targets":{"erp":{"url":"https://e/{{.ID}}","headers":{"Authorization":"Bearer x"}}}}`,
		`{"keys":{"k":{"scopes":["submit","read"],"hash":"sha256:` + strings.Repeat("0", 64) + `","rate":"1/s","burst":2}}}`,
		`{"keys":{"k":{"account":"other","scopes":["fly"]}}}`,
		`{"repeats":{}}`, `{"rate":"${A}"}`, `[1]`, `{"targets":{"nope":{}}}`, `{"a":1}`, `null`, `{"rate":1e400}`,
		`{"rate":"2e9/s"}`, `{"rate":1e-10}`, `{"concurrency":1000000000000}`, `{"concurrency":"auto","concurrency_max":99999}`,
		`{"rate":"1/s","rate":"1000/s"}`, `{"keys":{},"keys":{}}`, `{"rate":"1/s"} {}`,
	} {
		f.Add("newco", []byte(seed))
	}
	f.Fuzz(func(t *testing.T, name string, data []byte) {
		sa, err := config.ParseStoredAccount(name, data)
		if err != nil {
			if !errors.Is(err, config.ErrInvalidConfig) {
				t.Fatalf("want every error to wrap ErrInvalidConfig, got %v", err)
			}
			return
		}
		for id, k := range sa.Keys {
			if k.Account != name {
				t.Fatalf("key %s: want the stored account's own account %q, got %q", id, name, k.Account)
			}
		}
		m, bad := base.With(map[string]config.StoredAccount{name: sa})
		if e := bad[name]; e != nil {
			if !errors.Is(e, config.ErrInvalidConfig) {
				t.Fatalf("want a left-out account's error to wrap ErrInvalidConfig, got %v", e)
			}
			return
		}
		if err := m.Validate(); err != nil {
			t.Fatalf("With put in force a config that does not Validate: %v", err)
		}
		a := m.Account(name)
		if a.MaxConcurrency() < 1 || a.Breaker.Failures < 1 {
			t.Fatalf("account %q: want positive limits, got %+v", name, a)
		}
		// Past these, the dispatcher's slots and pacer cannot be built.
		if a.MaxConcurrency() > config.ConcurrencyCeiling || !a.Rate.Unlimited() && (a.Rate.PerSecond < config.MinRate || a.Rate.PerSecond > config.MaxRate) {
			t.Fatalf("account %q: want limits within the bounds, got concurrency %d, rate %v/s", name, a.MaxConcurrency(), a.Rate.PerSecond)
		}
	})
}

// A member given twice is refused, naming it, at any depth: a reader of
// the first would not expect the last to count. So is anything after the
// object.
func TestStoredAccountRefusesRepeatsAndTrailingData(t *testing.T) {
	t.Parallel()
	for def, key := range map[string]string{
		`{"rate":"1/s","concurrency":2,"rate":"1000/s"}`:               "accounts.newco.rate",
		`{"keys":{"k":{"scopes":["read"]}},"keys":{}}`:                 "accounts.newco.keys",
		`{"breaker":{"failures":3,"failures":9}}`:                      "accounts.newco.breaker.failures",
		`{"keys":{"k":{"scopes":["read"]},"k":{"scopes":["submit"]}}}`: "auth.keys.k",
		`{"rate":"1/s"} {"rate":"1000/s"}`:                             "accounts.newco",
	} {
		_, err := config.ParseStoredAccount("newco", []byte(def))
		if !errors.Is(err, config.ErrInvalidConfig) || !strings.HasPrefix(err.Error(), key+":") {
			t.Errorf("%s: want an error naming %s, got %v", def, key, err)
		}
	}
}

// An account's own callback_secret is tenaz.yaml's only: a replica of an
// earlier version reads the accounts bucket too, and would leave the
// whole account out for a key it does not know, and with it the
// account's own url and headers (its calls would go to the target's).
func TestStoredAccountRefusesACallbackSecret(t *testing.T) {
	t.Parallel()
	_, err := config.ParseStoredAccount("newco", []byte(`{"targets":{"erp":{"url":"https://newco.example/erp","callback_secret":"whsec_bmV3Y28tb3duLWNhbGxiYWNrLXNlY3JldC1rZXktMzI="}}}`))
	if want := "accounts.newco.targets.erp.callback_secret: is set in tenaz.yaml only"; !errors.Is(err, config.ErrInvalidConfig) || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("want %q, got %v", want, err)
	}
}

// A stored account's errors name the key and say what is wrong in its
// own terms: no line (the definition is JSON the sender may have written
// on many lines, and the line counted was of a document built around
// it), and a ${NAME} is refused because a stored value is never read from
// the environment, not because NAME "is not set" (it may well be).
func TestStoredAccountErrorsSpeakOfTheDefinition(t *testing.T) {
	t.Setenv("TENAZ_TEST_SET", "x")
	for def, want := range map[string]string{
		`{"rate":"${TENAZ_TEST_SET}"}`: "accounts.newco.rate: ${TENAZ_TEST_SET}: a stored account's values are stored as they are, never read from the environment",
		"{\n\"rate\": \"fast\"\n}":     `accounts.newco.rate: invalid rate "fast"`,
	} {
		_, err := config.ParseStoredAccount("newco", []byte(def))
		if err == nil || !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "(line") {
			t.Errorf("%s: want %q, without a line, got %v", def, want, err)
		}
	}
}

// BenchmarkWith merges 1,000 stored accounts, each with a key and a
// header, into a config: what every process does on each change of the
// accounts bucket.
func BenchmarkWith(b *testing.B) {
	base, err := config.Parse([]byte(strings.Replace(storedBase, "auth: {disabled: true}\n", "", 1)), nil)
	if err != nil {
		b.Fatal(err)
	}
	stored := map[string]config.StoredAccount{}
	for i := range 1000 {
		name, hash := fmt.Sprintf("acct-%04d", i), fmt.Sprintf("sha256:%064d", i)
		sa, err := config.ParseStoredAccount(name, []byte(`{"rate":"5/s","targets":{"erp":{"headers":{"Authorization":"Bearer x"}}},"keys":{"`+name+`":{"scopes":["submit"],"hash":"`+hash+`"}}}`))
		if err != nil {
			b.Fatal(err)
		}
		stored[name] = sa
	}
	b.ResetTimer()
	for b.Loop() {
		if _, bad := base.With(stored); len(bad) != 0 {
			b.Fatalf("want every account in force, got %v", bad)
		}
	}
}
