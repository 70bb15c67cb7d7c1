package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/tenaz/tenaz/pkg/client"
	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/names"
)

// EventsCmd is `tenaz events`.
type EventsCmd struct {
	Connection `embed:""`

	Submit  EventsSubmitCmd  `cmd:"" help:"Submit an event (what POST /v1/events does); --wait follows it to its outcome."`
	Get     EventsGetCmd     `cmd:"" help:"Show an event's status (what GET /v1/events/{id} answers)."`
	Wait    EventsWaitCmd    `cmd:"" help:"Wait until an event is done, cancelled, dead or in manual review, then show it."`
	History EventsHistoryCmd `cmd:"" help:"Show everything that happened to an event, in order."`
	Find    EventsFindCmd    `cmd:"" help:"Find events in any state by account, kind, state, entity, idempotency key, provider reference and creation time (cursor-paged)."`
	Cancel  EventsCancelCmd  `cmd:"" help:"Cancel a scheduled, pending or retrying event (exit 4 otherwise)."`

	Retry      EventsRetryCmd      `cmd:"" help:"Retry a retrying or scheduled event now (operator; exit 4 otherwise)."`
	CancelWait EventsCancelWaitCmd `cmd:"" name:"cancel-wait" help:"Stop waiting for an event's callback or poll: it is cancelled (operator; exit 4 otherwise)."`
}

// EventsSubmitCmd is `tenaz events submit`.
type EventsSubmitCmd struct {
	Account     string        `required:"" help:"Account."`
	Kind        string        `required:"" help:"Kind (as in the config's kinds)."`
	Payload     string        `required:"" placeholder:"JSON|@FILE|-" help:"The payload: inline JSON, @file, or - for stdin."`
	Key         string        `help:"Idempotency key (default: derived from kind, entity and payload)."`
	Entity      string        `help:"Entity id (default: the kind's entity field of the payload)."`
	OrderingKey string        `help:"Ordering key: events with the same one are delivered in order."`
	NotBefore   string        `placeholder:"TIME" help:"Deliver at or after TIME (RFC 3339)."`
	Wait        bool          `help:"Wait for the outcome (as events wait) and show the event then."`
	Within      time.Duration `default:"10m" help:"With --wait: how long to wait."`
}

// Run submits.
func (c *EventsSubmitCmd) Run(cl *Connection, env *Env) error {
	p, err := readPayload(c.Payload, env)
	if err != nil {
		return err
	}
	if c.NotBefore != "" {
		if _, err := time.Parse(time.RFC3339, c.NotBefore); err != nil {
			return failf(ErrUsage, "--not-before %q: want an RFC 3339 time (2026-11-30T08:00:00Z)", c.NotBefore)
		}
	}
	s, err := cl.open(env)
	if err != nil {
		return err
	}
	defer s.close()
	sub := event.Submission{Account: c.Account, Kind: c.Kind, EntityID: c.Entity, OrderingKey: c.OrderingKey, NotBefore: c.NotBefore, Payload: p}
	var opts []client.SubmitOption
	if c.Key != "" {
		opts = append(opts, client.IdempotencyKey(c.Key))
	}
	r, err := do(s, func(ctx context.Context, tz *client.Client) (client.Receipt, error) {
		return tz.Submit(ctx, sub, opts...)
	})
	if err != nil {
		return err
	}
	if !c.Wait {
		return s.emit(r.View, func(w io.Writer) { printEvent(w, r.View) })
	}
	return wait(s, r.ID, c.Within)
}

// EventsWaitCmd is `tenaz events wait <id>`.
type EventsWaitCmd struct {
	ID     string        `arg:"" help:"Event id (ev_…)."`
	Within time.Duration `default:"10m" help:"How long to wait (exit 5 when it runs out)."`
}

// Run waits.
func (c *EventsWaitCmd) Run(cl *Connection, env *Env) error {
	if err := checkID(c.ID); err != nil {
		return err
	}
	s, err := cl.open(env)
	if err != nil {
		return err
	}
	defer s.close()
	return wait(s, c.ID, c.Within)
}

