package apitest

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
)

// JSON Lines (GET /v1/audit/export) are checked line by line: the
// document gives them as an array of their lines' schema.
func init() { openapi3filter.RegisterBodyDecoder("application/x-ndjson", ndjsonDecoder) }

func ndjsonDecoder(body io.Reader, _ http.Header, _ *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
	out := []any{}
	dec := json.NewDecoder(body)
	for {
		var v any
		err := dec.Decode(&v)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
}
