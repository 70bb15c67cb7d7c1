// Package natstest starts a real embedded nats-server with JetStream on a
// random port and a temporary file store for tests, applies tenaz's
// streams, and cleans everything up when the test ends.
//
//	s := natstest.Start(t)
//	nc, js := s.Conn(t)
package natstest

import (
	"context"
	"testing"
	"time"

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
	if err := streams.Apply(ctx, js, streams.Options{}); err != nil {
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
// the test with msg after timeout.
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
