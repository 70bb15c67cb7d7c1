package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tenaz/tenaz/pkg/client"
	"github.com/tenaz/tenaz/pkg/ops"
)

// DeadCmd is `tenaz dead`.
type DeadCmd struct {
	Connection `embed:""`

	Ls      DeadLsCmd      `cmd:"" help:"List dead letters, newest first (filters combine with AND)."`
	Show    DeadShowCmd    `cmd:"" help:"Show one dead letter in full: payload, last error, timeline."`
	Replay  DeadReplayCmd  `cmd:"" help:"Replay dead events (a fresh attempt cycle): by id, or --all matching a filter as a background job with progress."`
	Discard DeadDiscardCmd `cmd:"" help:"Discard dead events with a reason (they become cancelled)."`
	Job     DeadJobCmd     `cmd:"" help:"Follow a replay job's progress until it ends (or print it once with --no-wait)."`
}

// Filter selects entries of the dead-letter or review list.
type Filter struct {
	Account string `help:"Only this account."`
	Kind    string `help:"Only this kind."`
	Class   string `help:"Only this error class (permanent, transient, timeout, crash, …)."`
	Reason  string `help:"Only this reason (permanent, attempts_exhausted, max_deliveries, terminated, rejected_at_intake, manual_review, too_large, undecodable_record)."`
	Since   string `placeholder:"TIME" help:"Only entries that arrived at or after TIME: RFC 3339 (2026-11-30T08:00:00Z), a date (2026-11-30) or a duration ago (24h)."`
	Until   string `placeholder:"TIME" help:"Only entries that arrived before TIME (same forms as --since)."`
}

// request turns the filter into ops.ListRequest.
func (f Filter) request(now time.Time) (ops.ListRequest, error) {
	r := ops.ListRequest{Account: f.Account, Kind: f.Kind, Class: f.Class, Reason: f.Reason}
	var err error
	if r.Since, err = parseWhen("--since", f.Since, now); err != nil {
		return r, err
	}
	if r.Until, err = parseWhen("--until", f.Until, now); err != nil {
		return r, err
	}
	if r.Since != nil && r.Until != nil && !r.Since.Before(*r.Until) {
		return r, failf(ErrUsage, "--since %s is not before --until %s", stamp(*r.Since), stamp(*r.Until))
	}
	return r, nil
}

func (f Filter) empty() bool { return f == Filter{} }

// parseWhen reads an RFC 3339 time, a date, or a duration before now.
func parseWhen(flag, v string, now time.Time) (*time.Time, error) {
	if v == "" {
		return nil, nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02"} {
		if t, err := time.Parse(layout, v); err == nil {
			return &t, nil
		}
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		t := now.Add(-d)
		return &t, nil
	}
	return nil, failf(ErrUsage, "%s %q: want an RFC 3339 time, a date (2006-01-02) or a duration ago (24h)", flag, v)
}

// DeadLsCmd is `tenaz dead ls`.
type DeadLsCmd struct {
	Filter `embed:""`
	Limit  int    `help:"Page size, 1-${max_limit} (default ${default_limit}, or ${max_limit} with --all)."`
	Cursor string `help:"Page to show: the next_cursor of the previous page."`
	All    bool   `help:"Fetch every page (the JSON is one list)."`
}

// Run lists dead letters.
func (c *DeadLsCmd) Run(cl *Connection, env *Env) error {
	return list(cl, env, (*client.Client).ListDead, c.Filter, c.Limit, c.Cursor, c.All)
}

// list pages through the dead letters or the reviews.
func list(cl *Connection, env *Env, fetch func(*client.Client, context.Context, ops.ListRequest) (ops.ListReply, error),
	f Filter, limit int, cursor string, all bool) error {
	switch {
	case limit == 0 && all:
		limit = ops.MaxLimit
	case limit == 0:
		limit = ops.DefaultLimit
	case limit < 1 || limit > ops.MaxLimit:
		return failf(ErrUsage, "--limit %d: want 1-%d", limit, ops.MaxLimit)
	}
	req, err := f.request(time.Now())
	if err != nil {
		return err
	}
	req.Limit, req.Cursor = limit, cursor
	s, err := cl.open(env)
	if err != nil {
		return err
	}
	defer s.close()
	var out ops.ListReply
	for {
		page, err := do(s, func(ctx context.Context, tz *client.Client) (ops.ListReply, error) { return fetch(tz, ctx, req) })
		if err != nil {
			return err
		}
		out.Items = append(out.Items, page.Items...)
		out.Total, out.NextCursor = page.Total, page.NextCursor
		if !all || page.NextCursor == "" || len(page.Items) == 0 {
			break
		}
		req.Cursor = page.NextCursor
	}
	if out.Items == nil {
		out.Items = []ops.Item{}
	}
	return s.emit(out, func(w io.Writer) {
		row(w, "ID", "ACCOUNT", "KIND", "STATUS", "REASON", "CLASS", "HTTP", "ATTEMPTS", "STAGE", "AT", "ERROR")
		for _, it := range out.Items {
			id := entryID(it)
			httpStatus := ""
			if it.HTTPStatus > 0 {
				httpStatus = strconv.Itoa(it.HTTPStatus)
			}
			row(w, id, it.Account, it.Kind, it.Status, it.Reason, it.Class, httpStatus, it.Attempts, it.Stage, it.At, short(it.Error, 60))
		}
		fmt.Fprintf(w, "%d shown, %d matching", len(out.Items), out.Total)
		if out.NextCursor != "" {
			fmt.Fprintf(w, "; next page: --cursor %s", out.NextCursor)
		}
		fmt.Fprintln(w)
	})
}

