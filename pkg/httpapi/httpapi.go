// Package httpapi holds the small shared pieces of tenaz's HTTP APIs: JSON
// answers, the coded error body {"error": {"code", "message"}}, and the
// health endpoints every service serves.
//
//	httpapi.Error(w, http.StatusUnprocessableEntity, "unknown_kind", "kind \"x\" is not configured")
package httpapi

import (
	"encoding/json"
	"net/http"
)

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
func Health(mux *http.ServeMux, checks ...Check) {
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
