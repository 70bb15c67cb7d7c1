package event_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"pgregory.net/rapid"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/names"
)

// A generated JSON value: nil, bool, json.Number (a literal, kept as
// written), string, []any or map[string]any.
func genValue(t *rapid.T, depth int) any {
	kinds := []string{"null", "bool", "number", "string"}
	if depth > 0 {
		kinds = append(kinds, "array", "object", "object")
	}
	switch rapid.SampledFrom(kinds).Draw(t, "kind") {
	case "null":
		return nil
	case "bool":
		return rapid.Bool().Draw(t, "bool")
	case "number":
		return json.Number(rapid.StringMatching(`-?(0|[1-9][0-9]{0,20})(\.[0-9]{1,6})?([eE][+-]?[0-9]{1,3})?`).Draw(t, "number"))
	case "string":
		return rapid.String().Draw(t, "string")
	case "array":
		n := rapid.IntRange(0, 4).Draw(t, "len")
		a := make([]any, n)
		for i := range a {
			a[i] = genValue(t, depth-1)
		}
		return a
	}
	n := rapid.IntRange(0, 5).Draw(t, "len")
	m := make(map[string]any, n)
	for range n {
		m[rapid.String().Draw(t, "key")] = genValue(t, depth-1)
	}
	return m
}

// genPayload is a generated payload: any JSON value but a bare null,
// which every way in refuses (event.CheckPayload).
func genPayload(t *rapid.T, depth int) any {
	for {
		if v := genValue(t, depth); v != nil {
			return v
		}
	}
}

// encode writes v as JSON, drawing the object key order, the whitespace
// and how each character of each string is escaped, so two calls give two
// different encodings of the same value.
func encode(t *rapid.T, b *strings.Builder, v any) {
	ws := func() {
		b.WriteString(rapid.SampledFrom([]string{"", "", " ", "\n", "\t", "  \r\n"}).Draw(t, "ws"))
	}
	ws()
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		fmt.Fprint(b, x)
	case json.Number:
		b.WriteString(string(x))
	case string:
		encodeString(t, b, x)
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			encode(t, b, e)
		}
		ws()
		b.WriteByte(']')
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		keys = rapid.Permutation(keys).Draw(t, "order")
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			ws()
			encodeString(t, b, k)
			ws()
			b.WriteByte(':')
			encode(t, b, x[k])
		}
		ws()
		b.WriteByte('}')
	}
	ws()
}

func encodeString(t *rapid.T, b *strings.Builder, s string) {
	b.WriteByte('"')
	for _, r := range s {
		must := r < 0x20 || r == '"' || r == '\\'
		if !must && !rapid.Bool().Draw(t, "escape") {
			b.WriteRune(r)
			continue
		}
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n' && rapid.Bool().Draw(t, "short"):
			b.WriteString(`\n`)
		case r > 0xffff:
			r1, r2 := utf16Pair(r)
			fmt.Fprintf(b, `\u%04x\u%04X`, r1, r2)
		default:
			fmt.Fprintf(b, `\u%04x`, r)
		}
	}
	b.WriteByte('"')
}

func utf16Pair(r rune) (rune, rune) {
	r -= 0x10000
	return 0xd800 + (r>>10)&0x3ff, 0xdc00 + r&0x3ff
}

func genEncoding(t *rapid.T, v any) string {
	var b strings.Builder
	encode(t, &b, v)
	return b.String()
}

func newDerived(t *rapid.T, kind, entity, payload string) event.Envelope {
	env, err := event.New(event.Fields{Account: "acme", Kind: kind, EntityID: entity}, []byte(payload), "", "", now)
	if err != nil {
		t.Fatalf("New(%q, %q, %s): want accepted, got %v", kind, entity, payload, err)
	}
	return env
}

// Two encodings of one value (keys reordered, whitespace, escapes) derive
// the same idempotency key and id.
func TestDerivedKeyIgnoresEncoding(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		v := genPayload(t, 3)
		a, b := genEncoding(t, v), genEncoding(t, v)
		if !json.Valid([]byte(a)) || !json.Valid([]byte(b)) {
			t.Fatalf("generator bug: invalid JSON %q / %q", a, b)
		}
		ea, eb := newDerived(t, "order.create", "o-1", a), newDerived(t, "order.create", "o-1", b)
		if ea.IdempotencyKey != eb.IdempotencyKey || ea.ID != eb.ID {
			ca, _ := event.Canonical([]byte(a))
			cb, _ := event.Canonical([]byte(b))
			t.Fatalf("same value, two keys:\n%s\n-> %s\n%s\n-> %s", a, ca, b, cb)
		}
		// Canonical is a fixed point and valid JSON.
		c, err := event.Canonical([]byte(a))
		if err != nil || !json.Valid(c) || !utf8.Valid(c) {
			t.Fatalf("Canonical(%s): want valid JSON, got %q (%v)", a, c, err)
		}
		cc, err := event.Canonical(c)
		if err != nil || string(cc) != string(c) {
			t.Fatalf("Canonical not idempotent: %s -> %s (%v)", c, cc, err)
		}
	})
}

