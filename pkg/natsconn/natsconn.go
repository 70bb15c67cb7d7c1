// Package natsconn connects a tenaz service to NATS as its config says:
// URL, credentials (creds file, nkey seed, user/password, token), TLS, and
// reconnect settings that keep a service running through a server restart.
//
//	nc, err := natsconn.Connect(cfg.NATS, "tenaz-dispatcher")
package natsconn

import (
	"errors"
	"fmt"
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
		nats.RetryOnFailedConnect(true),
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
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("natsconn: connect %s: %w", url, err)
	}
	return nc, nil
}
