package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// DefaultServer is where `tenaz run` listens unless configured otherwise.
const DefaultServer = "nats://127.0.0.1:4222"

// Client holds the flags every operator command shares: how to reach
// NATS (the nats CLI's flags, environment variables and contexts), the
// subject prefix, the timeout and the output format.
type Client struct {
	Server   string        `short:"s" placeholder:"URL" group:"NATS" help:"NATS server URL(s), comma-separated. Env NATS_URL; else the context's; else ${default_server} (where tenaz run listens)."`
	Creds    string        `placeholder:"FILE" group:"NATS" help:"User credentials file (JWT and seed). Env NATS_CREDS."`
	User     string        `group:"NATS" help:"Username. Env NATS_USER."`
	Password string        `group:"NATS" help:"Password. Env NATS_PASSWORD."`
	Token    string        `group:"NATS" help:"Authentication token. Env NATS_TOKEN."`
	Nkey     string        `placeholder:"FILE" group:"NATS" help:"NKey seed file. Env NATS_NKEY."`
	TLSCert  string        `name:"tlscert" placeholder:"FILE" group:"NATS" help:"TLS client certificate. Env NATS_CERT."`
	TLSKey   string        `name:"tlskey" placeholder:"FILE" group:"NATS" help:"TLS client private key. Env NATS_KEY."`
	TLSCA    string        `name:"tlsca" placeholder:"FILE" group:"NATS" help:"TLS certificate authority chain. Env NATS_CA."`
	Context  string        `placeholder:"NAME" group:"NATS" help:"natscli context (~/.config/nats/context/NAME.json; XDG_CONFIG_HOME respected). Env NATS_CONTEXT; else the one selected in context.txt. Flags and env override its fields."`
	Timeout  time.Duration `default:"5s" group:"NATS" help:"How long to wait for NATS and for each answer."`
	Prefix   string        `default:"tenaz" help:"Subject prefix of the tenaz deployment (config key prefix)."`
	JSON     bool          `help:"Print one JSON document on stdout (stable, for scripts) instead of a table; errors go to stderr as JSON."`
}

// ProvideClient lets a subcommand's Run take *Client.
func (c *Client) ProvideClient() *Client { return c }

// natsContext is the part of a natscli context file tenaz understands
// (github.com/nats-io/jsm.go natscontext): where to connect and how to
// authenticate. Other fields are ignored.
type natsContext struct {
	URL      string `json:"url"`
	Creds    string `json:"creds"`
	User     string `json:"user"`
	Password string `json:"password"`
	Token    string `json:"token"`
	NKey     string `json:"nkey"`
	Cert     string `json:"cert"`
	Key      string `json:"key"`
	CA       string `json:"ca"`
}

// settings is the resolved connection: flag, else environment, else
// context, else default.
type settings struct {
	natsContext
	ContextName string // "" if none was used
	ContextFile string
}

// configDir is natscli's parent directory: $XDG_CONFIG_HOME, else ~/.config.
func configDir(getenv func(string) string) (string, error) {
	if d := getenv("XDG_CONFIG_HOME"); d != "" {
		return d, nil
	}
	home := getenv("HOME")
	if home == "" {
		var err error
		if home, err = os.UserHomeDir(); err != nil {
			return "", fmt.Errorf("nats context: cannot find the home directory: %w", err)
		}
	}
	return filepath.Join(home, ".config"), nil
}

