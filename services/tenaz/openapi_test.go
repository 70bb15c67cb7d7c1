package tenaz_test

import (
	"bytes"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/tenaz/tenaz/pkg/httpapi"
	"github.com/tenaz/tenaz/pkg/httpapi/apitest"
)

// The OpenAPI document names exactly the routes `tenaz run` serves (every
// service's, as each tenaz-<service> binary serves them too), except the
// operator's browser screen under /ui/; and the listener serves the
// document itself, as the document describes it.
func TestOpenAPIDocumentsEveryRoute(t *testing.T) {
	t.Parallel()
	tz := start(t, testConfig(t.TempDir(), "http://127.0.0.1:1", ""))
	doc, err := apitest.Load()
	if err != nil {
		t.Fatal(err)
	}
	documented := apitest.Operations(doc)
	var served []string
	for _, p := range tz.Patterns() {
		if !strings.HasPrefix(strings.Fields(p)[1], "/ui/") {
			served = append(served, p)
		}
	}
	for _, p := range served {
		if !slices.Contains(documented, p) {
			t.Errorf("route %q is served but not in pkg/httpapi/openapi.yaml: document it", p)
		}
	}
	for _, op := range documented {
		if !slices.Contains(served, op) {
			t.Errorf("pkg/httpapi/openapi.yaml documents %q, which no service serves", op)
		}
	}
	c := apitest.New(t)
	client := c.Client()
	t.Cleanup(client.CloseIdleConnections)
	resp, err := client.Get("http://" + tz.HTTPAddr() + httpapi.OpenAPIPath)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	want, _ := httpapi.OpenAPI()
	if resp.StatusCode != 200 || !bytes.Equal(got, want) || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("GET %s: want 200 and the document as JSON, got %d %s %.200s", httpapi.OpenAPIPath, resp.StatusCode, resp.Header.Get("Content-Type"), got)
	}
}
