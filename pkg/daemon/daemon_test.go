package daemon_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/daemon"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestServeCutsOffSlowClients: a client that trickles its headers, or its
// body, one byte at a time (slowloris) loses its connection once the
// listener's read_header_timeout, or read_timeout, has passed, instead of
// holding it for as long as it keeps sending.
func TestServeCutsOffSlowClients(t *testing.T) {
	t.Parallel()
	c := config.HTTP{Addr: "127.0.0.1:0", ReadHeaderTimeout: config.Duration(300 * time.Millisecond),
		ReadTimeout: config.Duration(700 * time.Millisecond), WriteTimeout: config.Duration(5 * time.Second), IdleTimeout: config.Duration(5 * time.Second)}
	srv, err := daemon.ServeWith(c, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Stop(ctx)
	})
	tests := []struct {
		name, head string
		deadline   time.Duration
	}{
		{"headers sent slowly", "POST /v1/callbacks/erp HTTP/1.1\r\nHost: tenaz\r\nX-Slow: ", c.ReadHeaderTimeout.D()},
		{"body sent slowly", "POST /v1/callbacks/erp HTTP/1.1\r\nHost: tenaz\r\nContent-Length: 100000\r\n\r\n", c.ReadTimeout.D()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// Timed from before the dial: the server's deadline runs
			// from its accept, which may come before Dial returns.
			start := time.Now()
			conn, err := net.Dial("tcp", srv.Addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := io.WriteString(conn, tt.head); err != nil {
				t.Fatal(err)
			}
			// The client goes on sending a byte every 50ms until it is cut
			// off or the test ends.
			done := make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() {
				tick := time.NewTicker(50 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-done:
						return
					case <-tick.C:
						if _, err := conn.Write([]byte{'a'}); err != nil {
							return
						}
					}
				}
			})
			defer wg.Wait()
			defer close(done)
			// Whatever the server answers (nothing, or an error), it must
			// close the connection well within a few deadlines.
			limit := tt.deadline + 2*time.Second
			_ = conn.SetReadDeadline(start.Add(limit))
			_, err = io.Copy(io.Discard, conn)
			if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
				t.Fatalf("a client trickling bytes still held its connection after %s (deadline %s)", limit, tt.deadline)
			}
			if took := time.Since(start); took < tt.deadline {
				t.Fatalf("connection closed after %s, before the %s deadline: want it cut by the deadline, not by something else (err %v)", took, tt.deadline, err)
			}
		})
	}
}

// TestServeHasDeadlines: Serve (the demo providers' listeners) uses the
// default http.* timeouts, none of them unlimited.
func TestServeHasDeadlines(t *testing.T) {
	t.Parallel()
	srv, err := daemon.Serve("127.0.0.1:0", http.NotFoundHandler())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Stop(context.Background()) }()
	want := (&config.Config{}).WithDefaults().HTTP
	got := [4]time.Duration{srv.ReadHeaderTimeout, srv.ReadTimeout, srv.WriteTimeout, srv.IdleTimeout}
	if exp := [4]time.Duration{want.ReadHeaderTimeout.D(), want.ReadTimeout.D(), want.WriteTimeout.D(), want.IdleTimeout.D()}; got != exp || got[0] <= 0 || got[1] <= 0 {
		t.Fatalf("Serve's timeouts (read header, read, write, idle): want %v, all set, got %v", exp, got)
	}
}
