// Package daemon is what every tenaz binary does around its service:
// find and load the config, serve the HTTP routes with /healthz, /readyz
// and /metrics, and stop under a deadline. Signal handling stays in each
// main.go (signal.NotifyContext), as the conventions ask.
//
//	cfg, err := daemon.LoadConfig(*configFlag)
//	srv, err := daemon.Serve(cfg.HTTP.Addr, mux)
package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"github.com/tenaz/tenaz/pkg/auth"
	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/httpapi"
	"github.com/tenaz/tenaz/pkg/live"
	"github.com/tenaz/tenaz/pkg/logging"
	"github.com/tenaz/tenaz/pkg/metrics"
	"github.com/tenaz/tenaz/pkg/natsconn"
	"github.com/tenaz/tenaz/pkg/size"
	"github.com/tenaz/tenaz/pkg/store"
	"github.com/tenaz/tenaz/pkg/tracing"
)

// Component is a service as a binary runs it.
type Component interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
	Ready() error
}

// Routed is a Component that serves HTTP routes of its own (ingest's API,
// the dead-letter screen); the others serve health and metrics only.
type Routed interface {
	Routes(mux httpapi.Router)
}

// ConfigPath is the config file a binary reads: path (its --config flag),
// else $TENAZ_CONFIG, else ./tenaz.yaml when it exists; "" for none.
func ConfigPath(path string) string {
	if path == "" {
		path = os.Getenv("TENAZ_CONFIG")
	}
	if path == "" {
		if _, err := os.Stat("tenaz.yaml"); err == nil {
			path = "tenaz.yaml"
		}
	}
	return path
}

// LoadConfig reads the file ConfigPath finds; with none it uses the
// defaults (NATS from NATS_URL).
func LoadConfig(path string) (*config.Config, error) {
	if path = ConfigPath(path); path == "" {
		return config.Parse(nil, os.LookupEnv)
	}
	return config.Load(path)
}

// Mux returns a mux with the routes of each component that is Routed,
// /healthz, /readyz (all components ready) and /metrics. It lists its
// patterns: every one needs a class in pkg/auth.
func Mux(cs ...Component) *httpapi.Mux {
	mux := httpapi.NewMux()
	checks := make([]httpapi.Check, 0, len(cs))
	for _, c := range cs {
		if r, ok := c.(Routed); ok {
			r.Routes(mux)
		}
		checks = append(checks, c.Ready)
	}
	httpapi.Health(mux, checks...)
	mux.Handle("GET /metrics", MetricsHandler())
	return mux
}

// MetricsHandler serves the default registry, in the OpenMetrics format
// to a scraper that asks for it: the one that carries the latency
// histograms' trace exemplars.
func MetricsHandler() http.Handler {
	return promhttp.InstrumentMetricHandler(prometheus.DefaultRegisterer,
		promhttp.HandlerFor(prometheus.DefaultGatherer, promhttp.HandlerOpts{EnableOpenMetrics: true}))
}

// StopTracing flushes the spans Setup's provider still holds, within a
// few seconds: a collector that is down does not hold a stop up.
func StopTracing(stop func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = stop(ctx)
}

// ConfigureMetrics gives metrics.Default the config's metrics section
// (the account label's bound, native histograms), before anything is
// recorded. Every binary and `tenaz run` call it.
func ConfigureMetrics(cfg *config.Config) error {
	return metrics.Configure(metrics.OptionsFrom(cfg.Metrics))
}

// BodySlack is what a request body may hold beyond http.max_body_bytes
// (the submission's envelope around its payload).
const BodySlack = 64 << 10

// ScreenForms is the path the operator screen posts its forms to. A
// replay's form carries the event's payload as its textarea shows it,
// edited or not: indented (about twice its size at most) and
// form-encoded (a byte may take three). So its body may be FormLimit.
const ScreenForms = "/ui/actions"

// FormLimit bounds a body posted to ScreenForms.
func FormLimit(cfg *config.Config) int64 { return 6*cfg.HTTP.MaxBodyBytes + BodySlack }

// Handler is what a process serves: mux behind a.Guard (each route judged
// by the class of the pattern it matches: open health, metrics and webhook
// routes, operator-only screen, dead-letter and breaker routes, a valid
// credential for the events API; see package auth) with every request
// body bounded by http.max_body_bytes plus BodySlack, on every route but
// the screen's forms (FormLimit).
func Handler(cfg *config.Config, a *auth.Authenticator, mux auth.Router) http.Handler {
	h := a.Guard(mux)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		limit := cfg.HTTP.MaxBodyBytes + BodySlack
		if r.URL.Path == ScreenForms {
			limit = FormLimit(cfg)
		}
		r2 := *r // as http.MaxBytesHandler does
		r2.Body = http.MaxBytesReader(w, r.Body, limit)
		h.ServeHTTP(w, &r2)
	})
}

// Server is a running HTTP server.
type Server struct {
	*http.Server
	Addr string // the bound address (useful with port 0)
	done chan error
}

// Serve listens on addr and serves h in the background, with the default
// http.* timeouts (see ServeWith).
func Serve(addr string, h http.Handler) (*Server, error) {
	c := (&config.Config{}).WithDefaults().HTTP
	c.Addr = addr
	return ServeWith(c, h)
}

