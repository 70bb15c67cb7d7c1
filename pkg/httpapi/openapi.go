package httpapi

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"

	"go.yaml.in/yaml/v3"
)

// openAPIYAML is the OpenAPI 3.1 document of tenaz's HTTP API, written as
// YAML so that it can carry comments; it is served as JSON.
//
//go:embed openapi.yaml
var openAPIYAML []byte

// OpenAPIPath is where the document is served.
const OpenAPIPath = "/v1/openapi.json"

var openAPI = sync.OnceValues(func() ([]byte, error) {
	var doc any
	if err := yaml.Unmarshal(openAPIYAML, &doc); err != nil {
		return nil, fmt.Errorf("httpapi: openapi.yaml: %w", err)
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("httpapi: openapi.yaml as JSON: %w", err)
	}
	return b, nil
})

// OpenAPI returns the OpenAPI 3.1 document of the HTTP API as JSON: every
// route of ingest, deadletter's operator routes and the probes (not the
// /ui/ screen). pkg/httpapi/apitest checks requests and answers against it.
func OpenAPI() ([]byte, error) { return openAPI() }

// ServeOpenAPI answers GET /v1/openapi.json with the document.
func ServeOpenAPI(w http.ResponseWriter, _ *http.Request) {
	b, err := OpenAPI()
	if err != nil { // the embedded document is checked by the tests: not reached
		Error(w, http.StatusInternalServerError, "internal", err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "public, max-age=300")
	_, _ = w.Write(b)
}
