package httpapi_test

import (
	"net/url"
	"slices"
	"testing"

	"github.com/tenaz/tenaz/pkg/httpapi"
)

// FuzzCheckQuery checks the guard of every list's query string against
// its definition: it refuses exactly a parameter outside the known ones
// or one given more than once, and names it.
func FuzzCheckQuery(f *testing.F) {
	for _, q := range []string{"", "account=acme", "acount=acme", "account=a&account=b", "limit=1&cursor=x", "a=1;b=2", "%zz=1", "account"} {
		f.Add(q)
	}
	known := []string{"account", "limit", "cursor"}
	f.Fuzz(func(t *testing.T, raw string) {
		v, _ := url.ParseQuery(raw)
		qe := httpapi.CheckQuery(v, known...)
		bad := false
		for k, vs := range v {
			bad = bad || !slices.Contains(known, k) || len(vs) > 1
		}
		switch {
		case bad && qe == nil:
			t.Fatalf("%q: want a refusal of %v", raw, v)
		case !bad && qe != nil:
			t.Fatalf("%q: want %v taken, got %v", raw, v, qe)
		case qe != nil && (qe.Reason == "" || slices.Contains(known, qe.Param) && len(v[qe.Param]) < 2):
			t.Fatalf("%q: want the refused parameter named with a reason, got %+v", raw, qe)
		}
	})
}
