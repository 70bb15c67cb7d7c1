package indent_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/tenaz/tenaz/pkg/indent"
)

// A value is indented as json.Indent does, unless its indented form would
// outgrow it by more than Max: a value nested deep, whose indentation
// grows with the square of its depth, is left as it is, as is one that is
// not JSON.
func TestJSONBoundsWhatItIndents(t *testing.T) {
	t.Parallel()
	plain := []byte(`{"order_id":"o-1","lines":[{"sku":"a","qty":2}],"note":"a \"quoted\" [bracket"}`)
	var want bytes.Buffer
	if err := json.Indent(&want, plain, "", "  "); err != nil {
		t.Fatal(err)
	}
	if got := indent.JSON(plain); string(got) != want.String() {
		t.Errorf("want %s indented as json.Indent does, got:\n%s", plain, got)
	}
	deep := []byte(`{"d":` + strings.Repeat("[", 9000) + strings.Repeat("]", 9000) + `}`)
	if got := indent.JSON(deep); !bytes.Equal(got, deep) {
		t.Errorf("a value nested 9000 deep (%d bytes): want it as it is, got %d bytes", len(deep), len(got))
	}
	if got := indent.JSON([]byte("not json")); string(got) != "not json" {
		t.Errorf("not JSON: want it as it is, got %q", got)
	}
}

// Len never counts less than json.Indent writes, so JSON's bound holds
// for every value.
func FuzzLen(f *testing.F) {
	for _, s := range []string{`{"a":[1,2,{"b":"c,:[{"}],"e":{}}`, `[[[]]]`, `"x\"y"`, ` {"a" : 1 } `, `[` + strings.Repeat(`{"k":[1,2]},`, 50) + `0]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var out bytes.Buffer
		if json.Indent(&out, b, "", "  ") != nil {
			return
		}
		if n := indent.Len(b, 1<<62); n < out.Len() {
			t.Fatalf("Len %d, json.Indent wrote %d for %q", n, out.Len(), b)
		}
		if got := indent.JSON(b); len(got) > len(b)+indent.Max {
			t.Fatalf("JSON: %d bytes for a value of %d", len(got), len(b))
		}
	})
}
