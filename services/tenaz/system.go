package tenaz

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/tenaz/tenaz/pkg/auth"
	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/daemon"
	"github.com/tenaz/tenaz/pkg/httpapi"
	"github.com/tenaz/tenaz/pkg/live"
	"github.com/tenaz/tenaz/pkg/natsconn"
	"github.com/tenaz/tenaz/pkg/natsd"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/store"
	"github.com/tenaz/tenaz/services/deadletter"
	"github.com/tenaz/tenaz/services/dispatcher"
	"github.com/tenaz/tenaz/services/ingest"
	"github.com/tenaz/tenaz/services/poller"
	"github.com/tenaz/tenaz/streams"
)

//go:embed demo.yaml
var demoYAML []byte

// DemoConfig returns the built-in demo config (with TENAZ_ overrides).
func DemoConfig(getenv func(string) (string, bool)) (*config.Config, error) {
	return config.Parse(demoYAML, getenv)
}

// DemoNotice is what `tenaz run` says, as a warning and in its banner,
// when it runs the built-in demo config.
const DemoNotice = "demo config: no auth, loopback only, not for production"

// Options configure a System.
type Options struct {
	// Config is the validated config. Required.
	Config *config.Config
	// Logger defaults to a disabled logger.
	Logger *zerolog.Logger
	// Demo says that Config is the built-in demo config: Start logs
	// DemoNotice as a warning first. Defaults to false.
	Demo bool
	// ConfigPath is the file Config was read from, reloaded on every
	// signal of Reload and when it changes (pkg/live). Defaults to ""
	// (none: only the accounts bucket changes the config in force).
	ConfigPath string
	// Reload delivers SIGHUP (the binary's main subscribes it). Defaults
	// to nil (no signal).
	Reload <-chan os.Signal
}

// System is everything of `tenaz run`.
type System struct {
	o       Options
	log     zerolog.Logger
	srv     *server.Server
	nc      *nats.Conn
	conns   []*nats.Conn
	demo    *provider.Provider
	demoH   *daemon.Server
	bureaus []*bureau
	http    *daemon.Server
	mux     *httpapi.Mux // the routes of http
	parts   []daemon.Component
	auth    *auth.Authenticator
	live    *live.Config
	noLive  context.CancelFunc // ends the reloads and the bucket's watch
	Ingest  *ingest.Service
	Disp    *dispatcher.Service
}

// New checks the options; it does no I/O.
func New(o Options) (*System, error) {
	if o.Config == nil {
		return nil, errors.New("tenaz: Config is required")
	}
	log := zerolog.Nop()
	if o.Logger != nil {
		log = *o.Logger
	}
	return &System{o: o, log: log}, nil
}

// HTTPAddr is the bound address of the shared listener.
func (t *System) HTTPAddr() string { return t.http.Addr }

// NATSURL is the URL the services use.
func (t *System) NATSURL() string { return t.nc.ConnectedUrl() }

