package config

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// maxNodes bounds the node tree once aliases are expanded (a guard
// against "billion laughs" documents).
const maxNodes = 100_000

var (
	configType      = reflect.TypeFor[Config]()
	kindType        = reflect.TypeFor[Kind]()
	unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()
)

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func index(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

func nullNode() *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null"} }

// normalizer copies a node tree with every alias expanded and every merge
// key (<<) applied, so that each later step sees each value exactly once,
// at the key path where it takes effect.
type normalizer struct {
	budget    int
	exhausted bool
	expanding map[*yaml.Node]bool
	errs      []error
}

func (z *normalizer) fail(n *yaml.Node, path, format string, args ...any) {
	z.errs = append(z.errs, &KeyError{Key: path, Line: n.Line, Msg: fmt.Sprintf(format, args...)})
}

func (z *normalizer) node(n *yaml.Node, path string) *yaml.Node {
	if z.budget <= 0 {
		if !z.exhausted {
			z.exhausted = true
			z.fail(n, path, "the document has more than %d values once aliases are expanded", maxNodes)
		}
		return nullNode()
	}
	z.budget--
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return nullNode()
		}
		return z.node(n.Content[0], path)
	case yaml.AliasNode:
		target := n.Alias
		if target == nil {
			z.fail(n, path, "unknown alias *%s", n.Value)
			return nullNode()
		}
		if z.expanding[target] {
			z.fail(n, path, "alias *%s refers to a value that contains it", n.Value)
			return nullNode()
		}
		z.expanding[target] = true
		out := z.node(target, path)
		delete(z.expanding, target)
		return out
	case yaml.ScalarNode:
		c := *n
		c.Anchor, c.Alias, c.Content = "", nil, nil
		return &c
	case yaml.SequenceNode:
		c := *n
		c.Anchor, c.Alias, c.Content = "", nil, make([]*yaml.Node, 0, len(n.Content))
		for i, item := range n.Content {
			c.Content = append(c.Content, z.node(item, index(path, i)))
		}
		return &c
	case yaml.MappingNode:
		return z.mapping(n, path)
	}
	z.fail(n, path, "unsupported YAML node")
	return nullNode()
}

func (z *normalizer) mapping(n *yaml.Node, path string) *yaml.Node {
	c := *n
	c.Anchor, c.Alias, c.Content = "", nil, make([]*yaml.Node, 0, len(n.Content))
	var merged []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			src := z.node(v, path)
			switch src.Kind {
			case yaml.MappingNode:
				merged = append(merged, src.Content...)
			case yaml.SequenceNode:
				// Earlier mappings of the list win over later ones.
				for _, item := range src.Content {
					if item.Kind != yaml.MappingNode {
						z.fail(v, join(path, "<<"), "can only merge mappings, got %s", describe(item))
						continue
					}
					merged = append(merged, item.Content...)
				}
			default:
				z.fail(v, join(path, "<<"), "can only merge a mapping or a list of mappings, got %s", describe(src))
			}
			continue
		}
		key := k.Value
		c.Content = append(c.Content, z.node(k, path), z.node(v, join(path, key)))
	}
	if len(merged) > 0 {
		// Keys written out win over merged ones; the first merged wins.
		present := map[string]bool{}
		for i := 0; i+1 < len(c.Content); i += 2 {
			present[c.Content[i].Value] = true
		}
		for i := 0; i+1 < len(merged); i += 2 {
			k := merged[i]
			if k.Kind != yaml.ScalarNode || present[k.Value] {
				continue
			}
			present[k.Value] = true
			c.Content = append(c.Content, k, merged[i+1])
		}
	}
	return &c
}

// substituter replaces ${NAME} in every scalar value (not in keys).
type substituter struct {
	getenv func(string) (string, bool)
	done   map[*yaml.Node]bool // scalars whose text came (partly) from the environment
	failed map[*yaml.Node]bool // scalars with a bad reference (already reported)
	errs   []error
}

func (s *substituter) walk(n *yaml.Node, path string) {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			s.walk(n.Content[i+1], join(path, n.Content[i].Value))
		}
	case yaml.SequenceNode:
		for i, item := range n.Content {
			s.walk(item, index(path, i))
		}
	case yaml.ScalarNode:
		if !strings.Contains(n.Value, "$") {
			return
		}
		v, changed, err := expandEnv(n.Value, s.getenv)
		if err != nil {
			s.errs = append(s.errs, &KeyError{Key: path, Line: n.Line, Msg: err.Error()})
			s.failed[n] = true
			return
		}
		if changed && v == "" && emptyWeakens[lastKey(path)] {
			s.errs = append(s.errs, &KeyError{Key: path, Line: n.Line, Msg: fmt.Sprintf("%s is set but empty: this key cannot be empty (leave it out for none)", n.Value)})
			s.failed[n] = true
			return
		}
		if changed {
			n.Value = v
			s.done[n] = true
		}
	}
}

