// Package httpapi holds the small shared pieces of tenaz's HTTP APIs: JSON
// answers, the coded error body {"error": {"code", "message"}}, and the
// health endpoints every service serves.
//
//	httpapi.Error(w, http.StatusUnprocessableEntity, "unknown_kind", "kind \"x\" is not configured")
package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// QueryError is a query parameter a GET refuses.
type QueryError struct {
	Param, Reason string
}

func (e *QueryError) Error() string { return e.Param + ": " + e.Reason }

// CheckQuery refuses a parameter outside known, or one given more than
// once: a typo (?acount=acme) would otherwise be ignored and list every
// account, and of a repeated one only the first would count. The first
// refused parameter, in sorted order, is the error's.
func CheckQuery(v url.Values, known ...string) *QueryError {
	keys := make([]string, 0, len(v))
	for k := range v {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !slices.Contains(known, k) {
			if len(known) == 0 {
				return &QueryError{Param: k, Reason: "unknown parameter; this takes none"}
			}
			return &QueryError{Param: k, Reason: "unknown parameter; known are " + strings.Join(known, ", ")}
		}
		if n := len(v[k]); n > 1 {
			return &QueryError{Param: k, Reason: fmt.Sprintf("given %d times; give it once", n)}
		}
	}
	return nil
}

// ErrorBody is the JSON of every error answer.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is a machine code and a human message.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// JSON writes v with status.
func JSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// Error writes a coded error.
func Error(w http.ResponseWriter, status int, code, msg string) {
	JSON(w, status, ErrorBody{Error: ErrorDetail{Code: code, Message: msg}})
}

// Check is a readiness probe: nil when ready.
type Check func() error

// Health registers /healthz (the process answers) and /readyz (every check
// passes) on mux.
func Health(mux Router, checks ...Check) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		JSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		for _, c := range checks {
			if err := c(); err != nil {
				Error(w, http.StatusServiceUnavailable, "not_ready", err.Error())
				return
			}
		}
		JSON(w, http.StatusOK, map[string]string{"status": "ready"})
	})
}

// Router is where a service registers its routes: an *http.ServeMux, or a
// Mux.
type Router interface {
	Handle(pattern string, h http.Handler)
	HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request))
}

// Mux is an http.ServeMux that remembers the patterns registered on it,
// so that a test can check each route (pkg/auth classifies every route by
// its pattern).
type Mux struct {
	*http.ServeMux
	patterns []string
}

// NewMux returns an empty Mux.
func NewMux() *Mux { return &Mux{ServeMux: http.NewServeMux()} }

// Handle registers h for pattern, as http.ServeMux.Handle does.
func (m *Mux) Handle(pattern string, h http.Handler) {
	m.ServeMux.Handle(pattern, h)
	m.patterns = append(m.patterns, pattern)
}

// HandleFunc registers h for pattern, as http.ServeMux.HandleFunc does.
func (m *Mux) HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request)) {
	m.Handle(pattern, http.HandlerFunc(h))
}

// Patterns lists the registered patterns in the order they were registered.
func (m *Mux) Patterns() []string { return slices.Clone(m.patterns) }

// ServeHTTP serves r as http.ServeMux does, except that under /v1/ the
// mux's own plain-text 404 and 405 become coded errors, not_found and
// method_not_allowed (with the mux's Allow header): an API client reads
// every error the same way. The screen under /ui/ keeps the mux's pages.
func (m *Mux) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p := r.URL.Path; p != "/v1" && !strings.HasPrefix(p, "/v1/") {
		m.ServeMux.ServeHTTP(w, r)
		return
	}
	if _, pattern := m.ServeMux.Handler(r); pattern != "" { // a route's own 404 (no such event) stands
		m.ServeMux.ServeHTTP(w, r)
		return
	}
	m.ServeMux.ServeHTTP(&codedMiss{ResponseWriter: w, r: r}, r)
}

// codedMiss carries the mux's answer to a request no route takes: it
// writes a 404 or 405 as a coded error and drops the mux's text.
type codedMiss struct {
	http.ResponseWriter
	r     *http.Request
	coded bool
}

func (w *codedMiss) WriteHeader(status int) {
	switch status {
	case http.StatusNotFound:
		Error(w.ResponseWriter, status, "not_found", "no route "+w.r.URL.Path)
	case http.StatusMethodNotAllowed:
		Error(w.ResponseWriter, status, "method_not_allowed",
			w.r.Method+" is not allowed on "+w.r.URL.Path+"; allowed: "+w.Header().Get("Allow"))
	default: // a redirect to the cleaned path
		w.ResponseWriter.WriteHeader(status)
		return
	}
	w.coded = true
}

func (w *codedMiss) Write(b []byte) (int, error) {
	if w.coded {
		return len(b), nil
	}
	return w.ResponseWriter.Write(b)
}
