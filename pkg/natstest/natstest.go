// Package natstest starts a real embedded nats-server with JetStream on a
// random port and a temporary file store for tests, applies tenaz's
// streams, and cleans everything up when the test ends. StartCluster
// starts a JetStream cluster of in-process servers on loopback routes.
//
//	s := natstest.Start(t)
//	nc, js := s.Conn(t)
//	c := natstest.StartCluster(t, 3) // c.URLs() for nats.url
package natstest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/natsd"
	"github.com/tenaz/tenaz/streams"
)

// Server is a running test server.
type Server struct {
	*server.Server
	Dir string
}

// Option adjusts the test server.
type Option func(*natsd.Options)

// SyncAlways makes the server fsync every write.
func SyncAlways() Option { return func(o *natsd.Options) { o.SyncAlways = true } }

// StoreDir reuses a store directory (restart tests).
func StoreDir(dir string) Option { return func(o *natsd.Options) { o.StoreDir = dir } }

// Listen fixes the client address (restart tests keep the port).
func Listen(addr string) Option { return func(o *natsd.Options) { o.Listen = addr } }

// MaxPayload sets the server's max_payload (the largest message it takes).
func MaxPayload(n int32) Option { return func(o *natsd.Options) { o.MaxPayload = n } }

// Start starts a server and applies tenaz's streams with the default prefix.
func Start(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	o := natsd.Options{StoreDir: tb.TempDir(), Listen: "127.0.0.1:-1"}
	for _, f := range opts {
		f(&o)
	}
	srv, err := natsd.Start(o)
	if err != nil {
		tb.Fatalf("natstest: start server: %v", err)
	}
	s := &Server{Server: srv, Dir: o.StoreDir}
	tb.Cleanup(s.Stop)
	_, js := s.Conn(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := streams.Apply(ctx, js, streams.Options{}); err != nil {
		tb.Fatalf("natstest: apply streams: %v", err)
	}
	return s
}

// Stop shuts the server down (idempotent).
func (s *Server) Stop() { natsd.Shutdown(s.Server) }

// Conn connects to the server; the connection closes when the test ends.
func (s *Server) Conn(tb testing.TB) (*nats.Conn, jetstream.JetStream) {
	tb.Helper()
	nc, err := nats.Connect(s.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		tb.Fatalf("natstest: connect: %v", err)
	}
	tb.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatalf("natstest: jetstream: %v", err)
	}
	return nc, js
}

// Eventually waits until cond returns true, checking every 10ms, and fails
// the test with msg after timeout. Arguments are evaluated when Eventually
// is called: give a value that changes as a Lazy to show it at the failure.
func Eventually(tb testing.TB, timeout time.Duration, cond func() bool, msg string, args ...any) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("natstest: condition not met within %s: "+msg, append([]any{timeout}, args...)...)
		}
		<-tick.C
	}
}

// Never fails tb if cond becomes true within d, checking as often as
// Eventually does: the absence of an outcome that would come at once if
// the code under test were wrong (a call that must not be made).
func Never(tb testing.TB, d time.Duration, cond func() bool, msg string, args ...any) {
	tb.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		if cond() {
			tb.Fatalf("natstest: condition met within %s: "+msg, append([]any{d}, args...)...)
		}
		<-tick.C
	}
}

// Lazy formats as the result of calling it, so that a failure message
// given to Eventually shows the value at the time of the failure.
type Lazy func() any

func (l Lazy) String() string { return fmt.Sprint(l()) }

// Inbox creates a stream of the test's own, name, on subjects
// "<lowercase name>.>", with a durable consumer of explicit acks, ackWait
// and maxDeliver: its messages reach only the test, which hands them to
// the code under test as that code's own consumer would. next fetches the
// next message, or nil when none came within wait.
func Inbox(tb testing.TB, js jetstream.JetStream, name string, ackWait time.Duration, maxDeliver int) (next func(wait time.Duration) jetstream.Msg) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{strings.ToLower(name) + ".>"}})
	if err != nil {
		tb.Fatal(err)
	}
	cons, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "inbox", AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: ackWait, MaxDeliver: maxDeliver})
	if err != nil {
		tb.Fatal(err)
	}
	return func(wait time.Duration) jetstream.Msg {
		tb.Helper()
		b, err := cons.Fetch(1, jetstream.FetchMaxWait(wait))
		if err != nil {
			tb.Fatal(err)
		}
		for m := range b.Messages() {
			return m
		}
		return nil
	}
}

