package auth_test

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tenaz/tenaz/pkg/auth"
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

// No request target reaches an operator route without an operator
// credential, however it is spelled: the Guard judges the route the mux
// picks, not the path. Redirects are followed by hand, as a client would.
func FuzzGuardPaths(f *testing.F) {
	for _, s := range []string{"/v1/breakers", "/v1/callbacks/../breakers", "/v1/callbacks/..%2F..%2Fv1%2Fbreakers", "//v1/breakers",
		"/v1//breakers/globex/erp/close", "/v1%2Fbreakers", "/./ui/", "/ui", "/v1/dead/%2e%2e/breakers", "/healthz/../v1/dead"} {
		f.Add("GET", s)
		f.Add("POST", s)
	}
	a := newAuth(f)
	mux := http.NewServeMux()
	for _, p := range auth.Patterns() {
		mux.Handle(p, echo)
	}
	h := a.Guard(mux)
	f.Fuzz(func(t *testing.T, method, target string) {
		for range 5 {
			r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(method + " " + target + " HTTP/1.1\r\nHost: tenaz\r\nAuthorization: Bearer " + acmeKey + "\r\n\r\n")))
			if err != nil {
				return
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if c, _ := auth.ClassOf(w.Header().Get("X-Pattern")); w.Header().Get("X-Pattern") != "" && c == auth.OperatorOnly {
				t.Fatalf("%s %q with an API key reached %q", method, target, w.Header().Get("X-Pattern"))
			}
			loc := w.Header().Get("Location")
			if w.Code/100 != 3 || loc == "" {
				return
			}
			target = loc
		}
	})
}
