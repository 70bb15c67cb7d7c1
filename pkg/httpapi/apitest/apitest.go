// Package apitest checks a test's real HTTP exchanges against tenaz's
// OpenAPI document (httpapi.OpenAPI), with kin-openapi's openapi3filter,
// so that the document cannot drift from what the services do: every
// answer must be one the document names for its route, with its schema;
// a request the document refuses must not be taken (2xx); and Covered
// fails for a documented answer that no exchange produced.
//
//	c := apitest.New(t)
//	resp, err := c.Client().Post(url+"/v1/events", "application/json", body)
//	...
//	c.Covered(t, apitest.Under("/v1/events"), nil)
package apitest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/tenaz/tenaz/pkg/httpapi"
)

// Contract is the document and the answers seen so far.
type Contract struct {
	tb     testing.TB
	doc    *openapi3.T
	router routers.Router

	mu   sync.Mutex
	seen map[string]map[string]bool // operation → status → seen
}

// Load reads and validates the served document (OpenAPI 3.1: kin-openapi
// validates its schemas as JSON Schema 2020-12).
func Load() (*openapi3.T, error) {
	b, err := httpapi.OpenAPI()
	if err != nil {
		return nil, err
	}
	l := openapi3.NewLoader()
	doc, err := l.LoadFromData(b)
	if err != nil {
		return nil, fmt.Errorf("apitest: loading the document: %w", err)
	}
	if !doc.IsOpenAPI31OrLater() {
		return nil, fmt.Errorf("apitest: the document is OpenAPI %s, want 3.1", doc.OpenAPI)
	}
	if err := doc.Validate(l.Context); err != nil {
		return nil, fmt.Errorf("apitest: the document is not valid: %w", err)
	}
	return doc, nil
}

// New loads the document; tb fails at once if it is not valid.
func New(tb testing.TB) *Contract {
	tb.Helper()
	doc, err := Load()
	if err != nil {
		tb.Fatal(err)
	}
	r, err := gorillamux.NewRouter(doc)
	if err != nil {
		tb.Fatalf("apitest: routes of the document: %v", err)
	}
	return &Contract{tb: tb, doc: doc, router: r, seen: map[string]map[string]bool{}}
}

// Operations lists every operation of doc as "METHOD /path", the form of
// an http.ServeMux pattern, sorted.
func Operations(doc *openapi3.T) []string {
	var out []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			out = append(out, method+" "+path)
		}
	}
	slices.Sort(out)
	return out
}

// Client is an HTTP client whose every exchange is checked.
func (c *Contract) Client() *http.Client {
	return &http.Client{Transport: c.Transport(&http.Transport{})}
}

// Transport wraps base: each request and its answer are checked against
// the document (a mismatch fails the test), and the answer is recorded
// for Covered. Bodies are read whole and handed on unchanged.
func (c *Contract) Transport(base http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		var reqBody []byte
		if req.Body != nil {
			var err error
			if reqBody, err = io.ReadAll(req.Body); err != nil {
				return nil, err
			}
			_ = req.Body.Close()
			req.Body = io.NopCloser(bytes.NewReader(reqBody))
		}
		resp, err := base.RoundTrip(req)
		if err != nil {
			return resp, err
		}
		respBody, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			return nil, err
		}
		resp.Body = io.NopCloser(bytes.NewReader(respBody))
		c.check(req, reqBody, resp, respBody)
		return resp, nil
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// check validates one exchange and records its answer.
func (c *Contract) check(req *http.Request, reqBody []byte, resp *http.Response, respBody []byte) {
	c.tb.Helper()
	what := req.Method + " " + req.URL.RequestURI()
	// The router matches a copy: the request was sent already.
	r := req.Clone(context.Background())
	r.Body = io.NopCloser(bytes.NewReader(reqBody))
	route, params, err := c.router.FindRoute(r)
	if err != nil {
		c.tb.Errorf("apitest: %s (answered %d) is not a route of the document: %v", what, resp.StatusCode, err)
		return
	}
	op := req.Method + " " + route.Path
	opts := &openapi3filter.Options{
		AuthenticationFunc:    openapi3filter.NoopAuthenticationFunc,
		IncludeResponseStatus: true,
		MultiError:            true,
		// A binary CloudEvent's body is its data, any JSON: OpenAPI cannot
		// make a body's schema depend on a header, so the document gives
		// application/json tenaz's own submission.
		ExcludeRequestBody: hasCEHeaders(req.Header),
	}
	in := &openapi3filter.RequestValidationInput{Request: r, PathParams: params, Route: route, Options: opts}
	reqErr := openapi3filter.ValidateRequest(context.Background(), in)
	if reqErr != nil && resp.StatusCode < 300 {
		c.tb.Errorf("apitest: %s was answered %d, but the document refuses the request: %v", what, resp.StatusCode, reqErr)
	}
	in.Request = req.Clone(context.Background()) // the response validator reads no body of it
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode,
		Header: resp.Header, Options: opts}
	out.SetBodyBytes(respBody)
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		c.tb.Errorf("apitest: %s: the answer %d %s does not match the document: %v", what, resp.StatusCode, truncate(respBody), err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen[op] == nil {
		c.seen[op] = map[string]bool{}
	}
	c.seen[op][strconv.Itoa(resp.StatusCode)] = true
}

func hasCEHeaders(h http.Header) bool {
	for k := range h {
		if strings.HasPrefix(strings.ToLower(k), "ce-") {
			return true
		}
	}
	return false
}

func truncate(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}

// Under selects the operations whose path starts with one of prefixes.
func Under(prefixes ...string) func(op string) bool {
	return func(op string) bool {
		_, path, _ := strings.Cut(op, " ")
		for _, p := range prefixes {
			if strings.HasPrefix(path, p) {
				return true
			}
		}
		return false
	}
}

// Covered fails tb for every answer the document gives an operation that
// keep selects ("METHOD /path", as Operations lists them) that no checked
// exchange produced, unless unseen explains it: unseen maps
// "METHOD /path STATUS" to why the test does not produce it. An
// explanation for an answer that was seen fails too (it is stale).
func (c *Contract) Covered(tb testing.TB, keep func(op string) bool, unseen map[string]string) {
	tb.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, op := range Operations(c.doc) {
		if !keep(op) {
			continue
		}
		method, path, _ := strings.Cut(op, " ")
		o := c.doc.Paths.Value(path).GetOperation(method)
		for status := range o.Responses.Map() {
			key := op + " " + status
			why, excused := unseen[key]
			switch seen := c.seen[op][status]; {
			case seen && excused:
				tb.Errorf("apitest: %s was seen; drop its explanation (%s)", key, why)
			case !seen && !excused:
				tb.Errorf("apitest: the document gives %s, which no exchange produced: drive it, or say why not", key)
			}
		}
	}
	for key := range unseen {
		fields := strings.Fields(key)
		if len(fields) != 3 || c.doc.Paths.Value(fields[1]) == nil || c.doc.Paths.Value(fields[1]).GetOperation(fields[0]) == nil ||
			c.doc.Paths.Value(fields[1]).GetOperation(fields[0]).Responses.Value(fields[2]) == nil {
			tb.Errorf("apitest: the explanation for %q names no documented answer", key)
		}
	}
}
