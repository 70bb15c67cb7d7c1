package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/outcome"
	"github.com/tenaz/tenaz/pkg/target"
)

// Handler delivers an event in Go instead of an HTTP call: Go teams that
// embed the dispatcher register one per name (Options.Handlers) and route
// a kind to it with `handler: <name>` in the config. The handler's error is
// the outcome, as for a target: nil is done, outcome.Permanent(err) dead-
// letters at once, outcome.RetryAfter(d, err) retries no sooner than d,
// any other error is transient and retried with the kind's backoff. A
// handler may run more than once for one event (a crash after its side
// effect, before tenaz stored the outcome): make its effects idempotent,
// for example with pkg/effect.
type Handler interface {
	Deliver(ctx context.Context, d Delivery) (Result, error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, d Delivery) (Result, error)

// Deliver calls f.
func (f HandlerFunc) Deliver(ctx context.Context, d Delivery) (Result, error) { return f(ctx, d) }

// Delivery is one attempt handed to a Handler.
type Delivery struct {
	Event     event.Envelope // id, account, kind, idempotency key, payload…
	Attempt   int            // 1-based, per stage
	Stage     string         // "primary" or "fallback"
	Reference string         // the provider's job id from an earlier step, if any
}

// Result is what a successful handler reports; both fields are optional.
type Result struct {
	Reference string          // kept as the event's reference
	Body      json.RawMessage // kept as the event's result (≤ 4 KiB of JSON)
}

// ErrHandlerNotRegistered is returned by Start when the config routes a
// kind to a handler name that Options.Handlers does not have.
var ErrHandlerNotRegistered = errors.New("dispatcher: handler not registered")

// checkHandlers verifies every handler the config names is registered.
func (s *Service) checkHandlers() error {
	var errs []error
	check := func(key, handler string) {
		if handler != "" && s.o.Handlers[handler] == nil {
			errs = append(errs, fmt.Errorf("%w: %s names %q", ErrHandlerNotRegistered, key, handler))
		}
	}
	for name, k := range s.cfg.Kinds {
		check("kinds."+name+".handler", k.Handler)
		if k.Fallback != nil {
			check("kinds."+name+".fallback.handler", k.Fallback.Handler)
		}
	}
	return errors.Join(errs...)
}

// callHandler runs a registered handler as a delivery attempt, bounded by
// its stage's timeout as a target's call is by the target's: a hung
// handler is a transient failure, not a slot held forever. A panic is a
// transient failure (logged with its stack), never a dead dispatcher.
func (s *Service) callHandler(ctx context.Context, h Handler, d Delivery, timeout time.Duration) (target.Response, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, timeout, outcome.ErrTimeout)
	defer cancel()
	res, err := func() (res Result, err error) {
		defer func() {
			if p := recover(); p != nil {
				s.log.Error().Str("event_id", d.Event.ID).Str("stack", string(debug.Stack())).Msgf("handler panicked: %v", p)
				err = fmt.Errorf("handler panicked: %v", p)
			}
		}()
		return h.Deliver(ctx, d)
	}()
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && errors.Is(context.Cause(ctx), outcome.ErrTimeout) && !errors.Is(err, outcome.ErrTimeout) {
			err = fmt.Errorf("%w (%s): %w", outcome.ErrTimeout, timeout, err) // the handler returned its context's error
		}
		return target.Response{}, err
	}
	return target.Response{Status: 200, Body: res.Body, Reference: res.Reference}, nil
}