// ServeWith listens on c.Addr and serves h in the background. Every
// connection has deadlines (c's read_header, read, write and idle
// timeouts): a client that trickles its headers or its body, or never
// reads its answer, is cut off instead of holding a connection and a
// goroutine forever.
func ServeWith(c config.HTTP, h http.Handler) (*Server, error) {
	ln, err := net.Listen("tcp", c.Addr)
	if err != nil {
		return nil, fmt.Errorf("http: listen %s: %w", c.Addr, err)
	}
	s := &Server{
		Server: &http.Server{Handler: h, ReadHeaderTimeout: c.ReadHeaderTimeout.D(), ReadTimeout: c.ReadTimeout.D(),
			WriteTimeout: c.WriteTimeout.D(), IdleTimeout: c.IdleTimeout.D()},
		Addr: ln.Addr().String(), done: make(chan error, 1),
	}
	go func() {
		err := s.Server.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		s.done <- err
	}()
	return s, nil
}

// Stop shuts the server down gracefully within ctx.
func (s *Server) Stop(ctx context.Context) error {
	if s == nil {
		return nil
	}
	err := s.Shutdown(ctx)
	if err2 := <-s.done; err == nil {
		err = err2
	}
	return err
}

// SizeCheckWait bounds how long CheckSizes waits for a first server.
const SizeCheckWait = 30 * time.Second

// CheckSizes refuses, before anything starts, an http.max_body_bytes
// whose events would not fit the server's max_payload and tenaz's
// streams (size.Check): such events would be answered 202 and then never
// stored, or stored and then never moved. Every binary and `tenaz run`
// call it after connecting.
func CheckSizes(ctx context.Context, nc *nats.Conn, cfg *config.Config) error {
	ctx, cancel := context.WithTimeout(ctx, SizeCheckWait)
	defer cancel()
	return size.Check(ctx, nc, cfg.HTTP.MaxBodyBytes)
}

// Process is what Build gets to make its service.
type Process struct {
	// Conn is the process's NATS connection.
	Conn *nats.Conn
	// Config is the config as the process started.
	Config *config.Config
	// Live is the config in force: reloaded on SIGHUP or a change of the
	// file, merged with the accounts bucket (pkg/live).
	Live *live.Config
	// Auth checks the HTTP API's credentials (and the service's NATS
	// endpoints'), its keys kept to Live's.
	Auth *auth.Authenticator
	// Logger is the process's logger.
	Logger *zerolog.Logger
}

// Build makes a service of a process.
type Build func(p Process) (Component, error)

// Run is the body of a service binary once its main has installed signal
// handling: load the config (path, else $TENAZ_CONFIG, else ./tenaz.yaml),
// connect to NATS as name, follow the accounts bucket, build and start
// the service, serve HTTP, reload the config on every signal of hup
// (SIGHUP) and when the file changes, wait for ctx, then stop within
// stop_timeout (draining in-flight work).
func Run(ctx context.Context, name, configPath string, hup <-chan os.Signal, build Build) error {
	cfg, err := LoadConfig(configPath)
	if err != nil {
		return err
	}
	if err := ConfigureMetrics(cfg); err != nil {
		return err
	}
	log := logging.New(cfg.Log.Format, cfg.Log.Level, nil)
	stopTracing, err := tracing.Setup(ctx, name, &log) // off unless OTEL_TRACES_EXPORTER names an exporter
	if err != nil {
		return err
	}
	defer StopTracing(stopTracing)
	a, err := auth.New(cfg) // refuses no keys unless auth.disabled
	if err != nil {
		return err
	}
	nc, err := natsconn.Connect(cfg.NATS, name, "", natsconn.Logged(&log))
	if err != nil {
		return err
	}
	defer nc.Close()
	if err := CheckSizes(ctx, nc, cfg); err != nil {
		return err
	}
	lv, err := Live(ctx, nc, cfg, ConfigPath(configPath), a, &log)
	if err != nil {
		return err
	}
	go lv.Run(ctx, hup)
	svc, err := build(Process{Conn: nc, Config: cfg, Live: lv, Auth: a, Logger: &log})
	if err != nil {
		return err
	}
	if err := svc.Start(ctx); err != nil {
		return err
	}
	srv, err := ServeWith(cfg.HTTP, Handler(cfg, a, Mux(svc)))
	if err != nil {
		_ = svc.Stop(context.Background())
		return err
	}
	log.Info().Str("http", srv.Addr).Msg(name + " running")
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), cfg.StopTimeout.D())
	defer cancel()
	_ = srv.Stop(sctx)
	err = svc.Stop(sctx)
	_ = nc.Drain()
	return err
}

// Live is the live config of a process that started with cfg (read from
// path; "" for none): it follows the accounts bucket on nc, and every
// config it puts in force gives a its keys and operators. It returns
// once the bucket's accounts are in force. Every binary and `tenaz run`
// call it, then run its Run with their SIGHUP.
func Live(ctx context.Context, nc *nats.Conn, cfg *config.Config, path string, a *auth.Authenticator, log *zerolog.Logger) (*live.Config, error) {
	if log == nil {
		nop := zerolog.Nop()
		log = &nop
	}
	lv := live.New(cfg, live.Options{Path: path, Logger: log})
	lv.OnChange(func(c *config.Config) {
		if err := a.Update(c); err != nil {
			log.Error().Err(err).Msg("the API keys of the config in force could not be applied; the previous keys stay")
		}
	})
	js, err := natsconn.JetStream(nc)
	if err != nil {
		return nil, err
	}
	if err := lv.Watch(ctx, js, store.LayoutOptions(cfg)); err != nil {
		return nil, err
	}
	return lv, nil
}
