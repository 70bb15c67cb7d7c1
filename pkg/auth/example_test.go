package auth_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/tenaz/tenaz/pkg/auth"
	"github.com/tenaz/tenaz/pkg/config"
)

// A key is made once: the key goes to its owner, the hash into tenaz.yaml.
func ExampleNewKey() {
	key, hash, _ := auth.NewKey()
	fmt.Println(strings.HasPrefix(key, "tnz_"), strings.HasPrefix(hash, "sha256:"), len(hash))
	// Output: true true 71
}

// Guard protects a whole mux; Require gives a route its scope.
func ExampleAuthenticator_Guard() {
	key, hash, _ := auth.NewKey()
	cfg, _ := config.Parse([]byte(`auth: {keys: {shop: {account: acme, scopes: [read], hash: "`+hash+`"}}}`), nil)
	a, _ := auth.New(cfg)
	mux := http.NewServeMux()
	mux.Handle("GET /v1/events/{id}", a.Require(auth.Read, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, _ := auth.From(r.Context())
		fmt.Fprintf(w, "%s may see acme: %v", p, p.MayAccess("acme"))
	})))
	h := a.Guard(mux)

	r := httptest.NewRequest("GET", "/v1/events/ev_1", nil)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	fmt.Println(w.Code)

	r.Header.Set("Authorization", "Bearer "+key)
	w = httptest.NewRecorder()
	h.ServeHTTP(w, r)
	fmt.Println(w.Code, w.Body.String())
	// Output:
	// 401
	// 200 key:shop may see acme: true
}
