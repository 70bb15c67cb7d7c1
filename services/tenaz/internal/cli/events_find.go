package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/tenaz/tenaz/pkg/client"
	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/pkg/state"
)

// EventsFindCmd is `tenaz events find`.
type EventsFindCmd struct {
	Account        string `help:"Only this account (an API key: its own, the default)."`
	Kind           string `help:"Only this kind."`
	State          string `help:"Only events in this state (scheduled, pending, running, retrying, awaiting_callback, polling, done, dead, manual_review, cancelled)."`
	Entity         string `help:"Only events about this entity id."`
	IdempotencyKey string `name:"idempotency-key" help:"The event of --account with this idempotency key."`
	ProviderRef    string `name:"provider-ref" help:"Events a provider gave this job id (reference)."`
	Since          string `placeholder:"TIME" help:"Only events created at or after TIME: RFC 3339, a date (2026-11-30) or a duration ago (24h)."`
	Until          string `placeholder:"TIME" help:"Only events created before TIME (same forms as --since)."`
	Limit          int    `help:"Page size, 1-${max_limit} (default ${default_limit}, or ${max_limit} with --all)."`
	Cursor         string `help:"Page to show: the next_cursor of the previous page."`
	All            bool   `help:"Fetch every page (the JSON is one list)."`
}

// Run searches.
func (c *EventsFindCmd) Run(cl *Connection, env *Env) error {
	limit := c.Limit
	switch {
	case limit == 0 && c.All:
		limit = ops.MaxLimit
	case limit == 0:
		limit = ops.DefaultLimit
	case limit < 1 || limit > ops.MaxLimit:
		return failf(ErrUsage, "--limit %d: want 1-%d", limit, ops.MaxLimit)
	}
	req := ops.FindRequest{Account: c.Account, Kind: c.Kind, EntityID: c.Entity, IdempotencyKey: c.IdempotencyKey,
		ProviderRef: c.ProviderRef, Cursor: c.Cursor, Limit: limit}
	if c.State != "" {
		st, err := state.ParseState(c.State)
		if err != nil {
			return failf(ErrUsage, "--state %q: %v", c.State, err)
		}
		req.State = st
	}
	if c.IdempotencyKey != "" && c.Account == "" {
		return failf(ErrUsage, "--idempotency-key needs --account: keys are per account")
	}
	now := time.Now()
	var err error
	if req.Since, err = parseWhen("--since", c.Since, now); err != nil {
		return err
	}
	if req.Until, err = parseWhen("--until", c.Until, now); err != nil {
		return err
	}
	if req.Since != nil && req.Until != nil && !req.Since.Before(*req.Until) {
		return failf(ErrUsage, "--since %s is not before --until %s", stamp(*req.Since), stamp(*req.Until))
	}
	s, err := cl.open(env)
	if err != nil {
		return err
	}
	defer s.close()
	out := ops.FindReply{Items: []ops.EventItem{}}
	for {
		page, err := do(s, func(ctx context.Context, tz *client.Client) (ops.FindReply, error) { return tz.Find(ctx, req) })
		if err != nil {
			return err
		}
		out.Items = append(out.Items, page.Items...)
		out.NextCursor = page.NextCursor
		if !c.All || page.NextCursor == "" {
			break
		}
		req.Cursor = page.NextCursor
	}
	return s.emit(out, func(w io.Writer) {
		row(w, "ID", "ACCOUNT", "KIND", "STATE", "STAGE", "ATTEMPTS", "ENTITY", "CREATED", "UPDATED", "NEXT")
		for _, it := range out.Items {
			next := ""
			if it.NextRunAt != nil {
				next = stamp(*it.NextRunAt)
			}
			row(w, it.ID, it.Account, it.Kind, it.State, it.Stage, it.Attempts, it.EntityID, it.CreatedAt, it.UpdatedAt, next)
		}
		fmt.Fprintf(w, "%d shown", len(out.Items))
		if out.NextCursor != "" {
			fmt.Fprintf(w, "; next page: --cursor %s", out.NextCursor)
		}
		fmt.Fprintln(w)
	})
}
