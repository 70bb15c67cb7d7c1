package natsd_test

import (
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"go.uber.org/goleak"

	"github.com/tenaz/tenaz/pkg/natsd"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// occupy holds a loopback port until the test ends and returns it.
func occupy(t *testing.T) *net.TCPAddr {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return ln.Addr().(*net.TCPAddr)
}

// A listener on a port in use fails Start at once, naming the address,
// instead of after the 10s readiness timeout: the client port and the
// ones Configure adds alike.
func TestStartPortInUse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		options   func(busy *net.TCPAddr) natsd.Options
		listenErr bool // a *ListenError for the busy address, wrapping EADDRINUSE
	}{
		{"client", func(busy *net.TCPAddr) natsd.Options {
			return natsd.Options{Listen: busy.String()}
		}, true},
		{"leafnode", func(busy *net.TCPAddr) natsd.Options {
			return natsd.Options{Configure: func(o *server.Options) { o.LeafNode.Host, o.LeafNode.Port = busy.IP.String(), busy.Port }}
		}, true},
		{"monitoring", func(busy *net.TCPAddr) natsd.Options {
			return natsd.Options{Configure: func(o *server.Options) { o.HTTPHost, o.HTTPPort = busy.IP.String(), busy.Port }}
		}, false}, // nats-server flattens this one's error to text
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			busy := occupy(t)
			o := tc.options(busy)
			o.StoreDir = t.TempDir()
			done := make(chan error, 1)
			go func() {
				srv, err := natsd.Start(o)
				natsd.Shutdown(srv)
				done <- err
			}()
			var err error
			select {
			case err = <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("want Start to fail at once on a port in use, it still waited after 5s")
			}
			if err == nil {
				t.Fatal("want an error for a port in use, Start succeeded")
			}
			if want := busy.String(); !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "address already in use") {
				t.Errorf("want the error to name %s and say it is in use, got %v", want, err)
			}
			if !tc.listenErr {
				return
			}
			var le *natsd.ListenError
			if !errors.As(err, &le) || le.Addr != busy.String() || !errors.Is(err, syscall.EADDRINUSE) {
				t.Errorf("want a *natsd.ListenError for %s wrapping EADDRINUSE, got %#v", busy, err)
			}
		})
	}
}
