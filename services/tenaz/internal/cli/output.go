package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/nats-io/jsm.go/natscontext"
	"github.com/nats-io/nats.go"

	"github.com/tenaz/tenaz/pkg/client"
	"github.com/tenaz/tenaz/pkg/indent"
)

// session is one command's connection, client and output.
type session struct {
	c    *Connection
	env  *Env
	nc   *nats.Conn
	nctx *natscontext.Context
	tz   *client.Client
}

// open connects; close it when done.
func (c *Connection) open(env *Env) (*session, error) {
	nc, nctx, err := c.connect(env)
	if err != nil {
		return nil, err
	}
	tz := client.NewNATS(nc, client.WithPrefix(c.Prefix), client.WithOperatorKey(env.Getenv(OperatorKeyEnv)))
	return &session{c: c, env: env, nc: nc, nctx: nctx, tz: tz}, nil
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

// do makes one call of the client, bounded by --timeout, and adds what a
// person needs to an error: the flag that bounds it, the variable that
// holds the operator key.
func do[T any](s *session, call func(context.Context, *client.Client) (T, error)) (T, error) {
	ctx, cancel := s.ctx()
	defer cancel()
	v, err := call(ctx, s.tz)
	var ce *client.Error
	switch {
	case err == nil:
	case errors.As(err, &ce) && ce.Status == http.StatusUnauthorized:
		ce.Message += "; set " + OperatorKeyEnv + " to your operator key (auth.operators)"
	case errors.Is(err, context.DeadlineExceeded):
		err = fmt.Errorf("%w (within --timeout %s)", err, s.c.Timeout)
	}
	return v, err
}

// call is a command's one call of the client: it connects, makes the
// call (see do) and prints its reply (see emit).
func call[T any](cl *Connection, env *Env, fn func(context.Context, *client.Client) (T, error), human func(w io.Writer, v T)) error {
	s, err := cl.open(env)
	if err != nil {
		return err
	}
	defer s.close()
	v, err := do(s, fn)
	if err != nil {
		return err
	}
	return s.emit(v, func(w io.Writer) { human(w, v) })
}

// emit prints v as JSON with --json, else calls human with an aligned
// table writer that is flushed afterwards.
func (s *session) emit(v any, human func(w io.Writer)) error {
	return emit(s.c, s.env, v, human)
}

// emit's JSON is indented within indent.Max: a payload nested deep
// (tenant data) would otherwise print megabytes of spaces.
func emit(c *Connection, env *Env, v any, human func(w io.Writer)) error {
	if c.JSON {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(v); err != nil {
			return err
		}
		out := indent.JSON(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
		_, err := env.Stdout.Write(append(out, '\n'))
		return err
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

// clean keeps a cell on one line and out of the next column, and shows
// every other control character as its Go escape (\x1b, \r, \u009b), as
// are bytes that are not UTF-8: a cell holds tenant data (headers,
// bodies, a target's errors), and a terminal acts on ESC, BEL or BS
// (clears the screen, retitles the window, overwrites text) instead of
// showing them. Valid text, accents and CJK included, is left as it is.
func clean(s string) string {
	if !strings.ContainsFunc(s, unsafeRune) && utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\t':
			b.WriteByte(' ')
		case unsafeRune(r):
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// unsafeRune is a C0 or C1 control character, or DEL.
func unsafeRune(r rune) bool { return r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f) }

// short shortens a long cell for a table (the JSON keeps it whole).
func short(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