// Start starts NATS (embedded unless configured), applies the streams,
// starts the demo provider and the four services, then serves HTTP.
func (t *System) Start(ctx context.Context) (err error) {
	cfg := t.o.Config
	defer func() {
		if err != nil {
			_ = t.Stop(context.Background())
		}
	}()
	if t.o.Demo {
		t.log.Warn().Msg(DemoNotice)
	}
	if t.auth, err = auth.New(cfg); err != nil { // no keys: refuse unless auth.disabled
		return err
	}
	if err := daemon.ConfigureMetrics(cfg); err != nil {
		return err
	}
	if host, _, _ := net.SplitHostPort(cfg.HTTP.Addr); !cfg.Auth.Enabled() && !isLoopback(host) {
		t.log.Warn().Str("addr", cfg.HTTP.Addr).Msg("auth.disabled: the HTTP API is open to anyone who reaches http.addr, which is beyond loopback")
	}
	url := cfg.NATS.URL
	if url == "" {
		always, every := cfg.NATS.Embedded.SyncInterval()
		na, err := natsd.ClientAuth(cfg.NATS) // the embedded server requires what tenaz's clients present
		if err != nil {
			return err
		}
		if err := openNATS(cfg, na); err != nil {
			return err
		}
		t.srv, err = natsd.Start(natsd.Options{StoreDir: cfg.NATS.Embedded.StoreDir, Listen: cfg.NATS.Embedded.Listen,
			SyncAlways: always, SyncInterval: every, Auth: na})
		var le *natsd.ListenError
		if errors.As(err, &le) { // the client port is the only listener it opens
			return fmt.Errorf("nats.embedded.listen: %s: %w", le.Addr, le.Err)
		}
		if err != nil {
			return err
		}
		url = t.srv.ClientURL()
		t.log.Info().Str("nats", url).Str("store_dir", cfg.NATS.Embedded.StoreDir).
			Str("sync", cfg.NATS.Embedded.Sync).Msg("embedded nats-server started")
	}
	if t.nc, err = natsconn.Connect(cfg.NATS, "tenaz", url, natsconn.Logged(&t.log)); err != nil {
		return err
	}
	if err := daemon.CheckSizes(ctx, t.nc, cfg); err != nil {
		return err
	}
	js, err := natsconn.JetStream(t.nc)
	if err != nil {
		return err
	}
	if _, err := streams.Apply(ctx, js, store.LayoutOptions(cfg)); err != nil {
		return err
	}
	lctx, noLive := context.WithCancel(context.Background())
	t.noLive = noLive
	if t.live, err = daemon.Live(lctx, t.nc, cfg, t.o.ConfigPath, t.auth, &t.log); err != nil {
		return err
	}
	go t.live.Run(lctx, t.o.Reload)
	if cfg.Demo.Provider != "" {
		f := provider.DemoFaults()
		if cfg.Demo.FailureRate > 0 {
			f.ErrorRate = cfg.Demo.FailureRate
		}
		t.demo = provider.New(f, provider.WithIdempotent(), provider.WithMaxCalls(10000))
		if t.demoH, err = daemon.Serve(cfg.Demo.Provider, t.demo); err != nil {
			return fmt.Errorf("demo provider: %w", err)
		}
		t.log.Info().Str("addr", t.demoH.Addr).Msg("demo provider started")
	}
	log := t.log
	// Ingest and the dispatcher get their own connections, as they would as
	// separate processes: the server reads each connection on one goroutine,
	// so one shared connection would serialise their traffic on one core.
	inc, err := t.connect(cfg, url, ingest.Name)
	if err != nil {
		return err
	}
	dnc, err := t.connect(cfg, url, "tenaz-dispatcher")
	if err != nil {
		return err
	}
	if t.Ingest, err = ingest.New(ingest.Options{Conn: inc, Config: cfg, Live: t.live, Logger: &log, SkipStreams: true, Auth: t.auth}); err != nil {
		return err
	}
	if t.Disp, err = dispatcher.New(dispatcher.Options{Conn: dnc, Config: cfg, Live: t.live, Logger: &log, SkipStreams: true, Auth: t.auth}); err != nil {
		return err
	}
	pl, err := poller.New(poller.Options{Conn: t.nc, Config: cfg, Live: t.live, Logger: &log, SkipStreams: true, Auth: t.auth})
	if err != nil {
		return err
	}
	dl, err := deadletter.New(deadletter.Options{Conn: t.nc, Config: cfg, Live: t.live, Logger: &log, SkipStreams: true, Auth: t.auth})
	if err != nil {
		return err
	}
	for _, c := range []daemon.Component{dl, pl, t.Disp, t.Ingest} { // consumers of a stage start before its producers
		if err := c.Start(ctx); err != nil {
			return err
		}
		t.parts = append(t.parts, c)
	}
	t.mux = daemon.Mux(t.parts...)
	if t.http, err = daemon.ServeWith(cfg.HTTP, daemon.Handler(cfg, t.auth, t.mux)); err != nil {
		return err
	}
	if err := t.startBureaus(); err != nil {
		return err
	}
	t.log.Info().Str("http", t.http.Addr).Msg("tenaz running")
	return nil
}

