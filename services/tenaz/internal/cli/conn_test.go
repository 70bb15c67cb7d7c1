package cli

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
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
// the context and flags beat both; paths in the context expand ~ and $VAR.
func TestResolvePrecedence(t *testing.T) {
	t.Parallel()
	xdg := t.TempDir()
	writeContext(t, xdg, "prod", `{
		"description": "fields tenaz does not use are ignored",
		"url": "nats://ctx:4222", "user": "ctxuser", "password": "ctxpass", "token": "ctxtoken",
		"creds": "~/creds/ops.creds", "nkey": "$KEYS/ops.nk", "cert": "/c.pem", "key": "/k.pem", "ca": "/ca.pem",
		"jetstream_domain": "hub"}`, true)
	env := map[string]string{"XDG_CONFIG_HOME": xdg, "HOME": "/home/op", "KEYS": "/keys"}

	s, err := (&Client{}).resolve(envOf(env))
	if err != nil {
		t.Fatalf("resolve with the selected context: %v", err)
	}
	want := natsContext{URL: "nats://ctx:4222", User: "ctxuser", Password: "ctxpass", Token: "ctxtoken",
		Creds: "/home/op/creds/ops.creds", NKey: "/keys/ops.nk", Cert: "/c.pem", Key: "/k.pem", CA: "/ca.pem"}
	if s.natsContext != want || s.ContextName != "prod" {
		t.Fatalf("selected context: want %+v from prod, got %+v from %q", want, s.natsContext, s.ContextName)
	}

	env["NATS_URL"], env["NATS_USER"] = "nats://env:4222", "envuser"
	s, err = (&Client{}).resolve(envOf(env))
	if err != nil || s.URL != "nats://env:4222" || s.User != "envuser" || s.Password != "ctxpass" {
		t.Fatalf("env over context: want url env, user envuser, password ctxpass; got %+v (%v)", s.natsContext, err)
	}
	s, err = (&Client{Server: "nats://flag:4222", User: "flaguser"}).resolve(envOf(env))
	if err != nil || s.URL != "nats://flag:4222" || s.User != "flaguser" {
		t.Fatalf("flags over env: want url flag, user flaguser; got %+v (%v)", s.natsContext, err)
	}
}

// With no context selected, the default is where `tenaz run` listens; a
// named context wins over the selected one; an unknown or malformed one is
// a usage error naming it.
func TestResolveContextChoice(t *testing.T) {
	t.Parallel()
	xdg := t.TempDir()
	s, err := (&Client{}).resolve(envOf(map[string]string{"XDG_CONFIG_HOME": xdg}))
	if err != nil || s.URL != DefaultServer || s.ContextName != "" {
		t.Fatalf("no context: want %s and no context, got %q from %q (%v)", DefaultServer, s.URL, s.ContextName, err)
	}

	// HOME/.config is used when XDG_CONFIG_HOME is unset.
	home := t.TempDir()
	writeContext(t, filepath.Join(home, ".config"), "a", `{"url":"nats://a:4222"}`, true)
	writeContext(t, filepath.Join(home, ".config"), "b", `{"url":"nats://b:4222"}`, false)
	env := map[string]string{"HOME": home}
	if s, err = (&Client{}).resolve(envOf(env)); err != nil || s.URL != "nats://a:4222" {
		t.Fatalf("selected context a under HOME/.config: got %q (%v)", s.URL, err)
	}
	if s, err = (&Client{Context: "b"}).resolve(envOf(env)); err != nil || s.URL != "nats://b:4222" {
		t.Fatalf("--context b: got %q (%v)", s.URL, err)
	}
	env["NATS_CONTEXT"] = "b"
	if s, err = (&Client{}).resolve(envOf(env)); err != nil || s.URL != "nats://b:4222" {
		t.Fatalf("NATS_CONTEXT=b: got %q (%v)", s.URL, err)
	}

	for _, c := range []struct{ name, body string }{{"missing", ""}, {"../etc", ""}, {"broken", `{"url":`}} {
		if c.body != "" {
			writeContext(t, xdg, c.name, c.body, false)
		}
		_, err := (&Client{Context: c.name}).resolve(envOf(map[string]string{"XDG_CONFIG_HOME": xdg}))
		if !errors.Is(err, ErrUsage) || ExitCode(err) != ExitUsage {
			t.Fatalf("--context %s: want a usage error, got %v", c.name, err)
		}
	}
	writeContext(t, xdg, "halfcert", `{"cert":"/c.pem"}`, false)
	if _, err := (&Client{Context: "halfcert"}).resolve(envOf(map[string]string{"XDG_CONFIG_HOME": xdg})); !errors.Is(err, ErrUsage) {
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
		{&RemoteError{Status: 404}, ExitNotFound},
		{&RemoteError{Status: 409, Code: "not_cancellable"}, ExitConflict},
		{&RemoteError{Status: 400}, ExitUsage},
		{&RemoteError{Status: 422}, ExitUsage},
		{&RemoteError{Status: 503}, ExitUnavailable},
		{&RemoteError{Status: 500}, ExitError},
		{failf(ErrUnavailable, "x"), ExitUnavailable},
		{failf(ErrNotFound, "x"), ExitNotFound},
	} {
		if got := ExitCode(c.err); got != c.want {
			t.Errorf("ExitCode(%v): want %d, got %d", c.err, c.want, got)
		}
	}
}
