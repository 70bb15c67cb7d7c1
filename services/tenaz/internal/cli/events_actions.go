package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/tenaz/tenaz/pkg/client"
	"github.com/tenaz/tenaz/pkg/ops"
)

// EventsRetryCmd is `tenaz events retry <id>`.
type EventsRetryCmd struct {
	ID      string `arg:"" help:"Event id (ev_…) of a retrying or scheduled event."`
	Message string `short:"m" required:"" help:"Why, recorded in the event's history (required)."`
	Yes     bool   `short:"y" help:"Do it without asking."`
}

// Run retries now.
func (c *EventsRetryCmd) Run(cl *Connection, env *Env) error {
	return eventAction(cl, env, c.ID, c.Yes, fmt.Sprintf("Retry %s now: its next attempt is made at once", c.ID),
		func(ctx context.Context, tz *client.Client) (ops.EventReply, error) {
			return tz.RetryNow(ctx, c.ID, c.Message)
		})
}

// EventsCancelWaitCmd is `tenaz events cancel-wait <id>`.
type EventsCancelWaitCmd struct {
	ID      string `arg:"" help:"Event id (ev_…) of an event awaiting its callback or polling."`
	Message string `short:"m" required:"" help:"Why, recorded in the event's history (required)."`
	Yes     bool   `short:"y" help:"Do it without asking."`
}

// Run cancels the wait.
func (c *EventsCancelWaitCmd) Run(cl *Connection, env *Env) error {
	return eventAction(cl, env, c.ID, c.Yes, fmt.Sprintf("Stop waiting for %s: it is cancelled, and a callback or poll answer that comes later is recorded and ignored", c.ID),
		func(ctx context.Context, tz *client.Client) (ops.EventReply, error) {
			return tz.CancelWait(ctx, c.ID, c.Message)
		})
}

func eventAction(cl *Connection, env *Env, id string, yes bool, what string, act func(context.Context, *client.Client) (ops.EventReply, error)) error {
	if err := checkID(id); err != nil {
		return err
	}
	if err := confirm(env, yes, what); err != nil {
		return err
	}
	return call(cl, env, act, func(w io.Writer, v ops.EventReply) {
		row(w, "ID", "ACCOUNT", "KIND", "STATUS", "NEXT RUN")
		row(w, v.ID, v.Account, v.Kind, v.Status, v.NextRunAt)
	})
}
