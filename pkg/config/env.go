package config

import (
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// EnvPrefix starts the name of every environment variable that overrides
// a configuration value (TENAZ_NATS_URL, TENAZ_TARGETS_ERP_URL, …).
const EnvPrefix = "TENAZ"

// envFallbacks are conventional variables honoured when their TENAZ_
// twin is unset.
var envFallbacks = map[string]string{
	"TENAZ_NATS_URL": "NATS_URL",
	// The nats CLI's variables, so one environment serves both.
	"TENAZ_NATS_CREDS":          "NATS_CREDS",
	"TENAZ_NATS_USER":           "NATS_USER",
	"TENAZ_NATS_PASSWORD":       "NATS_PASSWORD",
	"TENAZ_NATS_NKEY_SEED_FILE": "NATS_NKEY",
	"TENAZ_NATS_TLS_CA":         "NATS_CA",
	"TENAZ_NATS_TLS_CERT":       "NATS_CERT",
	"TENAZ_NATS_TLS_KEY":        "NATS_KEY",
	"TENAZ_LOG_FORMAT":          "LOG_FORMAT",
	"TENAZ_LOG_LEVEL":           "LOG_LEVEL",
}

// expandEnv replaces every ${NAME} in s with the value of NAME; "$${"
// writes a literal "${" and any other "$" is kept as is. NAME is a letter
// or underscore followed by letters, digits or underscores. An unset
// variable is an error (a variable set to "" is not), and so is any
// ${NAME} when getenv is nil: a value that is never taken from the
// environment (a stored account's).
func expandEnv(s string, getenv func(string) (string, bool)) (out string, changed bool, err error) {
	if !strings.Contains(s, "${") {
		return s, false, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		switch {
		case strings.HasPrefix(s[i:], "$${"):
			b.WriteString("${")
			i += 3
		case strings.HasPrefix(s[i:], "${"):
			end := strings.IndexByte(s[i+2:], '}')
			if end < 0 {
				return "", false, fmt.Errorf(`"${" without a closing "}" (write "$${" for a literal "${")`)
			}
			name := s[i+2 : i+2+end]
			if !envName(name) {
				if len(name) > 40 {
					name = name[:40] + "…"
				}
				return "", false, fmt.Errorf(`${%s}: invalid variable name (write "$${" for a literal "${")`, name)
			}
			if getenv == nil {
				return "", false, fmt.Errorf(`${%s}: a stored account's values are stored as they are, never read from the environment (write "$${" for a literal "${")`, name)
			}
			v, ok := getenv(name)
			if !ok {
				return "", false, fmt.Errorf("${%s} is not set", name)
			}
			b.WriteString(v)
			i += 3 + end
		default:
			b.WriteByte(s[i])
			i++
		}
	}
	return b.String(), true, nil
}

func envName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// EnvName returns the name of the environment variable that overrides the
// value at a key path given as its keys, e.g. EnvName("targets", "erp",
// "url") is "TENAZ_TARGETS_ERP_URL". Each key is upper-cased and every
// character other than A-Z, 0-9 and _ becomes _ ("order.create" gives
// ORDER_CREATE); the "*" account is spelled DEFAULT.
func EnvName(keys ...string) string {
	var b strings.Builder
	b.WriteString(EnvPrefix)
	for _, k := range keys {
		b.WriteByte('_')
		b.WriteString(spell(k))
	}
	return b.String()
}

func spell(key string) string {
	if key == "*" {
		return "DEFAULT"
	}
	b := []byte(strings.ToUpper(key))
	for i, c := range b {
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			b[i] = '_'
		}
	}
	return string(b)
}

// override is one value that one environment variable may set.
type override struct {
	env  string
	path string
	keys []int // lengths of the spelled map keys on the path, outermost first
	typ  reflect.Type
	set  func(reflect.Value) // stores a decoded value (and commits enclosing copies)
}

