package live_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/live"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/streams"
)

const sealingKey = "dGVuYXotdGVzdC1zZWFsaW5nLWtleS0zMi1ieXRlcyE="

// fileYAML is a config with acme at rate and http on addr.
func fileYAML(rate, addr string) string {
	return `
http: {addr: "` + addr + `"}
auth: {disabled: true}
sealing_key: "` + sealingKey + `"
accounts:
  acme: {rate: "` + rate + `"}
targets:
  erp: {url: "http://127.0.0.1:1/erp", headers: {X-Team: core}}
kinds:
  order.create: {target: erp}
`
}

func load(t *testing.T, yaml string) (*config.Config, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tenaz.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, path
}

func rewrite(t *testing.T, path, yaml string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// Without a signal, a change of the file's content is reloaded: the live
// part applies, the rest is reported and keeps its value; a broken file
// is refused with its errors and changes nothing.
func TestReloadOnFileChange(t *testing.T) {
	t.Parallel()
	cfg, path := load(t, fileYAML("10/s", ":8080"))
	lv := live.New(cfg, live.Options{Path: path, Every: 10 * time.Millisecond})
	var seen []float64
	changed := make(chan struct{}, 8)
	lv.OnChange(func(c *config.Config) {
		seen = append(seen, c.Account("acme").Rate.PerSecond)
		changed <- struct{}{}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go lv.Run(ctx, nil)

	rewrite(t, path, fileYAML("5/s", ":9090"))
	natstest.Eventually(t, 5*time.Second, func() bool { return lv.Load().Account("acme").Rate.PerSecond == 5 }, "the new rate in force")
	<-changed
	st := lv.Status()
	if !st.OK || st.ReloadedAt.IsZero() || !slices.Equal(st.Restart, []string{"http"}) {
		t.Fatalf("want the reload applied with http awaiting a restart, got %+v", st)
	}
	if got := lv.Load().HTTP.Addr; got != ":8080" {
		t.Fatalf("http.addr cannot change live: want :8080 kept, got %s", got)
	}

	rewrite(t, path, strings.Replace(fileYAML("fast", ":8080"), "kinds:", "kinds:\n  bad.kind: {target: nowhere}", 1))
	natstest.Eventually(t, 5*time.Second, func() bool { return !lv.Status().OK }, "the broken file refused")
	st = lv.Status()
	errs := strings.Join(st.Errors, "\n")
	if !strings.Contains(errs, "accounts.acme.rate") {
		t.Fatalf("want the refused reload's errors to name accounts.acme.rate, got %q", errs)
	}
	if got := lv.Load().Account("acme").Rate.PerSecond; got != 5 || len(seen) != 1 {
		t.Fatalf("a refused reload must change nothing: want 5/s and one change, got %v and %v", got, seen)
	}
	if err := lv.Reload(); !errors.Is(err, config.ErrInvalidConfig) {
		t.Fatalf("Reload of the broken file: want ErrInvalidConfig, got %v", err)
	}
}

// A reload of the same config (the same file, or the bucket's values
// delivered again after a reconnect) tells no one: what the services built
// from it, such as an account's rate limiter, is kept.
func TestReloadOfTheSameConfigChangesNothing(t *testing.T) {
	t.Parallel()
	cfg, path := load(t, fileYAML("10/s", ":8080"))
	lv := live.New(cfg, live.Options{Path: path})
	changes := 0
	lv.OnChange(func(*config.Config) { changes++ })
	before := lv.Load()
	rewrite(t, path, fileYAML("10/s", ":8080"))
	if err := lv.Reload(); err != nil {
		t.Fatal(err)
	}
	if changes != 0 || lv.Load() != before {
		t.Fatalf("the same file reloaded: want no change told and the same config in force, got %d changes", changes)
	}
	rewrite(t, path, fileYAML("5/s", ":8080"))
	if err := lv.Reload(); err != nil {
		t.Fatal(err)
	}
	if changes != 1 || lv.Load().Account("acme").Rate.PerSecond != 5 {
		t.Fatalf("a new rate: want one change told and 5/s in force, got %d changes and %v", changes, lv.Load().Account("acme").Rate.PerSecond)
	}
}

// A file that reloads valid alone but not with what keeps its old value
// (a kind of the start routed to a target the file removed) is refused.
func TestReloadRefusesWhatDoesNotFitTheStart(t *testing.T) {
	t.Parallel()
	cfg, path := load(t, fileYAML("10/s", ":8080"))
	lv := live.New(cfg, live.Options{Path: path})
	y := strings.Replace(fileYAML("10/s", ":8080"), "erp:", "crm:", 1)
	y = strings.Replace(y, "{target: erp}", "{target: crm}", 1)
	rewrite(t, path, y)
	err := lv.Reload()
	if !errors.Is(err, config.ErrInvalidConfig) || !strings.Contains(err.Error(), "kinds.order.create") {
		t.Fatalf("want the reload refused naming kinds.order.create (kinds keep their start), got %v", err)
	}
	if _, ok := lv.Load().Target("erp"); !ok {
		t.Fatal("a refused reload removed a target")
	}
}

// The file wins over the bucket; a stored account whose key id another
// has, or whose key is the file's (a key or an operator's), is left out,
// and its events wait (LeftOut); the others apply.
func TestStoredAccountsMerge(t *testing.T) {
	t.Parallel()
	cfg, _ := load(t, strings.Replace(fileYAML("10/s", ":8080"), "auth: {disabled: true}", `auth:
  keys:
    acme-main: {account: acme, scopes: [submit], hash: "sha256:`+strings.Repeat("a", 64)+`"}
  operators:
    zed: {hash: "sha256:`+strings.Repeat("d", 64)+`"}`, 1))
	parse := func(name, def string) config.StoredAccount {
		sa, err := config.ParseStoredAccount(name, []byte(def))
		if err != nil {
			t.Fatal(err)
		}
		return sa
	}
	m, bad := cfg.With(map[string]config.StoredAccount{
		"acme":  parse("acme", `{"rate":"1/s"}`),
		"newco": parse("newco", `{"rate":"2/s","keys":{"newco-main":{"scopes":["submit"],"hash":"sha256:`+strings.Repeat("b", 64)+`"}}}`),
		"clash": parse("clash", `{"keys":{"acme-main":{"scopes":["submit"],"hash":"sha256:`+strings.Repeat("c", 64)+`"}}}`),
		"bad":   parse("bad", `{"targets":{"nowhere":{}}}`),
		"zeds":  parse("zeds", `{"keys":{"zeds-main":{"scopes":["submit"],"hash":"sha256:`+strings.Repeat("d", 64)+`"}}}`),
		"acmes": parse("acmes", `{"keys":{"zz-acme":{"scopes":["submit"],"hash":"sha256:`+strings.Repeat("a", 64)+`"}}}`),
	})
	if m.Account("acme").Rate.PerSecond != 10 || m.Account("newco").Rate.PerSecond != 2 || m.Auth.Keys["newco-main"].Account != "newco" {
		t.Fatalf("want acme from the file and newco from the bucket, got acme %v newco %v keys %v", m.Account("acme").Rate, m.Account("newco").Rate, m.Auth.Keys)
	}
	for name, key := range map[string]string{"acme": "accounts.acme", "clash": "auth.keys.acme-main", "bad": "accounts.bad.targets.nowhere", "zeds": "auth.keys.zeds-main.hash", "acmes": "auth.keys.zz-acme.hash"} {
		if err := bad[name]; err == nil || !errors.Is(err, config.ErrInvalidConfig) || !strings.Contains(err.Error(), key) {
			t.Errorf("%s: want it left out naming %s, got %v", name, key, err)
		}
	}
	if _, ok := m.Accounts["clash"]; ok || len(bad) != 5 {
		t.Fatalf("want exactly acme, clash, bad, zeds and acmes left out, got %v", bad)
	}
	out := m.Leaving(bad).LeftOut
	if len(out) != 4 || out["acme"] != "" || out["clash"] == "" {
		t.Fatalf("want the left-out accounts the file does not declare to wait, got %v", out)
	}
	if _, ok := cfg.Accounts["newco"]; ok {
		t.Fatal("With changed the config it was called on")
	}
}

// Two processes follow one bucket: an account one sets is in force in
// the other; its header is sealed in the bucket, kept by a "[redacted]"
// resend, and cannot be opened as another account's.
func TestBucketSharedAndSealed(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	_, js := srv.Conn(t)
	cfg, _ := load(t, fileYAML("10/s", ":8080"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, b := live.New(cfg, live.Options{}), live.New(cfg, live.Options{})
	for _, lv := range []*live.Config{a, b} {
		if err := lv.Watch(ctx, js, streams.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	def := json.RawMessage(`{"rate":"3/s","targets":{"erp":{"headers":{"Authorization":"Bearer n3wco"}}}}`)
	if _, err := a.Set(ctx, "newco", def); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 5*time.Second, func() bool { return b.Load().Account("newco").Rate.PerSecond == 3 }, "newco in force in the other process")
	if h := b.Load().TargetFor("newco", "erp").Headers; h["Authorization"].Reveal() != "Bearer n3wco" || h["X-Team"].Reveal() != "core" {
		t.Fatalf("want newco's header merged over the target's, got %v", h)
	}
	if _, err := a.Set(ctx, "newco", json.RawMessage(`{"rate":"4/s","targets":{"erp":{"headers":{"Authorization":"[redacted]"}}}}`)); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 5*time.Second, func() bool { return b.Load().Account("newco").Rate.PerSecond == 4 }, "the new rate")
	if got := b.Load().TargetFor("newco", "erp").Headers["Authorization"].Reveal(); got != "Bearer n3wco" {
		t.Fatalf("[redacted] must keep the header, got %q", got)
	}
	kv, err := js.KeyValue(ctx, live.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, "newco")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(e.Value()), "n3wco") {
		t.Fatalf("the bucket holds the header in clear: %s", e.Value())
	}
	// The sealed value copied under another account does not open.
	if _, err := kv.Put(ctx, "thief", e.Value()); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 5*time.Second, func() bool { return b.Status().StoredErrors["thief"] != "" }, "the copied account left out")
	if _, ok := b.Load().Accounts["thief"]; ok {
		t.Fatal("a sealed value opened under another account")
	}
	if err := a.Remove(ctx, "newco"); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 5*time.Second, func() bool { _, ok := b.Load().Accounts["newco"]; return !ok }, "newco removed in the other process")
	if err := a.Remove(ctx, "newco"); !errors.Is(err, live.ErrNotStored) {
		t.Fatalf("removing it again: want ErrNotStored, got %v", err)
	}
}

// A definition whose key clashes with a stored account in force, by id
// or by hash, is refused, whichever name or key id sorts first: taken, it
// would leave the other out (With blames the later), and whoever holds
// the shared key would authenticate as the newcomer.
func TestBucketRefusesADefinitionThatLeavesAnotherOut(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	_, js := srv.Conn(t)
	cfg, _ := load(t, strings.Replace(fileYAML("10/s", ":8080"), "auth: {disabled: true}", `auth:
  keys:
    acme-main: {account: acme, scopes: [submit], hash: "sha256:`+strings.Repeat("a", 64)+`"}`, 1))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lv := live.New(cfg, live.Options{})
	if err := lv.Watch(ctx, js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	key := func(id, hexDigit string) json.RawMessage {
		return json.RawMessage(`{"keys":{"` + id + `":{"scopes":["submit","read"],"hash":"sha256:` + strings.Repeat(hexDigit, 64) + `"}}}`)
	}
	if _, err := lv.Set(ctx, "zzz", key("k1", "b")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		def  json.RawMessage
		want string
	}{
		{"zzz's hash under an id that sorts first", key("0key", "b"), "auth.keys.k1.hash: is the same key as the stored account aaa's auth.keys.0key"},
		{"zzz's key id", key("k1", "c"), "auth.keys.k1: is already a key id of the stored account aaa"},
	} {
		_, err := lv.Set(ctx, "aaa", c.def)
		if err == nil || !errors.Is(err, config.ErrInvalidConfig) || !strings.Contains(err.Error(), "would leave the stored account zzz out") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: want it refused, saying it would leave zzz out (%s), got %v", c.name, c.want, err)
		}
		if k, ok := lv.Load().Auth.Keys["k1"]; !ok || k.Account != "zzz" || lv.Status().StoredErrors["zzz"] != "" {
			t.Fatalf("%s: want zzz's key k1 still in force, got %+v (%v)", c.name, k, lv.Status().StoredErrors)
		}
	}
	if _, err := lv.Set(ctx, "aaa", key("k2", "c")); err != nil {
		t.Fatalf("a key of its own: want it taken, got %v", err)
	}
}

// Without sealing_key the bucket takes no header values: setting one is
// refused naming sealing_key, and nothing is stored; limits and keys
// alone are taken.
func TestBucketWithoutSealingKey(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	_, js := srv.Conn(t)
	cfg, _ := load(t, strings.Replace(fileYAML("10/s", ":8080"), `sealing_key: "`+sealingKey+`"`, "", 1))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lv := live.New(cfg, live.Options{})
	if err := lv.Watch(ctx, js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	_, err := lv.Set(ctx, "newco", json.RawMessage(`{"targets":{"erp":{"headers":{"Authorization":"Bearer x"}}}}`))
	if !errors.Is(err, config.ErrInvalidConfig) || !strings.Contains(err.Error(), "sealing_key") {
		t.Fatalf("a header without sealing_key: want ErrInvalidConfig naming sealing_key, got %v", err)
	}
	if rep, _ := lv.List(""); len(rep.Items) != 0 {
		t.Fatalf("a refused set stored %+v", rep.Items)
	}
	if _, err := lv.Set(ctx, "newco", json.RawMessage(`{"rate":"2/s"}`)); err != nil {
		t.Fatalf("limits alone need no sealing_key: %v", err)
	}
	if got := lv.Load().Account("newco").Rate.PerSecond; got != 2 {
		t.Fatalf("want newco at 2/s in force, got %v", got)
	}
}