// loadContext reads the named natscli context, or the selected one
// (nats/context.txt) when name is empty. explicit says whether name came
// from --context or NATS_CONTEXT. No context selected is not an error.
func loadContext(name string, getenv func(string) string) (natsContext, string, string, error) {
	var nc natsContext
	dir, err := configDir(getenv)
	if err != nil {
		if name == "" {
			return nc, "", "", nil
		}
		return nc, "", "", err
	}
	if name == "" {
		b, err := os.ReadFile(filepath.Join(dir, "nats", "context.txt"))
		if errors.Is(err, fs.ErrNotExist) {
			return nc, "", "", nil
		}
		if err != nil {
			return nc, "", "", fmt.Errorf("nats context: %w", err)
		}
		if name = strings.TrimSpace(string(b)); name == "" {
			return nc, "", "", nil
		}
	}
	if strings.Contains(name, "..") || strings.ContainsAny(name, `/\`) {
		return nc, "", "", failf(ErrUsage, "nats context: invalid context name %q", name)
	}
	file := filepath.Join(dir, "nats", "context", name+".json")
	b, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nc, "", "", failf(ErrUsage, "nats context: unknown context %q (no %s)", name, file)
	}
	if err != nil {
		return nc, "", "", fmt.Errorf("nats context %q: %w", name, err)
	}
	if err := json.Unmarshal(b, &nc); err != nil {
		return nc, "", "", failf(ErrUsage, "nats context %q: %s is not valid JSON: %v", name, file, err)
	}
	for _, p := range []*string{&nc.Creds, &nc.NKey, &nc.Cert, &nc.Key, &nc.CA} {
		*p = expandPath(*p, getenv)
	}
	return nc, name, file, nil
}

// expandPath expands a leading ~ and $VARIABLES in a path, as natscli does.
func expandPath(p string, getenv func(string) string) string {
	if p == "" {
		return p
	}
	p = os.Expand(p, getenv)
	if p == "~" || strings.HasPrefix(p, "~/") {
		if home := getenv("HOME"); home != "" {
			p = home + p[1:]
		}
	}
	return p
}

// resolve merges flags, environment, context and defaults.
func (c *Client) resolve(getenv func(string) string) (settings, error) {
	name := first(c.Context, getenv("NATS_CONTEXT"))
	ctx, name, file, err := loadContext(name, getenv)
	if err != nil {
		return settings{}, err
	}
	s := settings{ContextName: name, ContextFile: file}
	s.URL = first(c.Server, getenv("NATS_URL"), ctx.URL, DefaultServer)
	s.Creds = first(c.Creds, getenv("NATS_CREDS"), ctx.Creds)
	s.User = first(c.User, getenv("NATS_USER"), ctx.User)
	s.Password = first(c.Password, getenv("NATS_PASSWORD"), ctx.Password)
	s.Token = first(c.Token, getenv("NATS_TOKEN"), ctx.Token)
	s.NKey = first(c.Nkey, getenv("NATS_NKEY"), ctx.NKey)
	s.Cert = first(c.TLSCert, getenv("NATS_CERT"), ctx.Cert)
	s.Key = first(c.TLSKey, getenv("NATS_KEY"), ctx.Key)
	s.CA = first(c.TLSCA, getenv("NATS_CA"), ctx.CA)
	if (s.Cert == "") != (s.Key == "") {
		return s, failf(ErrUsage, "--tlscert and --tlskey go together (have cert %q, key %q)", s.Cert, s.Key)
	}
	return s, nil
}

// options are the nats.go options of s. Like natscli, one identity is
// used: user/password, else creds, else nkey; a token is sent as well.
func (s settings) options(timeout time.Duration) ([]nats.Option, error) {
	opts := []nats.Option{nats.Name("tenaz-cli"), nats.Timeout(timeout), nats.MaxReconnects(0)}
	switch {
	case s.User != "":
		opts = append(opts, nats.UserInfo(s.User, s.Password))
	case s.Creds != "":
		opts = append(opts, nats.UserCredentials(s.Creds))
	case s.NKey != "":
		o, err := nats.NkeyOptionFromSeed(s.NKey)
		if err != nil {
			return nil, failf(ErrUsage, "--nkey %s: %v", s.NKey, err)
		}
		opts = append(opts, o)
	}
	if s.Token != "" {
		opts = append(opts, nats.Token(s.Token))
	}
	if s.Cert != "" {
		opts = append(opts, nats.ClientCert(s.Cert, s.Key))
	}
	if s.CA != "" {
		opts = append(opts, nats.RootCAs(s.CA))
	}
	return opts, nil
}

// connect resolves the settings and dials NATS.
func (c *Client) connect(env *Env) (*nats.Conn, settings, error) {
	s, err := c.resolve(env.Getenv)
	if err != nil {
		return nil, s, err
	}
	opts, err := s.options(c.Timeout)
	if err != nil {
		return nil, s, err
	}
	nc, err := nats.Connect(s.URL, opts...)
	if err != nil {
		where := s.URL
		if s.ContextName != "" {
			where += " (context " + s.ContextName + ")"
		}
		if errors.Is(err, nats.ErrNoServers) || errors.Is(err, nats.ErrTimeout) {
			return nil, s, failf(ErrUnavailable, "connect to NATS at %s: %v", where, err)
		}
		return nil, s, fmt.Errorf("connect to NATS at %s: %w", where, err)
	}
	return nc, s, nil
}

func first(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}
