package httpapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tenaz/tenaz/pkg/httpapi"
)

// Under /v1/ a path no route takes is 404 not_found and a method no route
// takes is 405 method_not_allowed with its Allow header, in the coded
// body; a route's own answers, redirects and everything outside /v1/
// are the mux's as before.
func TestMuxCodesAPIMisses(t *testing.T) {
	t.Parallel()
	mux := httpapi.NewMux()
	mux.HandleFunc("POST /v1/events", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusAccepted) })
	mux.HandleFunc("GET /v1/events/{id}", func(w http.ResponseWriter, r *http.Request) {
		httpapi.Error(w, http.StatusNotFound, "not_found", "no event "+r.PathValue("id"))
	})
	mux.HandleFunc("GET /ui/{$}", func(w http.ResponseWriter, _ *http.Request) {})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	tests := []struct {
		method, path string
		status       int
		code         string // "" for an answer that is not coded JSON
		allow        string // the Allow header of a 405
		message      string // a fragment of the message, or of the body
	}{
		{"GET", "/v1/nope", 404, "not_found", "", "no route /v1/nope"},
		{"GET", "/v1", 404, "not_found", "", "no route /v1"},
		{"PUT", "/v1/events", 405, "method_not_allowed", "POST", "PUT is not allowed on /v1/events; allowed: POST"},
		{"POST", "/v1/events", 202, "", "", ""},
		{"GET", "/v1/events/ev_1", 404, "not_found", "", "no event ev_1"},
		{"GET", "/v1/x/../events/ev_1", 307, "", "", ""},
		{"GET", "/ui/nope", 404, "", "", "404 page not found"},
		{"POST", "/healthz", 405, "", "GET, HEAD", "Method Not Allowed"},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			t.Parallel()
			req, err := http.NewRequest(tc.method, srv.URL+tc.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			res, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			body, err := io.ReadAll(res.Body)
			if err != nil {
				t.Fatal(err)
			}
			if res.StatusCode != tc.status {
				t.Fatalf("want %d, got %d: %s", tc.status, res.StatusCode, body)
			}
			if got := res.Header.Get("Allow"); got != tc.allow {
				t.Errorf("want Allow %q, got %q", tc.allow, got)
			}
			var e httpapi.ErrorBody
			coded := strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") && json.Unmarshal(body, &e) == nil
			switch {
			case tc.code == "" && coded:
				t.Errorf("want the mux's own answer, got coded JSON %s", body)
			case tc.code != "" && (!coded || e.Error.Code != tc.code):
				t.Errorf("want JSON with code %q, got %s %q", tc.code, res.Header.Get("Content-Type"), body)
			case tc.code != "" && !strings.Contains(e.Error.Message, tc.message), tc.code == "" && !strings.Contains(string(body), tc.message):
				t.Errorf("want the answer to contain %q, got %q", tc.message, body)
			}
		})
	}
}
