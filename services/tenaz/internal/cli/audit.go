package cli

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/tenaz/tenaz/pkg/client"
	"github.com/tenaz/tenaz/pkg/ops"
)

// URLEnv names the environment variable with tenaz's HTTP API (for the
// commands only the HTTP API serves); DefaultURL is where tenaz run
// listens unless configured otherwise.
const (
	URLEnv     = "TENAZ_URL"
	DefaultURL = "http://localhost:8080"
)

// EntityCmd is `tenaz entity`: what happened to a business entity.
type EntityCmd struct {
	Connection `embed:""`

	History EntityHistoryCmd `cmd:"" help:"Everything that happened to an entity of an account, across its events, in order: stages, callbacks, polls, operator actions; from the audit archive, so also after the records expired."`
}

// EntityHistoryCmd is `tenaz entity history <account> <entity>`.
type EntityHistoryCmd struct {
	Account string `arg:"" help:"The account."`
	Entity  string `arg:"" help:"The entity id the events were submitted with (entity_id), not an ev_… id."`
}

// Run prints the timeline.
func (c *EntityHistoryCmd) Run(cl *Connection, env *Env) error {
	return call(cl, env, func(ctx context.Context, tz *client.Client) (ops.TimelineReply, error) {
		return tz.EntityTimeline(ctx, c.Account, c.Entity)
	}, func(w io.Writer, rep ops.TimelineReply) {
		row(w, "EVENT", "KIND", "STATUS", "STAGE", "FIRST", "LAST", "RECORD")
		for _, ev := range rep.Events {
			rec := "kept"
			if !ev.Live {
				rec = "expired"
			}
			row(w, ev.ID, ev.Kind, ev.Status, ev.Stage, ev.FirstAt, ev.LastAt, rec)
		}
		fmt.Fprintln(w)
		row(w, "AT", "EVENT", "STEP", "ACTION", "FROM", "TO", "STAGE", "ATTEMPT", "ACTOR", "DETAIL")
		for _, e := range rep.Items {
			detail := e.Detail
			if e.EventID == "" { // an action on the account or a breaker
				detail = e.Reason
				if e.Target != "" {
					detail = e.Target + ": " + detail
				}
			}
			if e.Count > 1 {
				detail = fmt.Sprintf("%s (×%d)", detail, e.Count)
			}
			row(w, e.At, e.EventID, e.Step, e.Action, e.From, e.To, e.Stage, e.Attempt, e.Actor, detail)
		}
		if rep.Truncated {
			fmt.Fprintf(w, "(only the first %d entries)\n", ops.MaxTimeline)
		}
	})
}

// AuditCmd is `tenaz audit`: the audit archive.
type AuditCmd struct {
	Export AuditExportCmd `cmd:"" help:"Write the audit archive's entries (every step of every event, operator actions) as JSON Lines, over tenaz's HTTP API."`
}

// AuditExportCmd is `tenaz audit export --since <time>`.
type AuditExportCmd struct {
	Since   string        `placeholder:"TIME" help:"Entries at or after TIME: RFC 3339, a date (2026-11-30) or a duration ago (24h). Required unless --event."`
	Until   string        `placeholder:"TIME" help:"Entries before TIME (same forms); default: now."`
	Account string        `help:"Only this account (an API key: its own, the default)."`
	Event   string        `help:"Only this event (ev_…)."`
	Output  string        `short:"o" placeholder:"FILE" predictor:"file" help:"Write to FILE instead of stdout."`
	URL     string        `name:"url" placeholder:"URL" help:"tenaz's HTTP API (the deadletter service's routes). Env ${url_env}; else ${default_url}."`
	Timeout time.Duration `default:"1h" help:"How long the whole export may take."`
}

// Run exports.
func (c *AuditExportCmd) Run(env *Env) error {
	now := time.Now()
	req := ops.ExportRequest{Account: c.Account, EventID: c.Event}
	var err error
	if req.Since, err = parseWhen("--since", c.Since, now); err != nil {
		return err
	}
	if req.Until, err = parseWhen("--until", c.Until, now); err != nil {
		return err
	}
	switch {
	case req.Since == nil && c.Event == "":
		return failf(ErrUsage, "--since is required (or --event): the export starts at a time")
	case req.Since != nil && req.Until != nil && !req.Since.Before(*req.Until):
		return failf(ErrUsage, "--since %s is not before --until %s", stamp(*req.Since), stamp(*req.Until))
	}
	if c.Event != "" {
		if err := checkID(c.Event); err != nil {
			return err
		}
	}
	base := cmp.Or(c.URL, env.Getenv(URLEnv), DefaultURL)
	tz, err := client.NewHTTP(base, client.WithOperatorKey(env.Getenv(OperatorKeyEnv)))
	if err != nil {
		return failf(ErrUsage, "--url: %v", err)
	}
	out := env.Stdout
	if c.Output != "" {
		f, err := os.Create(c.Output)
		if err != nil {
			return failf(ErrUsage, "--output: %v", err)
		}
		defer f.Close()
		out = f
	}
	bw := bufio.NewWriter(out)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	ctx, cancel := context.WithTimeout(context.Background(), c.Timeout)
	defer cancel()
	n, err := tz.ExportAudit(ctx, req, func(e ops.AuditEntry) error { return enc.Encode(e) })
	if ferr := bw.Flush(); err == nil {
		err = ferr
	}
	if err != nil {
		return fmt.Errorf("audit export (after %d entries): %w", n, err)
	}
	if c.Output != "" {
		fmt.Fprintf(env.Stderr, "%d entries written to %s\n", n, c.Output)
	}
	return nil
}