// applyEnv applies TENAZ_… overrides to cfg. It cannot list the
// environment, so it lists every value the file could hold (every field,
// and the fields of every existing map entry) and looks up each one's
// variable.
func applyEnv(cfg *Config, getenv func(string) (string, bool)) error {
	var all []override
	collect(reflect.ValueOf(cfg).Elem(), EnvPrefix, "", nil, func() {}, &all)
	groups := map[string][]override{}
	for _, o := range all {
		groups[o.env] = append(groups[o.env], o)
	}
	names := make([]string, 0, len(groups))
	for name := range groups {
		names = append(names, name)
	}
	sort.Strings(names)
	var errs []error
	for _, name := range names {
		used := name
		val, ok := getenv(name)
		if !ok {
			if fb, has := envFallbacks[name]; has {
				used = fb
				val, ok = getenv(fb)
			}
		}
		if !ok {
			continue
		}
		cands := groups[name]
		// The longest map key wins: with targets "erp" and "erp_poll",
		// TENAZ_TARGETS_ERP_POLL_URL is targets.erp_poll.url, not
		// targets.erp.poll.url.
		sort.SliceStable(cands, func(i, j int) bool { return slices.Compare(cands[i].keys, cands[j].keys) > 0 })
		if len(cands) > 1 && slices.Equal(cands[0].keys, cands[1].keys) {
			errs = append(errs, &KeyError{Key: cands[0].path, Msg: fmt.Sprintf("%s is ambiguous: it names both %s and %s; rename one of the keys", used, cands[0].path, cands[1].path)})
			continue
		}
		o := cands[0]
		v, err := decodeEnv(val, o.typ)
		if err != nil {
			errs = append(errs, &KeyError{Key: o.path, Msg: fmt.Sprintf("from %s: %v", used, err)})
			continue
		}
		if k := v.Kind(); (k == reflect.Float64 || k == reflect.Float32 || k == reflect.Int) && v.IsZero() {
			cfg.explicitZero[o.path] = true
		}
		o.set(v)
	}
	return joinSorted(errs)
}

// decodeEnv reads an environment value as a value of leaf type t. Text is
// taken literally (no ${…} expansion); a []string is a comma-separated list.
func decodeEnv(s string, t reflect.Type) (reflect.Value, error) {
	if t.Kind() == reflect.Slice {
		out := reflect.MakeSlice(t, 0, 0)
		for _, part := range strings.Split(s, ",") {
			if part = strings.TrimSpace(part); part != "" {
				out = reflect.Append(out, reflect.ValueOf(part).Convert(t.Elem()))
			}
		}
		if out.Len() == 0 {
			return reflect.Zero(t), nil
		}
		return out, nil
	}
	if t.Kind() == reflect.String {
		return reflect.ValueOf(s).Convert(t), nil
	}
	n := &yaml.Node{Kind: yaml.ScalarNode, Value: strings.TrimSpace(s)}
	if n.Value == "" {
		return reflect.Zero(t), nil
	}
	return decodeScalar(n, t)
}

// collect lists the overrides for every leaf under v (addressable), whose
// variable name starts with env and key path with path. commit makes a
// change to v take effect (it is needed when v is a copy of a map entry).
func collect(v reflect.Value, env, path string, keys []int, commit func(), out *[]override) {
	t := v.Type()
	if isLeaf(t) || t.Kind() == reflect.Slice && isLeaf(t.Elem()) && t.Elem().Kind() == reflect.String {
		*out = append(*out, override{env: env, path: path, keys: keys, typ: t, set: func(nv reflect.Value) {
			v.Set(nv)
			commit()
		}})
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		for _, f := range fieldsOf(t) {
			collect(v.FieldByIndex(f.index), env+"_"+spell(f.name), join(path, f.name), keys, commit, out)
		}
	case reflect.Pointer:
		if t.Elem().Kind() != reflect.Struct {
			return
		}
		if !v.IsNil() {
			collect(v.Elem(), env, path, keys, commit, out)
			return
		}
		// A nil *Poll or *Stage comes into being when one of its values is set.
		tmp := reflect.New(t.Elem())
		collect(tmp.Elem(), env, path, keys, func() {
			v.Set(tmp)
			commit()
		}, out)
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			return
		}
		mapKeys := make([]string, 0, v.Len())
		for _, k := range v.MapKeys() {
			mapKeys = append(mapKeys, k.String())
		}
		// The "*" account may be overridden even when the file has none.
		if t == reflect.TypeFor[map[string]Account]() && !slices.Contains(mapKeys, "*") {
			mapKeys = append(mapKeys, "*")
		}
		sort.Strings(mapKeys)
		for _, key := range mapKeys {
			kv := reflect.ValueOf(key).Convert(t.Key())
			tmp := reflect.New(t.Elem()).Elem()
			if !v.IsNil() {
				if cur := v.MapIndex(kv); cur.IsValid() {
					tmp.Set(cur)
				}
			}
			sub := append(slices.Clip(keys), len(spell(key)))
			collect(tmp, env+"_"+spell(key), join(path, key), sub, func() {
				if v.IsNil() {
					v.Set(reflect.MakeMap(t))
				}
				v.SetMapIndex(kv, tmp)
				commit()
			}, out)
		}
	}
}
