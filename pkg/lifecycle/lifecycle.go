// Package lifecycle is the start and stop every tenaz service shares.
//
// A service embeds a Base and hands Start its own start function, which
// registers, with Defer, how to undo each thing it sets up. Stop undoes
// them in reverse order; so does a start that fails half way, so a failed
// Start leaves nothing running. Start and Stop are serialised and
// idempotent, and Stop is safe before Start. Ready says whether the
// service is started and its NATS connection up.
//
//	func (s *Service) Start(ctx context.Context) error { return s.Base.Start(ctx, s.start) }
//
//	func (s *Service) start(ctx context.Context) error {
//		cc, err := cons.Consume(s.handle)
//		if err != nil {
//			return err
//		}
//		s.Defer(func(context.Context) { cc.Drain(); <-cc.Closed() })
//		…
//	}
package lifecycle

import (
	"context"
	"errors"
	"sync"

	"github.com/nats-io/nats.go"
)

// Base is the lifecycle state of one service.
type Base struct {
	name string
	nc   *nats.Conn

	op sync.Mutex // serialises Start and Stop

	mu      sync.Mutex // guards started, so Ready never waits for a Stop's drain
	started bool

	undo []func(context.Context) // what Stop undoes, in reverse order
}

// Init names the service (its errors begin with the name) and its
// connection, whose state Ready reports. Call it once, before Start.
func (b *Base) Init(name string, nc *nats.Conn) { b.name, b.nc = name, nc }

// Start runs start unless the service is started. start registers with
// Defer what Stop must undo; if it fails, that is undone at once, in
// reverse order, and its error returned.
func (b *Base) Start(ctx context.Context, start func(context.Context) error) error {
	b.op.Lock()
	defer b.op.Unlock()
	if b.Started() {
		return nil
	}
	b.undo = nil
	if err := start(ctx); err != nil {
		b.unwind(ctx)
		return err
	}
	b.mu.Lock()
	b.started = true
	b.mu.Unlock()
	return nil
}

// Defer registers f to run at Stop, before everything registered earlier.
// Call it only from the start function given to Start.
func (b *Base) Defer(f func(context.Context)) { b.undo = append(b.undo, f) }

// Stop undoes what Start set up, in reverse order, within ctx as each
// undo allows. Idempotent, and safe before Start.
func (b *Base) Stop(ctx context.Context) error {
	b.op.Lock()
	defer b.op.Unlock()
	b.mu.Lock()
	was := b.started
	b.started = false
	b.mu.Unlock()
	if was {
		b.unwind(ctx)
	}
	return nil
}

func (b *Base) unwind(ctx context.Context) {
	for i := len(b.undo) - 1; i >= 0; i-- {
		b.undo[i](ctx)
	}
	b.undo = nil
}

// Started reports whether Start succeeded and Stop has not begun since.
func (b *Base) Started() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.started
}

// Ready reports whether the service is started and connected.
func (b *Base) Ready() error {
	if !b.Started() {
		return errors.New(b.name + " not started")
	}
	if b.nc != nil && !b.nc.IsConnected() {
		return errors.New(b.name + ": NATS not connected")
	}
	return nil
}
