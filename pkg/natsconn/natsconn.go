// Package natsconn connects a tenaz service to NATS as its config says:
// URL, credentials (creds file, nkey seed, user/password, token), TLS, and
// reconnect settings that keep a service running through a server restart.
//
//	nc, err := natsconn.Connect(cfg.NATS, "tenaz-dispatcher")
package natsconn

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tenaz/tenaz/pkg/config"
)

// Connect dials NATS. url overrides c.URL when non-empty (embedded server).
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
	return nc, nil
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