// Cluster is a JetStream cluster of in-process servers with routes on
// loopback. Every server has the tags ClusterTag and "node:<name>".
type Cluster struct {
	// Name is the cluster's name (for streams.cluster placement).
	Name    string
	Servers []*Server
	opts    []natsd.Options
}

// ClusterTag is the server tag every server of StartCluster has (for
// streams.tags placement).
const ClusterTag = "tenaz-test"

// StartCluster starts n servers (file store in temp dirs, fixed loopback
// client and route ports, so that a restarted server keeps its address)
// and waits until the JetStream meta group has a leader and knows every
// server. It applies no streams. Everything stops when the test ends.
func StartCluster(tb testing.TB, n int) *Cluster {
	tb.Helper()
	ports := freePorts(tb, 2*n)
	c := &Cluster{Name: "tenaz-test"}
	var routes []*url.URL
	for i := range n {
		routes = append(routes, &url.URL{Scheme: "nats-route", Host: fmt.Sprintf("127.0.0.1:%d", ports[n+i])})
	}
	for i := range n {
		name := fmt.Sprintf("n%d", i+1)
		clusterPort := ports[n+i]
		o := natsd.Options{StoreDir: tb.TempDir(), Listen: fmt.Sprintf("127.0.0.1:%d", ports[i]), ServerName: name,
			Configure: func(so *server.Options) {
				so.Cluster.Name = c.Name
				so.Cluster.Host = "127.0.0.1"
				so.Cluster.Port = clusterPort
				so.Routes = routes
				so.Tags = jwt.TagList{ClusterTag, "node:" + name}
			}}
		c.opts = append(c.opts, o)
		srv, err := natsd.Start(o)
		if err != nil {
			tb.Fatalf("natstest: start cluster server %s: %v", name, err)
		}
		s := &Server{Server: srv, Dir: o.StoreDir}
		tb.Cleanup(s.Stop)
		c.Servers = append(c.Servers, s)
	}
	Eventually(tb, 30*time.Second, func() bool {
		for _, s := range c.Servers {
			if s.Running() && s.JetStreamIsLeader() && len(s.JetStreamClusterPeers()) == n {
				return true
			}
		}
		return false
	}, "a JetStream meta leader that knows all %d servers", n)
	return c
}

// freePorts returns n distinct free loopback ports (FreePort).
func freePorts(tb testing.TB, n int) []int {
	tb.Helper()
	var ports []int
	for len(ports) < n {
		if p := FreePort(tb); !slices.Contains(ports, p) {
			ports = append(ports, p)
		}
	}
	return ports
}

// FreePort returns a loopback port nobody listens on, for a config that
// must name its port before its listener starts. It is below the
// ephemeral range (32768-60999 by default), which every ":0" listener and
// outgoing connection of the tests running beside it draws from: a port
// picked and released there was taken again before the config's listener
// bound it ("address already in use").
func FreePort(tb testing.TB) int {
	tb.Helper()
	for range 100 {
		p := 20000 + rand.IntN(12000)
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue // taken: another
		}
		ln.Close()
		return p
	}
	tb.Fatal("natstest: no free port in 20000-31999")
	return 0
}

// URLs is the client URLs of every server, comma separated (nats.url).
func (c *Cluster) URLs() string {
	var us []string
	for _, o := range c.opts {
		us = append(us, "nats://"+o.Listen)
	}
	return strings.Join(us, ",")
}

// Conn connects to the cluster (any server); the connection closes when
// the test ends.
func (c *Cluster) Conn(tb testing.TB) (*nats.Conn, jetstream.JetStream) {
	tb.Helper()
	nc, err := nats.Connect(c.URLs(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		tb.Fatalf("natstest: connect cluster: %v", err)
	}
	tb.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatalf("natstest: jetstream: %v", err)
	}
	return nc, js
}

// StreamLeader returns the index of the server leading stream (of the
// default account), or -1 when none does (an election is under way).
func (c *Cluster) StreamLeader(stream string) int {
	for i, s := range c.Servers {
		if s.Running() && s.JetStreamIsStreamLeader(server.DEFAULT_GLOBAL_ACCOUNT, stream) {
			return i
		}
	}
	return -1
}

// Restart starts server i again on its store and addresses (after Stop).
func (c *Cluster) Restart(tb testing.TB, i int) {
	tb.Helper()
	srv, err := natsd.Start(c.opts[i])
	if err != nil {
		tb.Fatalf("natstest: restart %s: %v", c.opts[i].ServerName, err)
	}
	s := &Server{Server: srv, Dir: c.opts[i].StoreDir}
	tb.Cleanup(s.Stop)
	c.Servers[i] = s
}
