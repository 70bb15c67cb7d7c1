package cli

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/jsm.go/natscontext"

	"github.com/tenaz/tenaz/pkg/client"
)

// writeContext writes <dir>/nats/context/<name>.json and, if selected,
// <dir>/nats/context.txt naming it.
func writeContext(t *testing.T, dir, name, body string, selected bool) {
	t.Helper()
	cdir := filepath.Join(dir, "nats", "context")
	if err := os.MkdirAll(cdir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cdir, name+".json"), []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if selected {
		if err := os.WriteFile(filepath.Join(dir, "nats", "context.txt"), []byte(name+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// The selected context supplies every field; environment variables beat
// the context and flags beat both; paths in the context expand ~ and $VAR
// (natscontext's expansion, from the process's environment).
func TestResolvePrecedence(t *testing.T) {
	t.Parallel()
	xdg := t.TempDir()
	writeContext(t, xdg, "prod", `{
		"description": "fields tenaz does not use are ignored",
		"url": "nats://ctx:4222", "user": "ctxuser", "password": "ctxpass", "token": "ctxtoken",
		"creds": "~/creds/ops.creds", "nkey": "$HOME/keys/ops.nk", "cert": "/c.pem", "key": "/k.pem", "ca": "/ca.pem",
		"jetstream_domain": "hub"}`, true)
	env := map[string]string{"XDG_CONFIG_HOME": xdg}
	home, err := os.UserHomeDir()
	if err != nil {
		t.Fatal(err)
	}

	c, err := (&Connection{}).resolve(envOf(env))
	if err != nil {
		t.Fatalf("resolve with the selected context: %v", err)
	}
	type fields struct{ URL, User, Password, Token, Creds, NKey, Cert, Key, CA, Domain string }
	of := func(c *natscontext.Context) fields {
		return fields{c.ServerURL(), c.User(), c.Password(), c.Token(), c.Creds(), c.NKey(), c.Certificate(), c.Key(), c.CA(), c.JSDomain()}
	}
	want := fields{URL: "nats://ctx:4222", User: "ctxuser", Password: "ctxpass", Token: "ctxtoken",
		Creds: filepath.Join(home, "creds/ops.creds"), NKey: os.ExpandEnv("$HOME/keys/ops.nk"), Cert: "/c.pem", Key: "/k.pem", CA: "/ca.pem", Domain: "hub"}
	if got := of(c); got != want || c.Name != "prod" || c.Path() != filepath.Join(xdg, "nats", "context", "prod.json") {
		t.Fatalf("selected context: want %+v from prod, got %+v from %q (%s)", want, got, c.Name, c.Path())
	}

	env["NATS_URL"], env["NATS_USER"] = "nats://env:4222", "envuser"
	c, err = (&Connection{}).resolve(envOf(env))
	if err != nil || c.ServerURL() != "nats://env:4222" || c.User() != "envuser" || c.Password() != "ctxpass" {
		t.Fatalf("env over context: want url env, user envuser, password ctxpass; got %+v (%v)", of(c), err)
	}
	c, err = (&Connection{Server: "nats://flag:4222", User: "flaguser"}).resolve(envOf(env))
	if err != nil || c.ServerURL() != "nats://flag:4222" || c.User() != "flaguser" {
		t.Fatalf("flags over env: want url flag, user flaguser; got %+v (%v)", of(c), err)
	}
}

// With no context selected, the default is where `tenaz run` listens; a
// named context wins over the selected one; an unknown or malformed one is
// a usage error naming it.
func TestResolveContextChoice(t *testing.T) {
	t.Parallel()
	xdg := t.TempDir()
	c, err := (&Connection{}).resolve(envOf(map[string]string{"XDG_CONFIG_HOME": xdg}))
	if err != nil || c.ServerURL() != DefaultServer || c.Name != "" {
		t.Fatalf("no context: want %s and no context, got %v (%v)", DefaultServer, c, err)
	}

	// HOME/.config is used when XDG_CONFIG_HOME is unset.
	home := t.TempDir()
	writeContext(t, filepath.Join(home, ".config"), "a", `{"url":"nats://a:4222"}`, true)
	writeContext(t, filepath.Join(home, ".config"), "b", `{"url":"nats://b:4222"}`, false)
	env := map[string]string{"HOME": home}
	if c, err = (&Connection{}).resolve(envOf(env)); err != nil || c.ServerURL() != "nats://a:4222" {
		t.Fatalf("selected context a under HOME/.config: got %v (%v)", c, err)
	}
	if c, err = (&Connection{Context: "b"}).resolve(envOf(env)); err != nil || c.ServerURL() != "nats://b:4222" {
		t.Fatalf("--context b: got %v (%v)", c, err)
	}
	env["NATS_CONTEXT"] = "b"
	if c, err = (&Connection{}).resolve(envOf(env)); err != nil || c.ServerURL() != "nats://b:4222" {
		t.Fatalf("NATS_CONTEXT=b: got %v (%v)", c, err)
	}

	for _, c := range []struct{ name, body string }{{"missing", ""}, {"../etc", ""}, {"broken", `{"url":`}} {
		if c.body != "" {
			writeContext(t, xdg, c.name, c.body, false)
		}
		_, err := (&Connection{Context: c.name}).resolve(envOf(map[string]string{"XDG_CONFIG_HOME": xdg}))
		if !errors.Is(err, ErrUsage) || ExitCode(err) != ExitUsage || !strings.Contains(err.Error(), c.name) {
			t.Fatalf("--context %s: want a usage error naming it, got %v", c.name, err)
		}
	}
	writeContext(t, xdg, "halfcert", `{"cert":"/c.pem"}`, false)
	if _, err := (&Connection{Context: "halfcert"}).resolve(envOf(map[string]string{"XDG_CONFIG_HOME": xdg})); !errors.Is(err, ErrUsage) {
		t.Fatalf("a cert without a key: want a usage error, got %v", err)
	}
}

// Exit codes of errors from the services and from NATS.
func TestExitCode(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want int
	}{
		{nil, ExitOK},
		{errors.New("boom"), ExitError},
		{&client.Error{Status: 404}, ExitNotFound},
		{&client.Error{Status: 409, Code: "not_cancellable"}, ExitConflict},
		{&client.Error{Status: 400}, ExitUsage},
		{&client.Error{Status: 422}, ExitUsage},
		{&client.Error{Status: 503}, ExitUnavailable},
		{&client.Error{Status: 500}, ExitError},
		{failf(ErrUnavailable, "x"), ExitUnavailable},
		{failf(ErrNotFound, "x"), ExitNotFound},
	} {
		if got := ExitCode(c.err); got != c.want {
			t.Errorf("ExitCode(%v): want %d, got %d", c.err, c.want, got)
		}
	}
}
