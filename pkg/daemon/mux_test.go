package daemon_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/tenaz/tenaz/pkg/daemon"
	"github.com/tenaz/tenaz/pkg/httpapi"
)

type part struct{ ready error }

func (p part) Start(context.Context) error { return nil }
func (p part) Stop(context.Context) error  { return nil }
func (p part) Ready() error                { return p.ready }

type routed struct{ part }

func (routed) Routes(mux httpapi.Router) {
	mux.HandleFunc("GET /v1/own", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
}

// A component with routes of its own gets them mounted; one without
// needs none, and its readiness still counts in /readyz.
func TestMuxMountsRoutedComponents(t *testing.T) {
	t.Parallel()
	status := func(h http.Handler, path string) int {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		return w.Code
	}
	mux := daemon.Mux(part{}, routed{})
	if got := status(mux, "/v1/own"); got != http.StatusTeapot {
		t.Errorf("GET /v1/own: want the routed component's %d, got %d", http.StatusTeapot, got)
	}
	if got := status(mux, "/readyz"); got != http.StatusOK {
		t.Errorf("GET /readyz with every component ready: want 200, got %d", got)
	}
	if got := status(daemon.Mux(part{ready: errors.New("not yet")}, routed{}), "/readyz"); got != http.StatusServiceUnavailable {
		t.Errorf("GET /readyz with the route-less component not ready: want 503, got %d", got)
	}
}
