package tenaz_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tenaz/tenaz/pkg/httpapi"
)

// On tenaz run's one listener, an API path no route takes and a method no
// route takes answer in the coded body of every API error; the screen
// keeps its HTML.
func TestRunCodesAPIMisses(t *testing.T) {
	t.Parallel()
	tz := start(t, testConfig(t.TempDir(), "http://127.0.0.1:1", ""))
	base := "http://" + tz.HTTPAddr()
	tests := []struct {
		method, path string
		status       int
		code         string // "" for the screen's own answer
		allow        string
	}{
		{"GET", "/v1/nope", http.StatusNotFound, "not_found", ""},
		{"PUT", "/v1/events", http.StatusMethodNotAllowed, "method_not_allowed", "GET, HEAD, POST"},
		{"GET", "/ui/nope", http.StatusNotFound, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			t.Parallel()
			req, err := http.NewRequest(tc.method, base+tc.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			body, _ := io.ReadAll(res.Body)
			if res.StatusCode != tc.status {
				t.Fatalf("want %d, got %d: %s", tc.status, res.StatusCode, body)
			}
			if got := res.Header.Get("Allow"); got != tc.allow {
				t.Errorf("want Allow %q, got %q", tc.allow, got)
			}
			var e httpapi.ErrorBody
			coded := strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") && json.Unmarshal(body, &e) == nil
			if tc.code == "" && coded {
				t.Errorf("want the screen's own answer, got JSON %s", body)
			}
			if tc.code != "" && (!coded || e.Error.Code != tc.code || e.Error.Message == "") {
				t.Errorf("want JSON with code %q and a message, got %s %q", tc.code, res.Header.Get("Content-Type"), body)
			}
		})
	}
}
