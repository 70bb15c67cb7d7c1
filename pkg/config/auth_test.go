package config_test

import (
	"strings"
	"testing"

	"github.com/tenaz/tenaz/pkg/config"
)

const (
	hashA = "sha256:" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	hashB = "sha256:" + "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
)

func TestAuthConfig(t *testing.T) {
	t.Parallel()
	cfg := mustParse(t, minimal+`
auth:
  keys:
    k1: {account: acme, scopes: [submit, read], hash: "`+hashA+`", rate: 10/s, burst: 20}
  operators:
    alice: {hash: "${ALICE_HASH}"}
`, map[string]string{"ALICE_HASH": hashB, "TENAZ_AUTH_KEYS_K1_SCOPES": "submit,read,operate"})
	k := cfg.Auth.Keys["k1"]
	eq(t, "account", k.Account, "acme")
	eq(t, "scopes from the environment", strings.Join(k.Scopes, ","), "submit,read,operate")
	eq(t, "rate", k.Rate.PerSecond, 10.0)
	eq(t, "burst", k.Burst, 20)
	eq(t, "operator hash", cfg.Auth.Operators["alice"].Hash, hashB)
	eq(t, "enabled", cfg.Auth.Enabled(), true)
	eq(t, "configured", cfg.Auth.Configured(), true)

	off := mustParse(t, minimal+"auth: {disabled: true}\n", nil)
	eq(t, "disabled", off.Auth.Enabled(), false)
	def := mustParse(t, minimal, nil)
	eq(t, "enabled by default", def.Auth.Enabled(), true)
	eq(t, "nothing configured by default", def.Auth.Configured(), false)
}

func TestAuthConfigInvalid(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, doc string
		want      []string
	}{
		{"disabled with keys", `auth: {disabled: true, keys: {k1: {account: acme, scopes: [read], hash: "` + hashA + `"}}}`,
			[]string{"auth.disabled: is true while keys or operators are configured"}},
		{"missing fields", `auth: {keys: {k1: {}}}`,
			[]string{"auth.keys.k1.account: is required", "auth.keys.k1.scopes: must list", "auth.keys.k1.hash: is required"}},
		{"bad scope", `auth: {keys: {k1: {account: acme, scopes: [read, admin], hash: "` + hashA + `"}}}`,
			[]string{`auth.keys.k1.scopes[1]: must be submit, read or operate, got "admin"`}},
		{"plain key instead of hash", `auth: {keys: {k1: {account: acme, scopes: [read], hash: "tnz_plaintext"}}}`,
			[]string{`auth.keys.k1.hash: must be "sha256:" followed by 64 lower-case hex digits`}},
		{"upper-case hex", `auth: {operators: {bob: {hash: "` + strings.ToUpper(hashA[7:]) + `"}}}`,
			[]string{`auth.operators.bob.hash: must be "sha256:"`}},
		{"bad account", `auth: {keys: {k1: {account: "a.b", scopes: [read], hash: "` + hashA + `"}}}`,
			[]string{`auth.keys.k1.account: must be an account name`}},
		{"bad id", `auth: {keys: {"k 1": {account: acme, scopes: [read], hash: "` + hashA + `"}}}`,
			[]string{`auth.keys.k 1: a key id must be`}},
		{"one key twice", `auth: {keys: {k1: {account: acme, scopes: [read], hash: "` + hashA + `"}}, operators: {ops: {hash: "` + hashA + `"}}}`,
			[]string{"auth.operators.ops.hash: is the same as auth.keys.k1.hash"}},
		{"negative burst", `auth: {keys: {k1: {account: acme, scopes: [submit], hash: "` + hashA + `", burst: -1}}}`,
			[]string{"auth.keys.k1.burst: must not be negative"}},
		{"creds on the embedded server", `nats: {creds: /x.creds}`,
			[]string{"nats.creds: needs nats.url"}},
		{"two kinds of embedded auth", `nats: {user: u, password: p, token: t}`,
			[]string{"nats: the embedded server takes one kind of client auth"}},
		{"user without password", `nats: {user: u}`,
			[]string{"nats.password: nats.user and nats.password go together"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := config.Parse([]byte(minimal+c.doc+"\n"), nil)
			wantErr(t, err, c.want...)
		})
	}
}

// External NATS takes any one of the client credentials; the embedded
// server's rules do not apply.
func TestNATSAuthExternal(t *testing.T) {
	t.Parallel()
	cfg := mustParse(t, minimal+"nats: {url: nats://a:4222, creds: /x.creds, user: u}\n", nil)
	eq(t, "creds", cfg.NATS.Creds, "/x.creds")
}

// The nats CLI's variables set the NATS client credentials when their
// TENAZ_ twins are unset.
func TestNATSEnvFallbacks(t *testing.T) {
	t.Parallel()
	cfg := mustParse(t, minimal, map[string]string{
		"NATS_URL": "tls://n:4222", "NATS_CREDS": "/c.creds", "NATS_CA": "/ca.pem", "NATS_CERT": "/c.pem", "NATS_KEY": "/k.pem",
		"NATS_NKEY": "/seed.nk", "NATS_USER": "u", "NATS_PASSWORD": "p", "TENAZ_NATS_USER": "tu",
	})
	n := cfg.NATS
	eq(t, "creds", n.Creds, "/c.creds")
	eq(t, "ca", n.TLS.CA, "/ca.pem")
	eq(t, "cert", n.TLS.Cert, "/c.pem")
	eq(t, "key", n.TLS.Key, "/k.pem")
	eq(t, "nkey", n.NKeySeedFile, "/seed.nk")
	eq(t, "user: TENAZ_ wins", n.User, "tu")
	eq(t, "password", n.Password.Reveal(), "p")
}