// A dead letter's id is the API's (GET /v1/dead lists it, and the
// OpenAPI document names it so): the event id, or seq_N for an entry
// without an event (a refused submission), N its DEAD stream sequence.

// entryID is the id of it as the API gives it; a deadletter older than the
// seq_N ids lists an entry without an event with no id.
func entryID(it ops.Item) string {
	if it.ID == "" {
		return "seq_" + strconv.FormatUint(it.Seq, 10)
	}
	return it.ID
}

// parseRef reads a dead letter's id as `dead ls` prints it, or seq:N,
// the form it printed before, which scripts may still use.
func parseRef(ref string) (id string, seq uint64, err error) {
	n, ok := strings.CutPrefix(ref, "seq_")
	if !ok {
		n, ok = strings.CutPrefix(ref, "seq:")
	}
	if ok {
		seq, err := strconv.ParseUint(n, 10, 64)
		if err != nil || seq == 0 {
			return "", 0, failf(ErrUsage, "%q: want seq_N with N a DEAD stream sequence", ref)
		}
		return "", seq, nil
	}
	return ref, 0, checkID(ref)
}

// DeadShowCmd is `tenaz dead show <id>`.
type DeadShowCmd struct {
	Ref string `arg:"" name:"id" help:"Event id (ev_…), or seq_N for an entry without an event (as dead ls prints it)."`
}

// Run shows one dead letter.
func (c *DeadShowCmd) Run(cl *Connection, env *Env) error {
	id, seq, err := parseRef(c.Ref)
	if err != nil {
		return err
	}
	return call(cl, env, func(ctx context.Context, tz *client.Client) (ops.ShowReply, error) {
		return tz.ShowDead(ctx, ops.ShowRequest{ID: id, Seq: seq})
	}, func(w io.Writer, rep ops.ShowReply) { printShow(w, rep) })
}

func printShow(w io.Writer, rep ops.ShowReply) {
	it := rep.Item
	row(w, "ID", entryID(it))
	row(w, "STATUS", it.Status)
	row(w, "ACCOUNT", it.Account)
	row(w, "KIND", it.Kind)
	row(w, "REASON", it.Reason)
	last := it.Class
	if it.HTTPStatus > 0 {
		last += " " + strconv.Itoa(it.HTTPStatus)
	}
	if it.Error != "" {
		last += ": " + short(it.Error, 200)
	}
	row(w, "LAST ERROR", last)
	row(w, "ATTEMPTS", it.Attempts)
	row(w, "STAGE", it.Stage)
	row(w, "DEAD AT", it.At)
	row(w, "DEAD SEQ", it.Seq)
	if rep.Event != nil {
		row(w, "PAYLOAD", compactJSON(rep.Event.Payload))
	}
	if rep.RawSubject != "" || len(rep.Raw) > 0 {
		row(w, "RAW SUBJECT", rep.RawSubject)
		for _, k := range slices.Sorted(maps.Keys(rep.RawHeader)) {
			row(w, "RAW HEADER", k+": "+strings.Join(rep.RawHeader[k], ", "))
		}
		row(w, "RAW", short(string(rep.Raw), 400))
	}
	if rep.Record != nil && len(rep.Record.History) > 0 {
		fmt.Fprintln(w)
		row(w, "AT", "ACTION", "FROM", "TO", "ATTEMPT", "STAGE", "ACTOR", "HTTP", "DETAIL")
		for _, e := range rep.Record.History {
			attempt, httpStatus := "", ""
			if e.Attempt > 0 {
				attempt = strconv.Itoa(e.Attempt)
			}
			if e.HTTPStatus > 0 {
				httpStatus = strconv.Itoa(e.HTTPStatus)
			}
			row(w, e.At, e.Action, e.From, e.To, attempt, e.Stage, e.Actor, httpStatus, short(e.Detail, 80))
		}
	}
}

// compactJSON prints JSON on one line (or the bytes as they are).
func compactJSON(b []byte) string {
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return short(string(b), 400)
	}
	return short(buf.String(), 400)
}

