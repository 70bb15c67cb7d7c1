package client_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/tenaz/tenaz/pkg/client"
)

// A free-form path segment (an entity id, an event reference) reaches
// the server escaped once, under the base URL's own path: "o/1" as
// "o%2F1", which the server reads back as "o/1".
func TestHTTPPathSegmentsEscapedOnce(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var uris, entities []string
	mux := http.NewServeMux()
	mux.HandleFunc("GET /tenaz/v1/entities/{account}/{entity}/timeline", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		uris, entities = append(uris, r.RequestURI), append(entities, r.PathValue("entity"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{}`))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	c, err := client.NewHTTP(srv.URL + "/tenaz/")
	if err != nil {
		t.Fatal(err)
	}
	for _, entity := range []string{"o-1", "o/1", "50% off?#x"} {
		if _, err := c.EntityTimeline(context.Background(), "acme", entity); err != nil {
			t.Fatalf("%q: %v", entity, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"/tenaz/v1/entities/acme/o-1/timeline", "/tenaz/v1/entities/acme/o%2F1/timeline", "/tenaz/v1/entities/acme/50%25%20off%3F%23x/timeline"}
	for i, w := range want {
		if i >= len(uris) || uris[i] != w {
			t.Fatalf("want the requests %q, got %q", want, uris)
		}
	}
	if entities[1] != "o/1" || entities[2] != "50% off?#x" {
		t.Fatalf("want the server to read the entities back as sent, got %q", entities)
	}
}