// emptyWeakens are the keys whose empty value quietly weakens a
// boundary, where an error would not: an account's callback_secret left
// empty falls back to the target's, shared by every account; an empty
// signing_secret signs nothing; an empty sealing_key seals nothing. A
// reference to a variable set but empty (a Kubernetes Secret's key with
// no value) is refused for them: left out, on purpose, they say so.
var emptyWeakens = map[string]bool{"callback_secret": true, "signing_secret": true, "sealing_key": true}

// lastKey is path's last key.
func lastKey(path string) string {
	if i := strings.LastIndexByte(path, '.'); i >= 0 {
		return path[i+1:]
	}
	return path
}

// yfield is one YAML key of a struct type.
type yfield struct {
	name  string
	index []int
	typ   reflect.Type
}

// fieldsOf lists the YAML keys of struct type t, following ",inline".
func fieldsOf(t reflect.Type) []yfield {
	var out []yfield
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		if strings.Contains(","+opts+",", ",inline,") && f.Type.Kind() == reflect.Struct {
			for _, sub := range fieldsOf(f.Type) {
				sub.index = append([]int{i}, sub.index...)
				out = append(out, sub)
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out = append(out, yfield{name: name, index: []int{i}, typ: f.Type})
	}
	return out
}

// isLeaf reports whether values of t are written as one scalar.
func isLeaf(t reflect.Type) bool {
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		return true
	}
	switch t.Kind() {
	case reflect.String, reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return true
	}
	return false
}

// want describes the scalar a leaf type expects.
func want(t reflect.Type) string {
	switch t {
	case reflect.TypeFor[Duration]():
		return `a duration such as "30s"`
	case reflect.TypeFor[Rate]():
		return `a rate such as "50/s"`
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	}
	return "a string"
}

// walker checks a normalized node tree against a Go type: every key must
// be known, every value of the right shape and type. It reports each
// problem with its key path, which yaml's own strict mode does not.
type walker struct {
	substituted map[*yaml.Node]bool
	failed      map[*yaml.Node]bool // values whose ${…} could not be substituted: not checked again
	zeros       map[string]bool     // number keys explicitly written as 0
	errs        []error
}

func (w *walker) fail(n *yaml.Node, path, format string, args ...any) {
	w.errs = append(w.errs, &KeyError{Key: path, Line: n.Line, Msg: fmt.Sprintf(format, args...)})
}

func (w *walker) walk(n *yaml.Node, t reflect.Type, path string) {
	if w.substituted[n] && isLeaf(t) {
		// A value from the environment is read by the type it lands in:
		// text for strings, re-resolved (even if quoted) for numbers.
		if t.Kind() == reflect.String {
			n.Tag = "!!str"
		} else if n.Style&yaml.TaggedStyle == 0 {
			n.Tag = ""
			n.Style &^= yaml.SingleQuotedStyle | yaml.DoubleQuotedStyle | yaml.LiteralStyle | yaml.FoldedStyle
		}
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" || w.failed[n] {
		return // null is the zero value of anything
	}
	if isLeaf(t) {
		w.leaf(n, t, path)
		return
	}
	switch t.Kind() {
	case reflect.Pointer:
		w.walk(n, t.Elem(), path)
	case reflect.Struct:
		w.structure(n, t, path)
	case reflect.Map:
		w.mapping(n, t, path)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			w.fail(n, path, "expected a list, got %s", describe(n))
			return
		}
		for i, item := range n.Content {
			w.walk(item, t.Elem(), index(path, i))
		}
	default:
		w.fail(n, path, "cannot be set from YAML")
	}
}

// key returns the text of a mapping key, reporting keys that are not
// plain strings.
func (w *walker) key(k *yaml.Node, path string) (string, bool) {
	if k.Kind != yaml.ScalarNode {
		w.fail(k, path, "keys must be strings, got %s", describe(k))
		return "", false
	}
	if k.ShortTag() == "!!null" {
		w.fail(k, join(path, k.Value), "keys must be strings, got null")
		return "", false
	}
	return k.Value, true
}

