package deadletter

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/rs/zerolog"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/store"
	"github.com/tenaz/tenaz/pkg/tenaz"
	"github.com/tenaz/tenaz/streams"
)

// Version is reported by the micro service.
const Version = "0.1.0"

// Options configure the service.
type Options struct {
	// Conn is the NATS connection. Required.
	Conn *nats.Conn
	// Config is the validated tenaz config. Required.
	Config *config.Config
	// Logger defaults to a disabled logger.
	Logger *zerolog.Logger
	// SkipStreams does not apply the stream layout at start (tenaz run
	// applies it once for every service).
	SkipStreams bool
}

// Service is the deadletter service.
type Service struct {
	o       Options
	log     zerolog.Logger
	js      jetstream.JetStream
	st      *store.Store
	subj    tenaz.Subjects
	mu      sync.Mutex
	started bool
	micro   micro.Service
	cc      jetstream.ConsumeContext
	wg      sync.WaitGroup
	cancel  context.CancelCauseFunc
}

// New validates the options; it does no I/O.
func New(o Options) (*Service, error) {
	if o.Conn == nil || o.Config == nil {
		return nil, errors.New("deadletter: Conn and Config are required")
	}
	log := zerolog.Nop()
	if o.Logger != nil {
		log = o.Logger.With().Str("service", "deadletter").Logger()
	}
	js, err := jetstream.New(o.Conn)
	if err != nil {
		return nil, err
	}
	return &Service{o: o, log: log, js: js, subj: tenaz.NewSubjects(o.Config.Prefix)}, nil
}

// Start registers the micro service. It returns once started.
func (s *Service) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return nil
	}
	if !s.o.SkipStreams {
		if err := streams.Apply(ctx, s.js, streams.Options{Prefix: s.o.Config.Prefix, Replicas: s.o.Config.Streams.Replicas}); err != nil {
			return fmt.Errorf("deadletter: %w", err)
		}
	}
	st, err := store.Open(ctx, s.js, store.Options{Retention: s.o.Config.Streams.Retention.D()})
	if err != nil {
		return fmt.Errorf("deadletter: %w", err)
	}
	s.st = st
	cons, err := s.js.Consumer(ctx, "TENAZ_ADVISORIES", "deadletter")
	if err != nil {
		return fmt.Errorf("deadletter: advisories consumer: %w", err)
	}
	runCtx, cancel := context.WithCancelCause(context.Background())
	s.cancel = cancel
	s.cc, err = cons.Consume(func(m jetstream.Msg) {
		s.wg.Add(1)
		defer s.wg.Done()
		s.handleAdvisory(runCtx, m)
	}, jetstream.ConsumeErrHandler(func(jetstream.ConsumeContext, error) {}))
	if err != nil {
		cancel(nil)
		return fmt.Errorf("deadletter: consume: %w", err)
	}
	m, err := micro.AddService(s.o.Conn, micro.Config{Name: "tenaz-deadletter", Version: Version, Description: "Dead letters, manual review, operator actions", QueueGroup: "tenaz-deadletter"})
	if err != nil {
		s.cc.Stop()
		cancel(nil)
		return err
	}
	g := m.AddGroup(s.o.Config.Prefix + ".api.deadletter")
	if err := g.AddEndpoint("ping", micro.HandlerFunc(func(r micro.Request) { _ = r.Respond([]byte("pong")) })); err != nil {
		_ = m.Stop()
		s.cc.Stop()
		cancel(nil)
		return err
	}
	s.micro, s.started = m, true
	s.log.Info().Msg("deadletter started")
	return nil
}

// Stop deregisters. Idempotent and safe before Start.
func (s *Service) Stop(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.started {
		return nil
	}
	s.started = false
	s.cc.Drain()
	select {
	case <-s.cc.Closed():
	case <-ctx.Done():
		s.cc.Stop()
		<-s.cc.Closed()
	}
	s.wg.Wait()
	s.cancel(nil)
	s.log.Info().Msg("deadletter stopped")
	return s.micro.Stop()
}

// Ready reports whether the service is started and connected.
func (s *Service) Ready() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.started {
		return errors.New("deadletter not started")
	}
	if !s.o.Conn.IsConnected() {
		return errors.New("deadletter: NATS not connected")
	}
	return nil
}

// Routes registers the service's HTTP routes on mux (none yet).
func (s *Service) Routes(mux *http.ServeMux) {}