// wait follows an event until client.Settled (or within ends: exit 5)
// and prints it.
func wait(s *session, id string, within time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	v, err := s.tz.Wait(ctx, id)
	if errors.Is(err, context.DeadlineExceeded) {
		return failf(ErrUnavailable, "%v (--within %s)", err, within)
	}
	if err != nil {
		return err
	}
	return s.emit(v, func(w io.Writer) { printEvent(w, v) })
}

// EventsGetCmd is `tenaz events get <id>`.
type EventsGetCmd struct {
	ID string `arg:"" help:"Event id (ev_…)."`
}

// EventsHistoryCmd is `tenaz events history <id>`.
type EventsHistoryCmd struct {
	ID string `arg:"" help:"Event id (ev_…)."`
}

// EventsCancelCmd is `tenaz events cancel <id>`.
type EventsCancelCmd struct {
	ID      string `arg:"" help:"Event id (ev_…)."`
	Message string `short:"m" help:"Why, recorded in the event's history." default:"cancelled by operator"`
}

func checkID(id string) error {
	if err := names.ValidateEventID(id); err != nil {
		return failf(ErrUsage, "%q is not an event id (want ev_ followed by 26 characters)", id)
	}
	return nil
}

// Run gets the event.
func (c *EventsGetCmd) Run(cl *Connection, env *Env) error {
	if err := checkID(c.ID); err != nil {
		return err
	}
	return call(cl, env, func(ctx context.Context, tz *client.Client) (event.View, error) { return tz.Get(ctx, c.ID) }, func(w io.Writer, v event.View) { printEvent(w, v) })
}

func printEvent(w io.Writer, v event.View) {
	row(w, "ID", v.ID)
	row(w, "STATUS", v.Status)
	row(w, "ACCOUNT", v.Account)
	row(w, "KIND", v.Kind)
	row(w, "ENTITY", v.EntityID)
	if v.OrderingKey != "" {
		row(w, "ORDERING KEY", v.OrderingKey)
	}
	row(w, "IDEMPOTENCY KEY", v.IdempotencyKey)
	row(w, "STAGE", v.Stage)
	row(w, "ATTEMPTS", v.Attempts)
	if v.Replays > 0 {
		row(w, "REPLAYS", v.Replays)
	}
	if v.LastError != nil {
		e := v.LastError.Class
		if v.LastError.HTTPStatus != 0 {
			e += " " + strconv.Itoa(v.LastError.HTTPStatus)
		}
		row(w, "LAST ERROR", e+": "+short(v.LastError.Message, 120))
	}
	if v.NextRunAt != nil {
		row(w, "NEXT RUN", v.NextRunAt)
	}
	if v.Reference != "" {
		row(w, "REFERENCE", v.Reference)
	}
	if len(v.Result) > 0 {
		row(w, "RESULT", short(string(v.Result), 120))
	}
	row(w, "CREATED", v.CreatedAt)
	row(w, "UPDATED", v.UpdatedAt)
}

// Run prints the history.
func (c *EventsHistoryCmd) Run(cl *Connection, env *Env) error {
	if err := checkID(c.ID); err != nil {
		return err
	}
	return call(cl, env, func(ctx context.Context, tz *client.Client) (event.HistoryView, error) { return tz.History(ctx, c.ID) }, func(w io.Writer, h event.HistoryView) {
		row(w, "AT", "ACTION", "FROM", "TO", "ATTEMPT", "STAGE", "ACTOR", "HTTP", "DETAIL")
		for _, e := range h.History {
			attempt, httpStatus := "", ""
			if e.Attempt > 0 {
				attempt = strconv.Itoa(e.Attempt)
			}
			if e.HTTPStatus > 0 {
				httpStatus = strconv.Itoa(e.HTTPStatus)
			}
			row(w, e.At, e.Action, e.From, e.To, attempt, e.Stage, e.Actor, httpStatus, short(e.Detail, 80))
		}
		if h.Truncated > 0 {
			fmt.Fprintf(w, "(%d older entries dropped)\n", h.Truncated)
		}
	})
}

// Run cancels the event.
func (c *EventsCancelCmd) Run(cl *Connection, env *Env) error {
	if err := checkID(c.ID); err != nil {
		return err
	}
	return call(cl, env, func(ctx context.Context, tz *client.Client) (event.View, error) {
		return tz.Cancel(ctx, c.ID, c.Message)
	}, func(w io.Writer, v event.View) { printEvent(w, v) })
}