func (w *walker) structure(n *yaml.Node, t reflect.Type, path string) {
	if n.Kind != yaml.MappingNode {
		w.fail(n, path, "expected a mapping of keys, got %s", describe(n))
		return
	}
	fields := fieldsOf(t)
	byName := make(map[string]yfield, len(fields))
	names := make([]string, 0, len(fields))
	for _, f := range fields {
		byName[f.name] = f
		names = append(names, f.name)
	}
	w.entries(n, path, func(k, v *yaml.Node, key, p string) {
		f, ok := byName[key]
		if !ok {
			msg := "unknown key"
			if s := suggest(key, names); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
			w.fail(k, p, "%s", msg)
			return
		}
		if (t == kindType && key == "schema" || t == repeatType && key == "payload") && (v.Kind == yaml.MappingNode || v.Kind == yaml.SequenceNode) {
			if err := inlineSchema(v); err != nil {
				w.fail(v, p, "%v", err)
			}
			return
		}
		w.walk(v, f.typ, p)
	})
}

// entries calls each for every entry of the mapping n whose key is a
// string not seen before in n (the others fail), with the key's path.
func (w *walker) entries(n *yaml.Node, path string, each func(k, v *yaml.Node, key, p string)) {
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		key, ok := w.key(k, path)
		if !ok {
			continue
		}
		p := join(path, key)
		if line, dup := seen[key]; dup {
			w.fail(k, p, "duplicate key (first on line %d)", line)
			continue
		}
		seen[key] = k.Line
		each(k, v, key, p)
	}
}

func (w *walker) mapping(n *yaml.Node, t reflect.Type, path string) {
	if n.Kind != yaml.MappingNode {
		w.fail(n, path, "expected a mapping, got %s", describe(n))
		return
	}
	if t.Key().Kind() != reflect.String {
		w.fail(n, path, "cannot be set from YAML")
		return
	}
	w.entries(n, path, func(_, v *yaml.Node, _, p string) { w.walk(v, t.Elem(), p) })
}

func (w *walker) leaf(n *yaml.Node, t reflect.Type, path string) {
	if n.Kind != yaml.ScalarNode {
		w.fail(n, path, "expected %s, got %s", want(t), describe(n))
		return
	}
	v, err := decodeScalar(n, t)
	if err != nil {
		w.fail(n, path, "%v", err)
		return
	}
	if k := v.Kind(); (k == reflect.Float64 || k == reflect.Float32 || k == reflect.Int) && v.IsZero() {
		w.zeros[path] = true
	}
}

// decodeScalar decodes one scalar node into a new value of type t, with
// an error message fit for a person.
func decodeScalar(n *yaml.Node, t reflect.Type) (reflect.Value, error) {
	p := reflect.New(t)
	if err := n.Decode(p.Interface()); err != nil {
		if reflect.PointerTo(t).Implements(unmarshalerType) {
			return reflect.Value{}, err
		}
		return reflect.Value{}, fmt.Errorf("expected %s, got %s", want(t), describe(n))
	}
	v := p.Elem()
	if k := v.Kind(); k == reflect.Float64 || k == reflect.Float32 {
		if f := v.Float(); math.IsNaN(f) || math.IsInf(f, 0) {
			return reflect.Value{}, fmt.Errorf("expected a finite number, got %s", describe(n))
		}
	}
	return v, nil
}

// inlineSchema turns a JSON Schema written as YAML (a mapping) into its
// JSON text, in place, so that Kind.Schema stays a string.
func inlineSchema(n *yaml.Node) error {
	var doc any
	if err := n.Decode(&doc); err != nil {
		return fmt.Errorf("schema: %v", err)
	}
	js, err := json.Marshal(jsonable(doc))
	if err != nil {
		return fmt.Errorf("schema cannot be written as JSON: %v", err)
	}
	*n = yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: string(js), Line: n.Line, Column: n.Column}
	return nil
}

// jsonable converts what yaml decodes into "any" to what encoding/json
// accepts (maps with non-string keys).
func jsonable(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			v[k] = jsonable(e)
		}
		return v
	case map[any]any:
		m := make(map[string]any, len(v))
		for k, e := range v {
			m[fmt.Sprint(k)] = jsonable(e)
		}
		return m
	case []any:
		for i, e := range v {
			v[i] = jsonable(e)
		}
		return v
	}
	return v
}

// suggest returns the candidate closest to s when it is a likely typo.
func suggest(s string, candidates []string) string {
	best, bestD := "", 3
	for _, c := range candidates {
		if d := distance(s, c); d < bestD && d < len(c) {
			best, bestD = c, d
		}
	}
	return best
}

// distance is the Levenshtein distance of a and b (bounded inputs: keys).
func distance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
