package cli

import (
	"context"
	"encoding/json"
	"io"
	"strings"

	"github.com/tenaz/tenaz/pkg/client"
	"github.com/tenaz/tenaz/pkg/ops"
)

// ReviewCmd is `tenaz review`.
type ReviewCmd struct {
	Connection `embed:""`

	Ls      ReviewLsCmd      `cmd:"" help:"List events waiting for manual review, newest first."`
	Resolve ReviewResolveCmd `cmd:"" help:"Decide a manual review: done (with a result), discard, or requeue to the primary or fallback."`
}

// ReviewLsCmd is `tenaz review ls`.
type ReviewLsCmd struct {
	Filter `embed:""`
	Limit  int    `help:"Page size, 1-${max_limit} (default ${default_limit}, or ${max_limit} with --all)."`
	Cursor string `help:"Page to show: the next_cursor of the previous page."`
	All    bool   `help:"Fetch every page (the JSON is one list)."`
}

// Run lists reviews.
func (c *ReviewLsCmd) Run(cl *Connection, env *Env) error {
	return list(cl, env, (*client.Client).ListReview, c.Filter, c.Limit, c.Cursor, c.All)
}

// ReviewResolveCmd is `tenaz review resolve <id>`.
type ReviewResolveCmd struct {
	ID      string  `arg:"" help:"Event id (ev_…)."`
	Outcome string  `required:"" enum:"done,discard,requeue_primary,requeue_fallback" help:"done (the operator completed it; --result is stored), discard (cancelled), requeue_primary or requeue_fallback (a fresh attempt cycle at that stage)."`
	Result  *string `placeholder:"JSON|@FILE|-" help:"With --outcome done: the result to store, as JSON (inline, @file or - for stdin)."` // nil: not given, told apart from an empty one
	Message string  `short:"m" help:"Why, recorded in the event's history (required with --outcome discard; else \"resolved by operator\")."`
}

// Run resolves a review.
func (c *ReviewResolveCmd) Run(cl *Connection, env *Env) error {
	if err := checkID(c.ID); err != nil {
		return err
	}
	if strings.TrimSpace(c.Message) == "" {
		if c.Outcome == ops.OutcomeDiscard { // as dead discard: the reason is all the history keeps of why
			return failf(ErrUsage, "--outcome discard needs -m/--message saying why")
		}
		c.Message = "resolved by operator"
	}
	req := ops.ResolveRequest{ID: c.ID, Outcome: c.Outcome, Reason: c.Message}
	if c.Result != nil {
		switch {
		case *c.Result == "": // else the event would be done with no result, as if none was given
			return failf(ErrUsage, "--result is empty: give the JSON, @file or - for stdin, or leave --result out to store no result")
		case c.Outcome != ops.OutcomeDone:
			return failf(ErrUsage, "--result goes with --outcome done")
		}
		r, err := readPayload(*c.Result, env)
		if err != nil {
			return failf(ErrUsage, "%s", strings.Replace(err.Error(), "--payload", "--result", 1))
		}
		req.Result = json.RawMessage(r)
	}
	s, err := cl.open(env)
	if err != nil {
		return err
	}
	defer s.close()
	rep, err := do(s, func(ctx context.Context, tz *client.Client) (ops.ActionReply, error) { return tz.Resolve(ctx, req) })
	if err != nil {
		return err
	}
	if err := s.emit(rep, func(w io.Writer) { printCounts(w, "resolved ("+c.Outcome+")", rep.Done, rep.Skipped, rep.Errors) }); err != nil {
		return err
	}
	return countsError("resolve", rep.Done, rep.Skipped, rep.Errors)
}
