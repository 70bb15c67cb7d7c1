// Package natsconn connects a tenaz service to NATS as its config says:
// URL, credentials (creds file, nkey seed, user/password, token), TLS, and
// reconnect settings that keep a service running through a server restart.
// It refuses a server older than MinServerVersion, and gives each service
// inboxes of its own (InboxPrefix) that a NATS permission can name.
//
//	nc, err := natsconn.Connect(cfg.NATS, "tenaz-dispatcher")
package natsconn

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/tenaz/tenaz/pkg/config"
)

// MinServerVersion is the oldest nats-server tenaz runs on. Every delay,
// retry and callback deadline is a JetStream message schedule (2.12), and
// the dead-letter digest is a cron schedule with a time zone (2.14).
const MinServerVersion = "2.14.0"

// ErrServerTooOld is returned by Connect for a server older than
// MinServerVersion.
var ErrServerTooOld = errors.New("natsconn: nats-server too old")

// JetStream is a service's JetStream context. Its asynchronous publishes
// (pipelined record writes, claims, dispatch messages) fail after
// PublishAckWait without an answer: on a cluster, a publish whose stream
// leader went away before answering is never answered, and a write
// waiting for it would hold its batch (an account's claims, an intake
// batch) for good. The caller's error path then decides from the stored
// state, as for any failed write.
func JetStream(nc *nats.Conn, opts ...jetstream.JetStreamOpt) (jetstream.JetStream, error) {
	return jetstream.New(nc, append([]jetstream.JetStreamOpt{jetstream.WithPublishAsyncTimeout(PublishAckWait)}, opts...)...)
}

// PublishAckWait is how long an asynchronous publish waits for its
// acknowledgement: well past what a loaded server takes (seconds under
// fsync on every write), well within what an event may wait.
const PublishAckWait = 10 * time.Second

// InboxPrefix is the prefix of the reply subjects of the connection named
// name ("_INBOX.tenaz-ingest"): a NATS user of one service may subscribe
// to its own replies only (deploy/nats/values.yaml).
func InboxPrefix(name string) string { return "_INBOX." + name }

// Logged makes a connection log what the server refuses or drops after
// the call that caused it returned: a permission its NATS user lacks (the
// publish or request it refused is otherwise just never answered, and
// its caller waits out a timeout), a subscription that fell behind. Five
// lines a minute at most, so a refused hot path cannot flood the log.
func Logged(log *zerolog.Logger) nats.Option {
	l := log.Sample(&zerolog.BurstSampler{Burst: 5, Period: time.Minute})
	return nats.ErrorHandler(func(nc *nats.Conn, sub *nats.Subscription, err error) {
		ev, msg := l.Warn(), "nats: an asynchronous error"
		if errors.Is(err, nats.ErrPermissionViolation) {
			ev, msg = l.Error(), "nats: the server refused this connection's NATS user: grant the permission (deploy/nats/values.yaml lists each service's)"
		}
		if sub != nil {
			ev = ev.Str("subscription", sub.Subject)
		}
		ev.Err(err).Str("connection", nc.Opts.Name).Msg(msg)
	})
}

// Connect dials NATS as name, with the replies under InboxPrefix(name).
// url overrides c.URL when non-empty (embedded server).
func Connect(c config.NATS, name, url string, extra ...nats.Option) (*nats.Conn, error) {
	if url == "" {
		url = c.URL
	}
	if url == "" {
		return nil, errors.New("natsconn: no NATS URL (set nats.url or NATS_URL)")
	}
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ReconnectBufSize(64 << 20),
		nats.CustomInboxPrefix(InboxPrefix(name)),
		// A server that comes up after Connect returned is checked here;
		// the connection closes if it is too old, so nothing runs on it.
		nats.ConnectHandler(func(nc *nats.Conn) {
			if CheckServerVersion(nc.ConnectedServerVersion()) != nil {
				nc.Close()
			}
		}),
	}
	if c.Creds != "" {
		opts = append(opts, nats.UserCredentials(c.Creds))
	}
	if c.NKeySeedFile != "" {
		o, err := nats.NkeyOptionFromSeed(c.NKeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("natsconn: nats.nkey_seed_file: %w", err)
		}
		opts = append(opts, o)
	}
	if c.User != "" {
		opts = append(opts, nats.UserInfo(c.User, c.Password.Reveal()))
	}
	if c.Token != "" {
		opts = append(opts, nats.Token(c.Token.Reveal()))
	}
	if c.TLS.CA != "" {
		opts = append(opts, nats.RootCAs(c.TLS.CA))
	}
	if c.TLS.Cert != "" || c.TLS.Key != "" {
		opts = append(opts, nats.ClientCert(c.TLS.Cert, c.TLS.Key))
	}
	opts = append(opts, extra...)
	// The first attempt fails fast on what waiting cannot fix (refused
	// credentials, a certificate that does not verify); a server that is
	// not up yet is waited for, in the background, as on a reconnect.
	nc, err := nats.Connect(url, opts...)
	if err != nil && retryable(err) {
		nc, err = nats.Connect(url, append(opts, nats.RetryOnFailedConnect(true))...)
	}
	if err != nil {
		return nil, fmt.Errorf("natsconn: connect %s: %w", redact(url), err)
	}
	if nc.IsConnected() {
		if err := CheckServerVersion(nc.ConnectedServerVersion()); err != nil {
			nc.Close()
			return nil, fmt.Errorf("%w (at %s)", err, redact(url))
		}
	}
	return nc, nil
}

// CheckServerVersion refuses a server version ("2.15.2", "v2.14.0-RC.1")
// older than MinServerVersion, or one it cannot read. A pre-release
// counts as its release, as nats.go's own version checks do.
func CheckServerVersion(v string) error {
	got, ok := semver(v)
	if !ok {
		return fmt.Errorf("%w: cannot read the server's version %q; tenaz needs nats-server %s or later", ErrServerTooOld, v, MinServerVersion)
	}
	floor, _ := semver(MinServerVersion)
	for i := range got {
		if got[i] != floor[i] {
			if got[i] > floor[i] {
				return nil
			}
			return fmt.Errorf("%w: the server is %s, tenaz needs %s or later: every delay, retry and deadline is a JetStream message schedule (2.12) and the digest a cron schedule with a time zone (2.14); upgrade nats-server", ErrServerTooOld, v, MinServerVersion)
		}
	}
	return nil
}

// semver reads major.minor.patch, ignoring a leading "v" and any
// pre-release or build suffix.
func semver(v string) ([3]int, bool) {
	var out [3]int
	v = strings.TrimPrefix(v, "v")
	if i := strings.IndexAny(v, "-+"); i >= 0 {
		v = v[:i]
	}
	parts := strings.Split(v, ".")
	if len(parts) != 3 {
		return out, false
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return out, false
		}
		out[i] = n
	}
	return out, true
}

// retryable reports whether a failed first connect may succeed later
// without a change of configuration: no server answered (yet).
func retryable(err error) bool {
	var ne net.Error
	return errors.Is(err, nats.ErrNoServers) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.As(err, &ne) && ne.Timeout()
}

// redact hides the passwords and tokens of URLs such as
// nats://user:pass@host:4222 (a comma-separated list).
func redact(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		if u, err := url.Parse(strings.TrimSpace(p)); err == nil && u.User != nil {
			parts[i] = u.Redacted()
			if _, hasPw := u.User.Password(); !hasPw { // a token in the user part
				parts[i] = strings.Replace(parts[i], u.User.Username()+"@", "xxxxx@", 1)
			}
		}
	}
	return strings.Join(parts, ",")
}
