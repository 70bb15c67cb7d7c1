// Package logging builds tenaz's zerolog loggers: JSON to stdout in
// production, a console writer in development, switched by LOG_FORMAT and
// LOG_LEVEL (or the config's log section), and carried in the context with
// the event's id, account and kind.
//
//	log := logging.New("json", "info", os.Stdout)
//	ctx = logging.WithEvent(log.WithContext(ctx), id, account, kind)
//	zerolog.Ctx(ctx).Info().Msg("delivered")
package logging

import (
	"context"
	"io"
	"os"
	"strings"
	"time"

	"github.com/rs/zerolog"
)

// New returns a logger writing format ("json" or "console") at level
// (a zerolog level name; "" means info) to w (nil means stdout). The
// LOG_FORMAT and LOG_LEVEL environment variables win over the arguments.
func New(format, level string, w io.Writer) zerolog.Logger {
	if v := os.Getenv("LOG_FORMAT"); v != "" {
		format = v
	}
	if v := os.Getenv("LOG_LEVEL"); v != "" {
		level = v
	}
	if w == nil {
		w = os.Stdout
	}
	if strings.EqualFold(format, "console") {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly}
	}
	lvl, err := zerolog.ParseLevel(strings.ToLower(level))
	if err != nil || level == "" {
		lvl = zerolog.InfoLevel
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger()
}

// WithEvent returns ctx whose logger carries the event's id, account and kind.
func WithEvent(ctx context.Context, id, account, kind string) context.Context {
	l := zerolog.Ctx(ctx).With().Str("event_id", id).Str("account", account).Str("kind", kind).Logger()
	return l.WithContext(ctx)
}
