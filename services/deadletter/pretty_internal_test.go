package deadletter

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// A value is indented for reading as json.Indent does, unless its indented
// form would outgrow it by more than prettyMax: a value nested deep, whose
// indentation grows with the square of its depth, is shown as stored.
func TestPrettyBoundsWhatItIndents(t *testing.T) {
	plain := []byte(`{"order_id":"o-1","lines":[{"sku":"a","qty":2}],"note":"a \"quoted\" [bracket"}`)
	var want bytes.Buffer
	if err := json.Indent(&want, plain, "", "  "); err != nil {
		t.Fatal(err)
	}
	if got := pretty(plain); got != want.String() {
		t.Errorf("want %s indented as json.Indent does, got:\n%s", plain, got)
	}
	deep := []byte(`{"d":` + strings.Repeat("[", 9000) + strings.Repeat("]", 9000) + `}`)
	if got := pretty(deep); got != string(deep) {
		t.Errorf("a value nested 9000 deep (%d bytes): want it as stored, got %d bytes", len(deep), len(got))
	}
	if got := pretty([]byte("not json")); got != "not json" {
		t.Errorf("not JSON: want it as it is, got %q", got)
	}
}

// indentedLen never counts less than json.Indent writes, so pretty's
// bound holds for every value.
func FuzzIndentedLen(f *testing.F) {
	for _, s := range []string{`{"a":[1,2,{"b":"c,:[{"}],"e":{}}`, `[[[]]]`, `"x\"y"`, ` {"a" : 1 } `, `[` + strings.Repeat(`{"k":[1,2]},`, 50) + `0]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var out bytes.Buffer
		if json.Indent(&out, b, "", "  ") != nil {
			return
		}
		if n := indentedLen(b, 1<<62); n < out.Len() {
			t.Fatalf("indentedLen %d, json.Indent wrote %d for %q", n, out.Len(), b)
		}
		if got := pretty(b); len(got) > len(b)+prettyMax {
			t.Fatalf("pretty: %d bytes for a value of %d", len(got), len(b))
		}
	})
}
