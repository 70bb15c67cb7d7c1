package provider_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tenaz/tenaz/pkg/provider"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// setup starts p behind an httptest server; cleanup closes the provider
// first (cutting hangs short), then the server.
func setup(t testing.TB, f provider.Faults, opts ...provider.Option) (*provider.Provider, *httptest.Server) {
	t.Helper()
	p := provider.New(f, opts...)
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { _ = p.Close() })
	return p, srv
}

// waitCtx is the deadline of every wait on a condition.
func waitCtx(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

type response struct {
	status int
	header http.Header
	body   []byte
}

// send makes one request; headers alternate name, value.
func send(t testing.TB, c *http.Client, method, url, body string, headers ...string) (response, error) {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader([]byte(body)))
	if err != nil {
		t.Fatalf("new request: %v", err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return response{resp.StatusCode, resp.Header, b}, err
}

// deliver POSTs body to srv/orders the way tenaz does, for key.
func deliver(t testing.TB, srv *httptest.Server, key, body string) response {
	t.Helper()
	r, err := send(t, srv.Client(), http.MethodPost, srv.URL+"/orders", body,
		"Idempotency-Key", key, "Tenaz-Event-Id", "evt-"+key, "Tenaz-Attempt", "1")
	if err != nil {
		t.Fatalf("deliver %s: want an answer, got error %v", key, err)
	}
	return r
}

// reference decodes the id of a success answer.
func reference(t testing.TB, r response) string {
	t.Helper()
	var v struct{ ID, Status, Key string }
	if err := json.Unmarshal(r.body, &v); err != nil || v.ID == "" {
		t.Fatalf("want a success body with an id, got %d %s (%v)", r.status, r.body, err)
	}
	return v.ID
}

func keyN(i int) string { return "k" + strconv.Itoa(i) }
