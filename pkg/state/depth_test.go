package state_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/state"
)

// nested is v inside n arrays.
func nested(n int, v string) []byte {
	return []byte(strings.Repeat("[", n) + v + strings.Repeat("]", n))
}

func TestDepth(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		json string
		want int
	}{
		{`1`, 0},
		{`"[[{{"`, 0},
		{`"\"[["`, 0},
		{`"\\"`, 0},
		{`[]`, 1},
		{`{}`, 1},
		{`{"a":1}`, 1},
		{`[[]]`, 2},
		{`[[],[[]],{}]`, 3},
		{`{"a":{"b":[1,{"c":"]]]"}]}}`, 4},
		{`["\\\"]]", ["\\\\"]]`, 2},
		{` [ { "x" : [ ] } ] `, 3},
		{`{"é🙂":["中"]}`, 2},
	} {
		if got := state.Depth([]byte(c.json)); got != c.want {
			t.Errorf("Depth(%s): want %d, got %d", c.json, c.want, got)
		}
	}
	if got := state.Depth(nested(state.MaxDepth+1, `{"a":"]"}`)); got != state.MaxDepth+2 {
		t.Errorf("Depth of %d arrays around an object: want %d, got %d", state.MaxDepth+1, state.MaxDepth+2, got)
	}
}

// encodingJSONLimit is encoding/json's maxNestingDepth: it refuses
// anything nested deeper.
const encodingJSONLimit = 10000

// FuzzDepth holds Depth to encoding/json on valid JSON: the value fits
// exactly encodingJSONLimit-Depth more levels around it (json.Valid of
// one level more fails), which is what the stages that wrap a payload
// (the record, the envelope, the DEAD entry) rely on; and it is the
// depth of the value encoding/json decodes. On other bytes Depth only
// does not panic.
func FuzzDepth(f *testing.F) {
	for _, s := range []string{`1`, `"x"`, `[]`, `{"a":[1,{"b":"]\"["}]}`, `["\\\\",[["\\"]]]`, `{"\u005b":"\\\u005d"}`,
		`[[[[[[[[[[]]]]]]]]]]`, `{"a":{"a":{"a":{}}}}`, `[`, `]]]`, `"unterminated [`, `[1,]`} {
		f.Add([]byte(s))
	}
	f.Add(nested(state.MaxDepth, `"deep"`))
	f.Fuzz(func(t *testing.T, b []byte) {
		d := state.Depth(b)
		if !json.Valid(b) {
			return
		}
		if d < 0 || d > encodingJSONLimit {
			t.Fatalf("Depth(%q) = %d: valid JSON nests 0 to %d levels", b, d, encodingJSONLimit)
		}
		var v any
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber() // 1e400 is valid JSON, and no float64
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("decoding %q: %v", b, err)
		}
		if got := decodedDepth(v); got != d {
			t.Fatalf("Depth(%q) = %d; the decoded value nests %d levels", b, d, got)
		}
		room := encodingJSONLimit - d
		if !json.Valid(wrap(b, room)) {
			t.Fatalf("Depth(%q) = %d, but it does not fit in %d more levels", b, d, room)
		}
		if json.Valid(wrap(b, room+1)) {
			t.Fatalf("Depth(%q) = %d, but it fits in %d more levels: it nests less deep", b, d, room+1)
		}
	})
}

// wrap is b inside n arrays.
func wrap(b []byte, n int) []byte {
	out := make([]byte, 0, len(b)+2*n)
	out = append(out, bytes.Repeat([]byte("["), n)...)
	out = append(out, b...)
	return append(out, bytes.Repeat([]byte("]"), n)...)
}

// decodedDepth is how deep a value encoding/json decoded nests.
func decodedDepth(v any) int {
	most := 0
	switch x := v.(type) {
	case []any:
		for _, e := range x {
			most = max(most, decodedDepth(e))
		}
		return most + 1
	case map[string]any:
		for _, e := range x {
			most = max(most, decodedDepth(e))
		}
		return most + 1
	}
	return 0
}

// A result nested deeper than MaxDepth is left out with a note, as an
// oversized one is; one at MaxDepth is kept.
func TestDeepResultIsNotKept(t *testing.T) {
	t.Parallel()
	at := json.RawMessage(nested(state.MaxDepth, `1`))
	r := apply(t, setup(t, state.Running), state.Action{Name: state.Succeed, Detail: "target answered 200", Result: at}, time.Minute)
	if !bytes.Equal(r.Result, at) {
		t.Fatalf("want the result nested %d levels kept, got %d bytes", state.MaxDepth, len(r.Result))
	}
	deep := json.RawMessage(nested(state.MaxDepth+1, `1`))
	r = apply(t, setup(t, state.Running), state.Action{Name: state.Succeed, Detail: "target answered 200", Result: deep}, time.Minute)
	if r.Status != state.Done || r.Result != nil {
		t.Fatalf("want done without the result, got %s with %d bytes of result", r.Status, len(r.Result))
	}
	want := fmt.Sprintf("result nested %d levels deep not kept (at most %d)", state.MaxDepth+1, state.MaxDepth)
	if e := r.History[len(r.History)-1]; !strings.Contains(e.Detail, "target answered 200") || !strings.Contains(e.Detail, want) {
		t.Fatalf("want the entry's detail to say %q, got %q", want, e.Detail)
	}
}

// BenchmarkDepth compares the depth pass with json.Valid, which every
// payload already goes through, on an order of a few KB.
func BenchmarkDepth(b *testing.B) {
	var items []string
	for i := range 40 {
		items = append(items, fmt.Sprintf(`{"sku":"SKU-%05d","name":"Widget \"%d\" <large>","qty":%d,"price":{"amount":"19.90","currency":"EUR"},"tags":["a","b\\c"]}`, i, i, i%7+1))
	}
	payload := []byte(`{"order_id":"o-1","customer":{"id":"c-9","address":{"lines":["1 Main St"],"city":"Lisbon"}},"items":[` + strings.Join(items, ",") + `]}`)
	b.Run("Depth", func(b *testing.B) {
		b.SetBytes(int64(len(payload)))
		for b.Loop() {
			if state.Depth(payload) != 4 {
				b.Fatal("want depth 4")
			}
		}
	})
	b.Run("json.Valid", func(b *testing.B) {
		b.SetBytes(int64(len(payload)))
		for b.Loop() {
			if !json.Valid(payload) {
				b.Fatal("want valid")
			}
		}
	})
}
