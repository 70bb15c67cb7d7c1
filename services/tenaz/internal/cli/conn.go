package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/jsm.go/natscontext"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// DefaultServer is where `tenaz run` listens unless configured otherwise
// (nats.DefaultURL, which a natscli context without a url means too).
const DefaultServer = nats.DefaultURL

// Connection holds the flags every operator command shares: how to reach
// NATS (the nats CLI's flags, environment variables and contexts), the
// subject prefix, the timeout and the output format.
type Connection struct {
	Server   string        `short:"s" placeholder:"URL" group:"NATS" help:"NATS server URL(s), comma-separated. Env NATS_URL; else the context's; else ${default_server} (where tenaz run listens)."`
	Creds    string        `placeholder:"FILE" predictor:"file" group:"NATS" help:"User credentials file (JWT and seed). Env NATS_CREDS."`
	User     string        `group:"NATS" help:"Username. Env NATS_USER."`
	Password string        `group:"NATS" help:"Password. Env NATS_PASSWORD."`
	Token    string        `group:"NATS" help:"Authentication token. Env NATS_TOKEN."`
	Nkey     string        `placeholder:"FILE" predictor:"file" group:"NATS" help:"NKey seed file. Env NATS_NKEY."`
	TLSCert  string        `name:"tlscert" placeholder:"FILE" predictor:"file" group:"NATS" help:"TLS client certificate. Env NATS_CERT."`
	TLSKey   string        `name:"tlskey" placeholder:"FILE" predictor:"file" group:"NATS" help:"TLS client private key. Env NATS_KEY."`
	TLSCA    string        `name:"tlsca" placeholder:"FILE" predictor:"file" group:"NATS" help:"TLS certificate authority chain. Env NATS_CA."`
	Context  string        `placeholder:"NAME" predictor:"context" group:"NATS" help:"natscli context (~/.config/nats/context/NAME.json; XDG_CONFIG_HOME respected). Env NATS_CONTEXT; else the one selected in context.txt. Flags and env override its fields."`
	Timeout  time.Duration `default:"5s" group:"NATS" help:"How long to wait for NATS and for each answer."`
	Prefix   string        `default:"tenaz" help:"Subject prefix of the tenaz deployment (config key prefix)."`
	JSON     bool          `help:"Print one JSON document on stdout (stable, for scripts) instead of a table; errors go to stderr as JSON."`
}

// ProvideConnection lets a subcommand's Run take *Connection.
func (c *Connection) ProvideConnection() *Connection { return c }

// configRoot is natscli's parent directory: $XDG_CONFIG_HOME, else
// ~/.config. It is read through getenv (not natscontext's default
// backend, which reads the process environment) so that an Env decides.
func configRoot(getenv func(string) string) string {
	if d := getenv("XDG_CONFIG_HOME"); d != "" {
		return d
	}
	home := getenv("HOME")
	if home == "" {
		home, _ = os.UserHomeDir()
	}
	if home == "" {
		return ""
	}
	return filepath.Join(home, ".config")
}

// resolve loads the natscli context (named by --context or NATS_CONTEXT,
// else the selected one, else none) with natscontext, as natscli does,
// and lays the flags and NATS_* variables over its fields. Credential
// references in the context (file paths with ~ and $VAR, env://, op://,
// nsc://, data:) are natscontext's to resolve.
func (c *Connection) resolve(getenv func(string) string) (*natscontext.Context, error) {
	reg := natscontext.NewRegistry(natscontext.NewFileBackendAt(configRoot(getenv)))
	name := first(c.Context, getenv("NATS_CONTEXT"))
	nctx, err := reg.Load(context.Background(), name,
		natscontext.WithServerURL(first(c.Server, getenv("NATS_URL"))),
		natscontext.WithCreds(first(c.Creds, getenv("NATS_CREDS"))),
		natscontext.WithUser(first(c.User, getenv("NATS_USER"))),
		natscontext.WithPassword(first(c.Password, getenv("NATS_PASSWORD"))),
		natscontext.WithToken(first(c.Token, getenv("NATS_TOKEN"))),
		natscontext.WithNKey(first(c.Nkey, getenv("NATS_NKEY"))),
		natscontext.WithCertificate(first(c.TLSCert, getenv("NATS_CERT"))),
		natscontext.WithKey(first(c.TLSKey, getenv("NATS_KEY"))),
		natscontext.WithCA(first(c.TLSCA, getenv("NATS_CA"))),
	)
	switch {
	case errors.Is(err, natscontext.ErrNotFound):
		return nil, failf(ErrUsage, "nats context: unknown context %q (no %s)", name,
			natscontext.NewFileBackendAt(configRoot(getenv)).Path(name))
	case err != nil && name == "":
		return nil, failf(ErrUsage, "nats context (the selected one): %v", err)
	case err != nil:
		return nil, failf(ErrUsage, "nats context %q: %v", name, err)
	}
	// natscontext drops a certificate without its key (or a key without
	// its certificate) without a word; that is a mistake worth naming.
	if (nctx.Certificate() == "") != (nctx.Key() == "") {
		return nil, failf(ErrUsage, "--tlscert and --tlskey go together (have cert %q, key %q)", nctx.Certificate(), nctx.Key())
	}
	return nctx, nil
}

// where names the server and the context for an error message.
func where(nctx *natscontext.Context) string {
	w := nctx.ServerURL()
	if nctx.Name != "" {
		w += " (context " + nctx.Name + ")"
	}
	return w
}

// connect resolves the settings and dials NATS. The context is returned
// with a dial's error too (for a message naming the server).
func (c *Connection) connect(env *Env) (*nats.Conn, *natscontext.Context, error) {
	nctx, err := c.resolve(env.Getenv)
	if err != nil {
		return nil, nil, err
	}
	opts, err := nctx.NATSOptions(nats.Name("tenaz-cli"), nats.Timeout(c.Timeout), nats.MaxReconnects(0))
	if err != nil {
		return nil, nil, failf(ErrUsage, "nats context: %v", err)
	}
	nc, err := nats.Connect(nctx.ServerURL(), opts...)
	if err != nil {
		if errors.Is(err, nats.ErrNoServers) || errors.Is(err, nats.ErrTimeout) {
			return nil, nctx, failf(ErrUnavailable, "connect to NATS at %s: %v", where(nctx), err)
		}
		return nil, nctx, fmt.Errorf("connect to NATS at %s: %w", where(nctx), err)
	}
	return nc, nctx, nil
}

// jetStream is JetStream on nc in the context's domain or API prefix, as
// natscli uses it.
func jetStream(nc *nats.Conn, nctx *natscontext.Context) (jetstream.JetStream, error) {
	switch {
	case nctx.JSDomain() != "":
		return jetstream.NewWithDomain(nc, nctx.JSDomain())
	case nctx.JSAPIPrefix() != "":
		return jetstream.NewWithAPIPrefix(nc, nctx.JSAPIPrefix())
	}
	return jetstream.New(nc)
}

func first(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}