// Stop stops HTTP, then the services (producers first, so in-flight work
// drains downstream), then NATS; the dispatcher stops taking work from the
// start. Idempotent.
func (t *System) Stop(ctx context.Context) error {
	var errs []error
	// The dispatcher stops taking work at once, not after the HTTP
	// listener (which a slow client can hold up to http.read_timeout): a
	// call it starts must still end before ctx's deadline.
	disp := make(chan error, 1)
	started := slices.ContainsFunc(t.parts, func(c daemon.Component) bool { return c == daemon.Component(t.Disp) })
	if started {
		go func() { disp <- t.Disp.Stop(ctx) }()
	}
	if t.http != nil {
		errs = append(errs, t.http.Stop(ctx))
		t.http = nil
	}
	for i := len(t.parts) - 1; i >= 0; i-- {
		if started && t.parts[i] == daemon.Component(t.Disp) {
			errs = append(errs, <-disp)
			continue
		}
		errs = append(errs, t.parts[i].Stop(ctx))
	}
	t.parts = nil
	if t.noLive != nil {
		t.noLive()
		t.noLive = nil
	}
	for _, b := range t.bureaus {
		_ = b.p.Close()
		errs = append(errs, b.h.Stop(ctx))
	}
	t.bureaus = nil
	if t.demoH != nil {
		_ = t.demo.Close()
		errs = append(errs, t.demoH.Stop(ctx))
		t.demoH = nil
	}
	for _, nc := range append(t.conns, t.nc) {
		if nc != nil {
			_ = nc.FlushTimeout(5 * time.Second) // acks still buffered
			nc.Close()
		}
	}
	t.conns, t.nc = nil, nil
	if t.srv != nil {
		natsd.Shutdown(t.srv)
		t.srv = nil
	}
	return errors.Join(errs...)
}

// Patterns lists every route pattern the shared listener serves (each
// needs a class in pkg/auth).
func (t *System) Patterns() []string { return t.mux.Patterns() }

// natsCredentials says how to give the embedded server credentials.
const natsCredentials = "set nats.user and nats.password, nats.token or nats.nkey_seed_file"

// openNATS refuses an embedded server without credentials where it would
// be a way around the HTTP API's keys: NATS checks no account (whoever
// can publish on <prefix>.intake.> or call <prefix>.api.> acts for every
// account), so with HTTP auth on, or on an address beyond loopback, it
// must require credentials.
func openNATS(cfg *config.Config, na natsd.Auth) error {
	if !na.IsZero() {
		return nil
	}
	var errs []error
	if cfg.Auth.Enabled() {
		errs = append(errs, &config.KeyError{Key: "nats", Msg: "HTTP auth is on (auth.keys, auth.operators) but the embedded nats-server " +
			"has no credentials, so any process that reaches it could submit and act for every account past the API keys: " + natsCredentials})
	}
	if host, _, _ := net.SplitHostPort(cfg.NATS.Embedded.Listen); !isLoopback(host) {
		errs = append(errs, &config.KeyError{Key: "nats.embedded.listen", Msg: fmt.Sprintf("%q is beyond loopback and the embedded nats-server "+
			"has no credentials, so anyone who reaches it could act for every account: listen on 127.0.0.1 or %s", cfg.NATS.Embedded.Listen, natsCredentials)})
	}
	return errors.Join(errs...)
}

// isLoopback reports whether host is a loopback address or localhost.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (t *System) connect(cfg *config.Config, url, name string) (*nats.Conn, error) {
	nc, err := natsconn.Connect(cfg.NATS, name, url, natsconn.Logged(&t.log))
	if err != nil {
		return nil, err
	}
	t.conns = append(t.conns, nc)
	return nc, nil
}
