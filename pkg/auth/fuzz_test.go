package auth_test

import (
	"net/http/httptest"
	"strings"
	"testing"
)

// No Authorization header authenticates unless it carries a configured
// key, and none makes Authenticate panic.
func FuzzAuthenticate(f *testing.F) {
	for _, s := range []string{"Bearer " + acmeKey, "Basic YWxpY2U6eA==", "Bearer", "bearer  x", "Basic !!", "Token abc", ""} {
		f.Add(s)
	}
	a := newAuth(f)
	f.Fuzz(func(t *testing.T, h string) {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header["Authorization"] = []string{h}
		p, err := a.Authenticate(r)
		if err != nil {
			return
		}
		_, pw, basic := r.BasicAuth()
		if !strings.Contains(h, acmeKey) && !strings.Contains(h, globexKey) && !strings.Contains(h, aliceKey) && !(basic && pw == aliceKey) {
			t.Fatalf("header %q authenticated as %s without a configured key", h, p)
		}
	})
}