// Different values, kinds or entities derive different keys.
func TestDerivedKeySeparates(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		v1, v2 := genPayload(t, 2), genPayload(t, 2)
		kind1 := rapid.SampledFrom([]string{"order.create", "order.update"}).Draw(t, "kind1")
		kind2 := rapid.SampledFrom([]string{"order.create", "order.update"}).Draw(t, "kind2")
		ent1 := rapid.SampledFrom([]string{"", "o-1", "o-2"}).Draw(t, "entity1")
		ent2 := rapid.SampledFrom([]string{"", "o-1", "o-2"}).Draw(t, "entity2")
		e1 := newDerived(t, kind1, ent1, genEncoding(t, v1))
		e2 := newDerived(t, kind2, ent2, genEncoding(t, v2))
		same := reflect.DeepEqual(v1, v2) && kind1 == kind2 && ent1 == ent2
		if same != (e1.IdempotencyKey == e2.IdempotencyKey) {
			t.Fatalf("values equal=%v kinds %q/%q entities %q/%q: want keys equal=%v, got %q and %q",
				reflect.DeepEqual(v1, v2), kind1, kind2, ent1, ent2, same, e1.IdempotencyKey, e2.IdempotencyKey)
		}
		if same != (e1.ID == e2.ID) {
			t.Fatalf("keys equal=%v but ids %s and %s", same, e1.ID, e2.ID)
		}
	})
}

// ID is a valid event id for any account and key, and separates accounts.
func TestIDProperties(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		key := rapid.String().Draw(t, "key")
		a1 := rapid.StringMatching(`[A-Za-z0-9_-]{1,64}`).Draw(t, "account1")
		a2 := rapid.StringMatching(`[A-Za-z0-9_-]{1,64}`).Draw(t, "account2")
		id1, id2 := event.ID(a1, key), event.ID(a2, key)
		if err := names.ValidateEventID(id1); err != nil {
			t.Fatalf("ID(%q, %q) = %q: %v", a1, key, id1, err)
		}
		if (a1 == a2) != (id1 == id2) {
			t.Fatalf("accounts %q and %q with key %q: ids %s and %s", a1, a2, key, id1, id2)
		}
	})
}

// Every key tenaz derives is a key a caller may give back (to send the
// submission again, or to search by it), however long its kind and
// entity id make it; a caller's own key longer than 255 bytes is not.
func TestDerivedKeysAreKeysToGiveBack(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		kind := rapid.StringMatching(`[a-z0-9_-]{1,40}(\.[a-z0-9_-]{1,40}){0,2}`).Draw(t, "kind")
		entity := rapid.StringMatching(`[!-~]{150,255}`).Draw(t, "entity") // long: the keys past 255 bytes
		key := event.DerivedKey(kind, entity, []byte(rapid.String().Draw(t, "payload")))
		if err := event.CheckKey("idempotency key", key); err != nil {
			t.Fatalf("derived key %q (%d bytes): want it taken, got %v", key, len(key), err)
		}
		env, err := event.New(event.Fields{Account: "acme", Kind: kind, IdempotencyKey: key}, []byte(`{"a":1}`), "", "", now)
		if err != nil || env.IdempotencyKey != key {
			t.Fatalf("New with the derived key %q: want it kept, got %q, %v", key, env.IdempotencyKey, err)
		}
	})
	long := strings.Repeat("k", names.MaxKeyLen+1)
	sum := strings.Repeat("ab", 32)
	for _, key := range []string{
		long,
		"d:order.create:" + long + ":" + sum, // an entity longer than one may be
		"d:order.create:" + long[:250] + ":" + strings.ToUpper(sum), // not DerivedKey's hex
		"d:order.create:" + long[:250] + ":" + sum[:62],             // not a SHA-256
		"d:order..create:" + long[:250] + ":" + sum,                 // not a kind
		"x:order.create:" + long[:250] + ":" + sum,
		"d:order.create:" + long[:249] + " :" + sum, // a space
	} {
		if err := event.CheckKey("idempotency key", key); err == nil {
			t.Errorf("%.40q… (%d bytes): want it refused", key, len(key))
		}
	}
}
