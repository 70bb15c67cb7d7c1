package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
)

// session is one command's connection and output.
type session struct {
	c   *Client
	env *Env
	nc  *nats.Conn
	set settings
}

// open connects; close it when done.
func (c *Client) open(env *Env) (*session, error) {
	nc, set, err := c.connect(env)
	if err != nil {
		return nil, err
	}
	return &session{c: c, env: env, nc: nc, set: set}, nil
}

func (s *session) close() {
	if s != nil && s.nc != nil {
		s.nc.Close()
	}
}

// ctx bounds one call by --timeout.
func (s *session) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s.c.Timeout)
}

// subject is <prefix>.api.<rest>.
func (s *session) subject(rest string) string { return s.c.Prefix + ".api." + rest }

// emit prints v as JSON with --json, else calls human with an aligned
// table writer that is flushed afterwards.
func (s *session) emit(v any, human func(w io.Writer)) error {
	return emit(s.c, s.env, v, human)
}

func emit(c *Client, env *Env, v any, human func(w io.Writer)) error {
	if c.JSON {
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		return enc.Encode(v)
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	human(tw)
	return tw.Flush()
}

// row writes tab-separated cells and a newline; empty cells print "-".
func row(w io.Writer, cells ...any) {
	parts := make([]string, len(cells))
	for i, c := range cells {
		s := fmt.Sprint(c)
		if t, ok := c.(time.Time); ok {
			s = stamp(t)
		}
		if t, ok := c.(*time.Time); ok {
			s = ""
			if t != nil {
				s = stamp(*t)
			}
		}
		if s == "" {
			s = "-"
		}
		parts[i] = clean(s)
	}
	fmt.Fprintln(w, strings.Join(parts, "\t"))
}

// stamp prints a time in UTC to the second (the zero time as "").
func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// clean keeps a cell on one line and out of the next column.
func clean(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\t' || r == '\n' || r == '\r' {
			return ' '
		}
		return r
	}, s)
}

// short shortens a long cell for a table (the JSON keeps it whole).
func short(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
