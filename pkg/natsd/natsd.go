// Package natsd runs an embedded nats-server with JetStream on file
// storage: the NATS of `tenaz run` and of every test.
//
//	srv, err := natsd.Start(natsd.Options{StoreDir: "./.tenaz", Listen: "127.0.0.1:4222", SyncAlways: true})
//	defer natsd.Shutdown(srv)
package natsd

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/tenaz/tenaz/pkg/config"
)

// Options of the embedded server.
type Options struct {
	// StoreDir is where JetStream keeps its files. Required.
	StoreDir string
	// Listen is host:port for clients; port -1 picks a free one. Defaults to "127.0.0.1:-1".
	Listen string
	// SyncAlways fsyncs every write before acknowledging it. When false,
	// SyncInterval applies.
	SyncAlways bool
	// SyncInterval between fsyncs when SyncAlways is false. Defaults to the
	// server's 2m.
	SyncInterval time.Duration
	// ServerName names the server. Defaults to "tenaz".
	ServerName string
	// Auth is the client authentication the server requires. Defaults to
	// none (keep Listen on loopback then).
	Auth Auth
	// MaxPayload is the largest message the server takes (max_payload),
	// which bounds http.max_body_bytes (pkg/size). Defaults to 8 MiB.
	MaxPayload int32
	// Configure may adjust the server options last (auth, TLS, cluster).
	Configure func(*server.Options)
}

// Auth is one kind of client authentication for the embedded server:
// user and password, a token, or an nkey (its public key). The zero
// value requires none.
type Auth struct {
	User     string
	Password string
	Token    string
	NKey     string // public user nkey ("U…")
}

// IsZero reports whether a requires no authentication.
func (a Auth) IsZero() bool { return a == Auth{} }

// ClientAuth is the Auth that makes the embedded server require the
// credentials tenaz's own clients present (config nats.user/password,
// nats.token or nats.nkey_seed_file), so that one setting serves both.
func ClientAuth(c config.NATS) (Auth, error) {
	a := Auth{User: c.User, Password: c.Password.Reveal(), Token: c.Token.Reveal()}
	if c.NKeySeedFile != "" {
		seed, err := os.ReadFile(c.NKeySeedFile)
		if err != nil {
			return Auth{}, fmt.Errorf("natsd: nats.nkey_seed_file: %w", err)
		}
		kp, err := nkeys.FromSeed(bytes.TrimSpace(seed))
		if err != nil {
			return Auth{}, fmt.Errorf("natsd: nats.nkey_seed_file %s: %w", c.NKeySeedFile, err)
		}
		defer kp.Wipe()
		if a.NKey, err = kp.PublicKey(); err != nil {
			return Auth{}, fmt.Errorf("natsd: nats.nkey_seed_file %s: %w", c.NKeySeedFile, err)
		}
	}
	return a, nil
}

// Start starts the server and waits until it accepts connections.
func Start(o Options) (*server.Server, error) {
	if o.StoreDir == "" {
		return nil, errors.New("natsd: StoreDir is required")
	}
	host, port := "127.0.0.1", -1
	if o.Listen != "" {
		h, p, err := net.SplitHostPort(o.Listen)
		if err != nil {
			return nil, fmt.Errorf("natsd: listen %q: %w", o.Listen, err)
		}
		if port, err = strconv.Atoi(p); err != nil {
			return nil, fmt.Errorf("natsd: listen %q: bad port", o.Listen)
		}
		if h != "" {
			host = h
		}
	}
	name := o.ServerName
	if name == "" {
		name = "tenaz"
	}
	opts := &server.Options{
		ServerName: name,
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   o.StoreDir,
		NoSigs:     true,
		MaxPayload: cmp.Or(o.MaxPayload, 8<<20),
		SyncAlways: o.SyncAlways,
	}
	if !o.SyncAlways && o.SyncInterval > 0 {
		opts.SyncInterval = o.SyncInterval
	}
	switch a := o.Auth; {
	case a.NKey != "":
		opts.Nkeys = []*server.NkeyUser{{Nkey: a.NKey}}
	case a.Token != "":
		opts.Authorization = a.Token
	case a.User != "":
		opts.Users = []*server.User{{Username: a.User, Password: a.Password}}
	}
	if o.Configure != nil {
		o.Configure(opts)
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("natsd: %w", err)
	}
	// nats-server reports a failure to start (a busy port, a store it
	// cannot open) only by logging it with Fatalf, which would exit the
	// process of a standalone server; embedded, it just never becomes
	// ready. So the first such line ends the wait at once.
	log := &startLog{fatal: make(chan error, 1)}
	srv.SetLoggerV2(log, false, false, false)
	srv.Start()
	deadline := time.Now().Add(10 * time.Second)
	for !srv.ReadyForConnections(50 * time.Millisecond) {
		select {
		case err := <-log.fatal:
			Shutdown(srv)
			return nil, err
		default:
		}
		if time.Now().After(deadline) {
			Shutdown(srv)
			return nil, errors.New("natsd: server not ready within 10s")
		}
	}
	return srv, nil
}

// ListenError is a listener the server could not open, such as a port
// another process holds.
type ListenError struct {
	Addr string // host:port
	// Err is why: syscall.EADDRINUSE for a port in use.
	Err error
}

func (e *ListenError) Error() string { return "natsd: listen " + e.Addr + ": " + e.Err.Error() }

func (e *ListenError) Unwrap() error { return e.Err }

// startLog is the server's logger: it keeps the first Fatalf as the
// error Start returns and drops everything else (the embedded server
// logged nothing before it existed, either).
type startLog struct{ fatal chan error }

func (l *startLog) Fatalf(format string, v ...any) {
	select {
	case l.fatal <- fatalError(format, v):
	default: // Start has one already, or is done waiting
	}
}

func (*startLog) Noticef(string, ...any) {}
func (*startLog) Warnf(string, ...any)   {}
func (*startLog) Errorf(string, ...any)  {}
func (*startLog) Debugf(string, ...any)  {}
func (*startLog) Tracef(string, ...any)  {}

// fatalError is a ListenError when the line carries a listen error
// (every listener's but monitoring's, which the server flattens to text)
// and the line itself otherwise.
func fatalError(format string, v []any) error {
	for _, a := range v {
		var op *net.OpError
		if err, ok := a.(error); ok && errors.As(err, &op) && op.Op == "listen" && op.Addr != nil {
			cause := op.Err
			var se *os.SyscallError
			if errors.As(cause, &se) { // "bind: address already in use" → "address already in use"
				cause = se.Err
			}
			return &ListenError{Addr: op.Addr.String(), Err: cause}
		}
	}
	return fmt.Errorf("natsd: %s", fmt.Sprintf(format, v...))
}

// Shutdown stops the server and waits for it to finish.
func Shutdown(s *server.Server) {
	if s == nil {
		return
	}
	s.Shutdown()
	s.WaitForShutdown()
}

// Serve is a nats-server process: it starts a server with o, prints
// "READY <url>" on stdout once it accepts connections (the line its parent
// waits for), and shuts it down on SIGTERM or SIGINT.
func Serve(o Options) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	srv, err := Start(o)
	if err != nil {
		return err
	}
	fmt.Println("READY", srv.ClientURL())
	<-ctx.Done()
	Shutdown(srv)
	return nil
}
