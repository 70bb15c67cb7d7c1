package natsconn_test

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/natsconn"
	"github.com/tenaz/tenaz/pkg/natsd"
	"github.com/tenaz/tenaz/pkg/natstest"
)

func TestCheckServerVersion(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		version string
		ok      bool
	}{
		{natsconn.MinServerVersion, true},
		{"2.14.1", true},
		{"2.15.2", true},
		{"v2.14.0", true},
		{"2.14.0-RC.1", true}, // a pre-release counts as its release
		{"2.16.0-dev+abc", true},
		{"3.0.0", true},
		{"2.13.9", false},
		{"2.12.5", false}, // @at schedules, but no cron schedules
		{"2.11.9", false},
		{"2.9.25", false},
		{"1.99.99", false},
		{"", false},
		{"2.14", false},
		{"two.14.0", false},
		{"2.-1.0", false},
	} {
		err := natsconn.CheckServerVersion(c.version)
		if c.ok {
			if err != nil {
				t.Errorf("%q: want accepted, got %v", c.version, err)
			}
			continue
		}
		if !errors.Is(err, natsconn.ErrServerTooOld) {
			t.Errorf("%q: want ErrServerTooOld, got %v", c.version, err)
			continue
		}
		for _, want := range []string{c.version, natsconn.MinServerVersion} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%q: the error does not name %s: %v", c.version, want, err)
			}
		}
	}
}

// The server tenaz is tested on (the nats-server module of go.mod) is
// accepted, and reports its own version.
func TestAcceptsCurrentServer(t *testing.T) {
	t.Parallel()
	srv := start(t, natsd.Auth{}, nil)
	nc, err := connect(t, config.NATS{}, srv.ClientURL())
	if err != nil {
		t.Fatalf("want nats-server %s accepted, got %v", server.VERSION, err)
	}
	if got := nc.ConnectedServerVersion(); got != server.VERSION {
		t.Fatalf("ConnectedServerVersion %q, want %q", got, server.VERSION)
	}
}

// oldServer speaks the start of the NATS client protocol (INFO, then PONG
// to every PING) announcing version: the one way to present an old
// server's version without an old nats-server binary. It listens on addr
// ("127.0.0.1:0" for any port) and returns its URL.
func oldServer(t *testing.T, addr, version string) string {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	port := ln.Addr().(*net.TCPAddr).Port
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				fmt.Fprintf(c, "INFO {\"server_id\":\"OLD\",\"server_name\":\"old\",\"version\":%q,\"proto\":1,\"host\":\"127.0.0.1\",\"port\":%d,\"headers\":true,\"max_payload\":1048576}\r\n", version, port)
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if strings.HasPrefix(line, "PING") {
						_, _ = c.Write([]byte("PONG\r\n"))
					}
				}
			}()
		}
	}()
	return fmt.Sprintf("nats://127.0.0.1:%d", port)
}

// A server older than MinServerVersion is refused at once, and the error
// says which version it found, which one tenaz needs and why.
func TestRefusesOldServer(t *testing.T) {
	t.Parallel()
	url := oldServer(t, "127.0.0.1:0", "2.11.9")
	_, err := connect(t, config.NATS{}, url)
	if !errors.Is(err, natsconn.ErrServerTooOld) {
		t.Fatalf("want ErrServerTooOld from a 2.11.9 server, got %v", err)
	}
	for _, want := range []string{"2.11.9", natsconn.MinServerVersion, "message schedule", "cron schedule", url} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
}

// A server that comes up after Connect returned (it waits for one that is
// down) is checked too: an old one gets its connection closed.
func TestRefusesOldServerThatComesUpLater(t *testing.T) {
	t.Parallel()
	// A port outside the ephemeral range: one picked from ":0" and
	// released was taken by another test's ":0" server, which this
	// connection then reached instead (TestRefusesOldServer got nil).
	addr := "127.0.0.1:" + strconv.Itoa(natstest.FreePort(t))
	nc, err := connect(t, config.NATS{}, "nats://"+addr)
	if err != nil {
		t.Fatalf("want Connect to wait for a server that is down, got %v", err)
	}
	oldServer(t, addr, "2.12.5")
	natstest.Eventually(t, 10*time.Second, nc.IsClosed, "the connection to a 2.12.5 server to be closed")
}

// Replies come to the connection's own inboxes, InboxPrefix(name): a user
// allowed to subscribe to those only can still make requests (JetStream's
// included).
func TestInboxPrefix(t *testing.T) {
	t.Parallel()
	const name = "tenaz-test"
	srv := start(t, natsd.Auth{}, func(o *server.Options) {
		o.Users = []*server.User{{Username: "svc", Password: "pw", Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: []string{"ping", "$JS.API.INFO"}},
			Subscribe: &server.SubjectPermission{Allow: []string{"ping", natsconn.InboxPrefix(name) + ".>"}},
			Response:  &server.ResponsePermission{MaxMsgs: 1}, // allow_responses: the responder answers a request
		}}}
	})
	nc, err := natsconn.Connect(config.NATS{User: "svc", Password: "pw"}, name, srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	reply := make(chan string, 1)
	sub, err := nc.Subscribe("ping", func(m *nats.Msg) { reply <- m.Reply; _ = m.Respond([]byte("pong")) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if _, err := nc.Request("ping", nil, 5*time.Second); err != nil {
		t.Fatalf("want a request answered on the service's own inbox, got %v", err)
	}
	if r := <-reply; !strings.HasPrefix(r, natsconn.InboxPrefix(name)+".") {
		t.Fatalf("reply subject %q, want it under %s", r, natsconn.InboxPrefix(name))
	}
	js, err := nc.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.AccountInfo(); err != nil {
		t.Fatalf("want a JetStream request answered on the service's own inbox, got %v", err)
	}
}
