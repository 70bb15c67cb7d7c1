package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/tenaz/tenaz/pkg/client"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/ops"
)

// AccountsCmd is `tenaz accounts`.
type AccountsCmd struct {
	Connection `embed:""`

	Pause   AccountsPauseCmd   `cmd:"" help:"Pause an account's dispatch: no call of it until resumed (or --for/--until); its events wait."`
	Resume  AccountsResumeCmd  `cmd:"" help:"End an operator's pause of an account (exit 4 if it has none)."`
	Paused  AccountsPausedCmd  `cmd:"" help:"List the accounts held by an operator's pause or an open breaker."`
	Actions AccountsActionsCmd `cmd:"" help:"The audit of operator actions on accounts and breakers: who paused, resumed, opened or closed what, and why."`
	Set     AccountsSetCmd     `cmd:"" help:"Add an account to the accounts bucket, or replace its definition there: every service applies it without a restart."`
	Ls      AccountsLsCmd      `cmd:"" help:"List the accounts of the accounts bucket (header values redacted)."`
	Rm      AccountsRmCmd      `cmd:"" help:"Remove an account from the accounts bucket: its keys stop working."`
}

// AccountsPauseCmd is `tenaz accounts pause <account>`.
type AccountsPauseCmd struct {
	Account string         `arg:"" help:"Account."`
	Message string         `short:"m" required:"" help:"Why, recorded in the audit (required)."`
	For     *time.Duration `placeholder:"DURATION" help:"End the pause by itself after this long (30m, 2h)."`
	Until   string         `placeholder:"TIME" help:"End the pause by itself at TIME (RFC 3339)."`
	Yes     bool           `short:"y" help:"Do it without asking."`
}

// Run pauses.
func (c *AccountsPauseCmd) Run(cl *Connection, env *Env) error {
	if err := names.ValidateAccount(c.Account); err != nil {
		return failf(ErrUsage, "%v", err)
	}
	until, dur, err := untilFlags(c.Until, c.For)
	if err != nil {
		return err
	}
	what := fmt.Sprintf("Pause account %s%s: no call of it is made until it is resumed; its events wait", c.Account, ending(until, dur))
	if err := confirm(env, c.Yes, what); err != nil {
		return err
	}
	return call(cl, env, func(ctx context.Context, tz *client.Client) (ops.AccountReply, error) {
		return tz.PauseAccount(ctx, ops.PauseRequest{Account: c.Account, Until: until, For: dur, Reason: c.Message})
	}, func(w io.Writer, rep ops.AccountReply) { printAccounts(w, rep) })
}

// AccountsResumeCmd is `tenaz accounts resume <account>`.
type AccountsResumeCmd struct {
	Account string `arg:"" help:"Account."`
	Message string `short:"m" required:"" help:"Why, recorded in the audit (required)."`
	Yes     bool   `short:"y" help:"Do it without asking."`
}

// Run resumes.
func (c *AccountsResumeCmd) Run(cl *Connection, env *Env) error {
	if err := names.ValidateAccount(c.Account); err != nil {
		return failf(ErrUsage, "%v", err)
	}
	if err := confirm(env, c.Yes, fmt.Sprintf("Resume account %s: its waiting events are delivered", c.Account)); err != nil {
		return err
	}
	return call(cl, env, func(ctx context.Context, tz *client.Client) (ops.AccountReply, error) {
		return tz.ResumeAccount(ctx, c.Account, c.Message)
	}, func(w io.Writer, rep ops.AccountReply) { printAccounts(w, rep) })
}

// AccountsPausedCmd is `tenaz accounts paused`.
type AccountsPausedCmd struct {
	Account string `help:"Only this account (listed whether held or not)."`
}

// Run lists the held accounts.
func (c *AccountsPausedCmd) Run(cl *Connection, env *Env) error {
	return call(cl, env, func(ctx context.Context, tz *client.Client) (ops.PausesReply, error) {
		return tz.Pauses(ctx, c.Account)
	}, func(w io.Writer, rep ops.PausesReply) { printAccounts(w, rep.Items...) })
}

func printAccounts(w io.Writer, items ...ops.AccountReply) {
	row(w, "ACCOUNT", "DISPATCH", "HELD UNTIL", "BY", "AT", "REASON")
	for _, a := range items {
		switch {
		case a.Paused != nil:
			row(w, a.Account, "paused", heldUntil(a), a.Paused.Actor, a.Paused.At, short(a.Paused.Reason, 60))
		case a.HeldUntil != nil:
			row(w, a.Account, "held by a breaker", a.HeldUntil, "", "", "")
		default:
			row(w, a.Account, "running", "", "", "", "")
		}
	}
}

// untilResumed is what an end of a pause without one shows.
const untilResumed = "until resumed"

// heldUntil is the HELD UNTIL cell of a: a time, or untilResumed.
func heldUntil(a ops.AccountReply) any {
	if a.UntilResumed {
		return untilResumed
	}
	return a.HeldUntil
}

// AccountsActionsCmd is `tenaz accounts actions`.
type AccountsActionsCmd struct {
	Account string `help:"Only this account's."`
	Limit   int    `default:"${default_limit}" help:"How many, newest first (1..${max_limit})."`
}

// Run prints the audit.
func (c *AccountsActionsCmd) Run(cl *Connection, env *Env) error {
	return call(cl, env, func(ctx context.Context, tz *client.Client) (ops.ActionsReply, error) {
		return tz.Actions(ctx, ops.ActionsRequest{Account: c.Account, Limit: c.Limit})
	}, func(w io.Writer, rep ops.ActionsReply) {
		row(w, "AT", "ACTION", "ACCOUNT", "TARGET", "UNTIL", "ACTOR", "REASON")
		for _, a := range rep.Items {
			var until any = a.Until
			if a.Action == ops.ActionPause && a.Until == nil {
				until = untilResumed
			}
			row(w, a.At, a.Action, a.Account, a.Target, until, a.Actor, short(a.Reason, 60))
		}
	})
}
