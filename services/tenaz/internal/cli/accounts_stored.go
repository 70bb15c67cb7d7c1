package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/tenaz/tenaz/pkg/auth"
	"github.com/tenaz/tenaz/pkg/client"
	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/ops"
)

// AccountsSetCmd is `tenaz accounts set <account>`.
type AccountsSetCmd struct {
	Account string `arg:"" help:"Account."`
	File    string `short:"f" placeholder:"FILE" help:"The account's definition: an accounts.<account> entry of tenaz.yaml as JSON, with \"keys\" (auth.keys entries); - reads stdin. Header values in clear: they are stored sealed. Without it: an empty definition (the \"*\" limits)."`
	Rate    string `placeholder:"RATE" help:"Set the definition's rate (e.g. 50/s)."`
	NewKey  string `placeholder:"ID" help:"Make a new API key of the account under this id, add its hash to the definition and print the key once, on stderr."`
	Scopes  string `default:"submit,read" help:"Scopes of --new-key, comma separated."`
	Message string `short:"m" required:"" help:"Why, recorded in the audit (required)."`
	Yes     bool   `short:"y" help:"Do it without asking."`
}

// Run sets the account.
func (c *AccountsSetCmd) Run(cl *Connection, env *Env) error {
	if err := names.ValidateAccount(c.Account); err != nil {
		return failf(ErrUsage, "%v", err)
	}
	def := map[string]any{}
	if c.File != "" {
		var data []byte
		var err error
		if c.File == "-" {
			data, err = io.ReadAll(env.Stdin)
		} else {
			data, err = os.ReadFile(c.File)
		}
		if err != nil {
			return failf(ErrUsage, "--file: %v", err)
		}
		if err := json.Unmarshal(data, &def); err != nil || def == nil {
			return failf(ErrUsage, "--file: want a JSON object, the account's definition: %v", err)
		}
	}
	if c.Rate != "" {
		if _, err := config.ParseRate(c.Rate); err != nil {
			return failf(ErrUsage, "--rate: %v", err)
		}
		def["rate"] = c.Rate
	}
	var key string
	if c.NewKey != "" {
		k, hash, err := auth.NewKey()
		if err != nil {
			return err
		}
		keys, _ := def["keys"].(map[string]any)
		if keys == nil {
			keys = map[string]any{}
		}
		keys[c.NewKey] = map[string]any{"scopes": strings.Split(c.Scopes, ","), "hash": hash}
		def["keys"] = keys
		key = k
	}
	b, _ := json.Marshal(def)
	if err := confirm(env, c.Yes, fmt.Sprintf("Set account %s in the accounts bucket: every service applies it at once", c.Account)); err != nil {
		return err
	}
	s, err := cl.open(env)
	if err != nil {
		return err
	}
	defer s.close()
	rep, err := do(s, func(ctx context.Context, tz *client.Client) (ops.StoredAccount, error) {
		return tz.SetAccount(ctx, c.Account, b, c.Message)
	})
	if err != nil {
		return err
	}
	if key != "" {
		fmt.Fprintf(env.Stderr, "API key %s of %s (shown once, only its hash is kept):\n%s\n", c.NewKey, c.Account, key)
	}
	return s.emit(rep, func(w io.Writer) { printStored(w, rep) })
}

// AccountsLsCmd is `tenaz accounts ls`.
type AccountsLsCmd struct {
	Account string `help:"Only this account."`
}

// Run lists the accounts of the bucket.
func (c *AccountsLsCmd) Run(cl *Connection, env *Env) error {
	return call(cl, env, func(ctx context.Context, tz *client.Client) (ops.StoredListReply, error) {
		return tz.StoredAccounts(ctx, c.Account)
	}, func(w io.Writer, rep ops.StoredListReply) { printStored(w, rep.Items...) })
}

// AccountsRmCmd is `tenaz accounts rm <account>`.
type AccountsRmCmd struct {
	Account string `arg:"" help:"Account."`
	Message string `short:"m" required:"" help:"Why, recorded in the audit (required)."`
	Yes     bool   `short:"y" help:"Do it without asking."`
}

// Run removes the account from the bucket.
func (c *AccountsRmCmd) Run(cl *Connection, env *Env) error {
	if err := names.ValidateAccount(c.Account); err != nil {
		return failf(ErrUsage, "%v", err)
	}
	if err := confirm(env, c.Yes, fmt.Sprintf("Remove account %s from the accounts bucket: its API keys stop working and its limits go back to the \"*\" entry's", c.Account)); err != nil {
		return err
	}
	return call(cl, env, func(ctx context.Context, tz *client.Client) (ops.StoredAccount, error) {
		return tz.RemoveAccount(ctx, c.Account, c.Message)
	}, func(w io.Writer, rep ops.StoredAccount) { printStored(w, rep) })
}

func printStored(w io.Writer, items ...ops.StoredAccount) {
	row(w, "ACCOUNT", "REVISION", "UPDATED", "IN FORCE", "DEFINITION")
	for _, a := range items {
		force := "yes"
		if a.Error != "" {
			force = "no: " + short(a.Error, 60)
		}
		row(w, a.Account, a.Revision, a.Updated, force, short(string(a.Definition), 80))
	}
}
