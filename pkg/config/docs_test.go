package config

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// placeholders name the map keys of each map-valued key in the docs.
var placeholders = map[string]string{
	"accounts":  "<account>",
	"targets":   "<target>",
	"kinds":     "<kind>",
	"headers":   "<header>",
	"classify":  "<status>",
	"keys":      "<id>",
	"operators": "<operator>",
	"repeats":   "<repeat>",
}

type docKey struct{ path, env string }

// docKeys lists every leaf key of t with its environment variable, map
// keys written as placeholders.
func docKeys(t reflect.Type, path, env string) []docKey {
	if isLeaf(t) || t.Kind() == reflect.Slice {
		return []docKey{{path, env}}
	}
	switch t.Kind() {
	case reflect.Pointer:
		return docKeys(t.Elem(), path, env)
	case reflect.Struct:
		var out []docKey
		for _, f := range fieldsOf(t) {
			out = append(out, docKeys(f.typ, join(path, f.name), env+"_"+spell(f.name))...)
		}
		return out
	case reflect.Map:
		last := path[strings.LastIndex(path, ".")+1:]
		ph := placeholders[last]
		return docKeys(t.Elem(), join(path, ph), env+"_"+strings.ToUpper(ph))
	}
	return nil
}

// TestDocsCoverEveryKey keeps docs/configuration.md complete: every key
// path and its environment variable must appear in it, in backquotes.
func TestDocsCoverEveryKey(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatalf("expected to read docs/configuration.md, got %v", err)
	}
	keys := docKeys(configType, "", EnvPrefix)
	if len(keys) < 50 {
		t.Fatalf("expected at least 50 keys, got %d", len(keys))
	}
	for _, k := range keys {
		for _, s := range []string{k.path, k.env} {
			if !strings.Contains(string(doc), "`"+s+"`") {
				t.Errorf("expected docs/configuration.md to mention `%s`", s)
			}
		}
	}
}

// TestDocsFullExample checks that the full example of
// docs/configuration.md is a valid configuration.
func TestDocsFullExample(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatalf("expected to read docs/configuration.md, got %v", err)
	}
	_, rest, ok := strings.Cut(string(doc), "## Full example")
	if !ok {
		t.Fatal(`expected a "## Full example" section`)
	}
	_, rest, ok = strings.Cut(rest, "```yaml\n")
	example, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("expected a yaml code block in the full example")
	}
	fallback := map[string]bool{}
	for _, fb := range envFallbacks {
		fallback[fb] = true
	}
	getenv := func(name string) (string, bool) { // every ${…} is set, no override
		v := "from-env"
		if strings.HasSuffix(name, "_SECRET") { // a Standard Webhooks secret of 32 bytes
			v = "whsec_ZG9jcy1mdWxsLWV4YW1wbGUtc2VjcmV0LTMyYnl0ZXM="
		}
		return v, !strings.HasPrefix(name, "TENAZ_") && !fallback[name]
	}
	cfg, err := Parse([]byte(example), getenv)
	if err != nil {
		t.Fatalf("expected the full example to be valid, got:\n%v", err)
	}
	if len(cfg.Kinds) != 4 || len(cfg.Targets) != 3 {
		t.Errorf("expected 4 kinds and 3 targets, got %d and %d", len(cfg.Kinds), len(cfg.Targets))
	}
}
