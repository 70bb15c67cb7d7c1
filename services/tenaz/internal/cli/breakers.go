package cli

import (
	"context"
	"io"

	"github.com/tenaz/tenaz/pkg/client"
	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/pkg/tenaz"
)

// BreakersCmd is `tenaz breakers`.
type BreakersCmd struct {
	Connection `embed:""`

	Ls    BreakersLsCmd    `cmd:"" help:"List every breaker (account + target) with its shared state."`
	Close BreakersCloseCmd `cmd:"" help:"Close one breaker for every dispatcher replica (the target is back)."`
}

// BreakersLsCmd is `tenaz breakers ls`.
type BreakersLsCmd struct {
	Account string `help:"Only this account's breakers."`
}

// Run lists breakers.
func (c *BreakersLsCmd) Run(cl *Connection, env *Env) error {
	s, err := cl.open(env)
	if err != nil {
		return err
	}
	defer s.close()
	rep, err := do(s, func(ctx context.Context, tz *client.Client) (ops.BreakersReply, error) {
		return tz.ListBreakers(ctx, c.Account)
	})
	if err != nil {
		return err
	}
	if rep.Items == nil {
		rep.Items = []ops.BreakerItem{}
	}
	return s.emit(rep, func(w io.Writer) {
		row(w, "ACCOUNT", "TARGET", "STATE", "FAILURES", "OPEN UNTIL", "BY", "AT", "REASON")
		for _, b := range rep.Items {
			row(w, b.Account, b.Target, b.State, b.Failures, b.OpenUntil, b.By, b.At, short(b.Reason, 60))
		}
	})
}

// BreakersCloseCmd is `tenaz breakers close <account> <target>`.
type BreakersCloseCmd struct {
	Account string `arg:"" help:"Account."`
	Target  string `arg:"" help:"Target name (as in the config's targets)."`
}

// Run closes a breaker.
func (c *BreakersCloseCmd) Run(cl *Connection, env *Env) error {
	if err := tenaz.ValidateAccount(c.Account); err != nil {
		return failf(ErrUsage, "%v", err)
	}
	s, err := cl.open(env)
	if err != nil {
		return err
	}
	defer s.close()
	b, err := do(s, func(ctx context.Context, tz *client.Client) (ops.BreakerItem, error) {
		return tz.CloseBreaker(ctx, c.Account, c.Target)
	})
	if err != nil {
		return err
	}
	return s.emit(b, func(w io.Writer) {
		row(w, "ACCOUNT", "TARGET", "STATE", "FAILURES", "BY", "AT")
		row(w, b.Account, b.Target, b.State, b.Failures, b.By, b.At)
	})
}
