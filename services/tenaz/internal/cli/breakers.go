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

// BreakersCmd is `tenaz breakers`.
type BreakersCmd struct {
	Connection `embed:""`

	Ls    BreakersLsCmd    `cmd:"" help:"List every breaker (account + target) with its shared state."`
	Close BreakersCloseCmd `cmd:"" help:"Close one breaker for every dispatcher replica (the target is back)."`
	Open  BreakersOpenCmd  `cmd:"" help:"Open one breaker by hand for every dispatcher replica until a time (--for or --until)."`
}

// BreakersOpenCmd is `tenaz breakers open <account> <target>`.
type BreakersOpenCmd struct {
	Account string         `arg:"" help:"Account."`
	Target  string         `arg:"" help:"Target name (as in the config's targets)."`
	For     *time.Duration `placeholder:"DURATION" help:"Open for this long (30m, 2h)."`
	Until   string         `placeholder:"TIME" help:"Open until TIME (RFC 3339)."`
	Message string         `short:"m" required:"" help:"Why, recorded in the breaker and the audit (required)."`
	Yes     bool           `short:"y" help:"Do it without asking."`
}

// Run opens a breaker.
func (c *BreakersOpenCmd) Run(cl *Connection, env *Env) error {
	if err := names.ValidateAccount(c.Account); err != nil {
		return failf(ErrUsage, "%v", err)
	}
	until, dur, err := untilFlags(c.Until, c.For)
	if err != nil {
		return err
	}
	if until == nil && dur == "" {
		return failf(ErrUsage, "give --for or --until")
	}
	what := fmt.Sprintf("Open the breaker of %s → %s%s for every replica: no call of %s to %s is made before then", c.Account, c.Target, ending(until, dur), c.Account, c.Target)
	if err := confirm(env, c.Yes, what); err != nil {
		return err
	}
	return call(cl, env, func(ctx context.Context, tz *client.Client) (ops.BreakerItem, error) {
		return tz.OpenBreaker(ctx, ops.OpenBreakerRequest{Account: c.Account, Target: c.Target, Until: until, For: dur, Reason: c.Message})
	}, func(w io.Writer, b ops.BreakerItem) {
		row(w, "ACCOUNT", "TARGET", "STATE", "OPEN UNTIL", "BY", "REASON")
		row(w, b.Account, b.Target, b.State, b.OpenUntil, b.By, short(b.Reason, 60))
	})
}

// BreakersLsCmd is `tenaz breakers ls`.
type BreakersLsCmd struct {
	Account string `help:"Only this account's breakers."`
}

// Run lists breakers.
func (c *BreakersLsCmd) Run(cl *Connection, env *Env) error {
	return call(cl, env, func(ctx context.Context, tz *client.Client) (ops.BreakersReply, error) {
		rep, err := tz.ListBreakers(ctx, c.Account)
		if rep.Items == nil {
			rep.Items = []ops.BreakerItem{}
		}
		return rep, err
	}, func(w io.Writer, rep ops.BreakersReply) {
		row(w, "ACCOUNT", "TARGET", "STATE", "FAILURES", "OPEN UNTIL", "BY", "AT", "REASON")
		for _, b := range rep.Items {
			row(w, b.Account, b.Target, b.State, b.Failures, b.OpenUntil, b.By, b.At, short(b.Reason, 60))
		}
	})
}

// BreakersCloseCmd is `tenaz breakers close <account> <target> -m why`.
type BreakersCloseCmd struct {
	Account string `arg:"" help:"Account."`
	Target  string `arg:"" help:"Target name (as in the config's targets)."`
	Message string `short:"m" required:"" help:"Why, recorded in the audit (required)."`
}

// Run closes a breaker.
func (c *BreakersCloseCmd) Run(cl *Connection, env *Env) error {
	if err := names.ValidateAccount(c.Account); err != nil {
		return failf(ErrUsage, "%v", err)
	}
	return call(cl, env, func(ctx context.Context, tz *client.Client) (ops.BreakerItem, error) {
		return tz.CloseBreaker(ctx, c.Account, c.Target, c.Message)
	}, func(w io.Writer, b ops.BreakerItem) {
		row(w, "ACCOUNT", "TARGET", "STATE", "FAILURES", "BY", "AT")
		row(w, b.Account, b.Target, b.State, b.Failures, b.By, b.At)
	})
}