// DeadReplayCmd is `tenaz dead replay`.
type DeadReplayCmd struct {
	IDs     []string `arg:"" optional:"" name:"id" help:"Event ids to replay now (up to ${max_selection}); a refused submission (seq_N) has no event to replay."`
	All     bool     `help:"Replay every dead letter matching the filter flags, as a background job (rate limited, resumable); the command follows its progress."`
	Filter  `embed:""`
	Payload *string       `placeholder:"JSON|@FILE|-" help:"Replace the payload (one id only): inline JSON, @file, or - for stdin."` // nil: not given, told apart from an empty one
	Stage   string        `enum:",primary,fallback" default:"" help:"Stage to replay at: primary or fallback (default: the stage it died in)."`
	Message string        `short:"m" help:"Why, recorded in each event's history." default:"replayed by operator"`
	Rate    float64       `help:"Replays per second of a --all job (0: the service's default, ${default_rate})."`
	NoWait  bool          `help:"With --all: print the job id and return without following it."`
	Yes     bool          `short:"y" help:"With --all and no filter (every account's dead letters): replay without asking."`
	Poll    time.Duration `default:"500ms" hidden:"" help:"How often to poll a job's progress."`
}

// Run replays.
func (c *DeadReplayCmd) Run(cl *Connection, env *Env) error {
	switch {
	case c.All && len(c.IDs) > 0:
		return failf(ErrUsage, "give event ids or --all with filters, not both")
	case !c.All && len(c.IDs) == 0:
		return failf(ErrUsage, "give event ids to replay, or --all with filters (--account, --kind, …) to replay every match")
	case !c.All && !c.Filter.empty():
		return failf(ErrUsage, "filter flags select what --all replays; add --all, or give ids only")
	case len(c.IDs) > ops.MaxSelection:
		return failf(ErrUsage, "%d ids: at most %d per call (use --all with a filter)", len(c.IDs), ops.MaxSelection)
	case c.Payload != nil && *c.Payload == "": // else the original payload would be replayed as if no edit was asked for
		return failf(ErrUsage, "--payload is empty: give the JSON, @file or - for stdin, or leave --payload out to replay the payload as it was")
	case c.Payload != nil && len(c.IDs) != 1:
		return failf(ErrUsage, "--payload replaces one event's payload: give exactly one id")
	case c.Rate < 0:
		return failf(ErrUsage, "--rate %g: want 0 or more", c.Rate)
	}
	for i, id := range c.IDs {
		_, seq, err := parseRef(id)
		if err != nil {
			return err
		}
		if seq != 0 { // the service says why it has nothing to replay
			c.IDs[i] = entryID(ops.Item{Seq: seq})
		}
	}
	req := ops.ReplayRequest{IDs: c.IDs, Stage: c.Stage, Reason: c.Message, RatePerSecond: c.Rate}
	if c.Payload != nil {
		p, err := readPayload(*c.Payload, env)
		if err != nil {
			return err
		}
		req.Payload = p
	}
	if c.All {
		f, err := c.Filter.request(time.Now())
		if err != nil {
			return err
		}
		req.Filter = &f
		if c.Filter.empty() {
			if err := confirm(env, c.Yes, "Replay every dead letter of every account (no filter given), as a background job"); err != nil {
				return err
			}
		}
	}
	s, err := cl.open(env)
	if err != nil {
		return err
	}
	defer s.close()
	rep, err := do(s, func(ctx context.Context, tz *client.Client) (ops.ReplayReply, error) { return tz.Replay(ctx, req) })
	if err != nil {
		return err
	}
	if rep.JobID == "" {
		if err := s.emit(rep, func(w io.Writer) { printCounts(w, "replayed", rep.Replayed, rep.Skipped, rep.Errors) }); err != nil {
			return err
		}
		return countsError("replay", rep.Replayed, rep.Skipped, rep.Errors)
	}
	if c.NoWait {
		return s.emit(rep, func(w io.Writer) {
			fmt.Fprintf(w, "replay job %s started; follow it with: tenaz dead job %s\n", rep.JobID, rep.JobID)
		})
	}
	if !cl.JSON {
		fmt.Fprintf(env.Stderr, "replay job %s started (follow it again with: tenaz dead job %s)\n", rep.JobID, rep.JobID)
	}
	return follow(s, rep.JobID, c.Poll)
}

// readPayload reads --payload: inline JSON, @file or - (stdin).
func readPayload(v string, env *Env) (json.RawMessage, error) {
	var b []byte
	var err error
	switch {
	case v == "-":
		in := env.Stdin
		if in == nil {
			in = os.Stdin
		}
		b, err = io.ReadAll(in)
	case strings.HasPrefix(v, "@"):
		b, err = os.ReadFile(v[1:])
	default:
		b = []byte(v)
	}
	if err != nil {
		return nil, failf(ErrUsage, "--payload: %v", err)
	}
	if !json.Valid(b) {
		return nil, failf(ErrUsage, "--payload: not valid JSON: %s", short(strings.TrimSpace(string(b)), 80))
	}
	return json.RawMessage(b), nil
}

func printCounts(w io.Writer, verb string, done, skipped int, errs []ops.ItemError) {
	fmt.Fprintf(w, "%s %d, skipped %d (no longer dead or in review), failed %d\n", verb, done, skipped, len(errs))
	if len(errs) > 0 {
		row(w, "ID", "CODE", "ERROR")
		for _, e := range errs {
			row(w, e.ID, e.Code, e.Message)
		}
	}
}

// countsError is the exit status of a batch action: errors map to their
// code when they all share it (404 → 3, 409 → 4), else 1; nothing done
// and something skipped is a conflict (4).
func countsError(verb string, done, skipped int, errs []ops.ItemError) error {
	if len(errs) > 0 {
		status := errs[0].Code
		for _, e := range errs[1:] {
			if e.Code != status {
				status = 0
			}
		}
		e := &client.Error{Op: verb, Status: status,
			Message: fmt.Sprintf("%d of %d failed (first: %s: %s)", len(errs), done+skipped+len(errs), errs[0].ID, errs[0].Message)}
		if status == 0 {
			e.Status = 500
		}
		return e
	}
	if done == 0 && skipped > 0 {
		return failf(ErrConflict, "%s: nothing done: %d skipped (no longer dead or in review)", verb, skipped)
	}
	return nil
}

// DeadDiscardCmd is `tenaz dead discard`.
type DeadDiscardCmd struct {
	Refs    []string `arg:"" name:"id" help:"Event ids to discard, or seq_N for entries without an event (up to ${max_selection})."`
	Message string   `short:"m" required:"" help:"Why, recorded in each event's history (required)."`
}

// Run discards.
func (c *DeadDiscardCmd) Run(cl *Connection, env *Env) error {
	if len(c.Refs) > ops.MaxSelection {
		return failf(ErrUsage, "%d ids: at most %d per call", len(c.Refs), ops.MaxSelection)
	}
	req := ops.DiscardRequest{Reason: c.Message}
	for _, ref := range c.Refs {
		id, seq, err := parseRef(ref)
		if err != nil {
			return err
		}
		if seq != 0 {
			req.Seqs = append(req.Seqs, seq)
		} else {
			req.IDs = append(req.IDs, id)
		}
	}
	if strings.TrimSpace(c.Message) == "" {
		return failf(ErrUsage, "--message must say why")
	}
	s, err := cl.open(env)
	if err != nil {
		return err
	}
	defer s.close()
	rep, err := do(s, func(ctx context.Context, tz *client.Client) (ops.ActionReply, error) { return tz.Discard(ctx, req) })
	if err != nil {
		return err
	}
	if err := s.emit(rep, func(w io.Writer) { printCounts(w, "discarded", rep.Done, rep.Skipped, rep.Errors) }); err != nil {
		return err
	}
	return countsError("discard", rep.Done, rep.Skipped, rep.Errors)
}

// DeadJobCmd is `tenaz dead job <job-id>`.
type DeadJobCmd struct {
	JobID   string        `arg:"" name:"job-id" help:"The replay job's id."`
	NoWait  bool          `help:"Print the job's progress once instead of following it."`
	Cancel  bool          `help:"Cancel the running job, with -m: it stops within 10 s; what it replayed stays replayed."`
	Message string        `short:"m" help:"Why (required with --cancel), kept in the job."`
	Poll    time.Duration `default:"500ms" hidden:"" help:"How often to poll."`
}

// Run follows a job, or cancels it.
func (c *DeadJobCmd) Run(cl *Connection, env *Env) error {
	if c.Cancel && strings.TrimSpace(c.Message) == "" {
		return failf(ErrUsage, "--cancel needs -m: say why, it is kept in the job")
	}
	s, err := cl.open(env)
	if err != nil {
		return err
	}
	defer s.close()
	if c.Cancel {
		j, err := do(s, func(ctx context.Context, tz *client.Client) (ops.JobReply, error) {
			return tz.CancelReplayJob(ctx, c.JobID, c.Message)
		})
		if err != nil {
			return err
		}
		return s.emit(j, func(w io.Writer) { printJob(w, j) })
	}
	if c.NoWait {
		j, err := do(s, func(ctx context.Context, tz *client.Client) (ops.JobReply, error) { return tz.ReplayJob(ctx, c.JobID) })
		if err != nil {
			return err
		}
		return s.emit(j, func(w io.Writer) { printJob(w, j) })
	}
	return follow(s, c.JobID, c.Poll)
}
