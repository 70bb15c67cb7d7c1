package poller

import (
	"context"
	"errors"
	"net/http"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/rs/zerolog"

	"github.com/tenaz/tenaz/pkg/config"
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
}

// Service is the poller service.
type Service struct {
	o       Options
	log     zerolog.Logger
	mu      sync.Mutex
	started bool
	micro   micro.Service
}

// New validates the options; it does no I/O.
func New(o Options) (*Service, error) {
	if o.Conn == nil || o.Config == nil {
		return nil, errors.New("poller: Conn and Config are required")
	}
	log := zerolog.Nop()
	if o.Logger != nil {
		log = o.Logger.With().Str("service", "poller").Logger()
	}
	return &Service{o: o, log: log}, nil
}

// Start registers the micro service. It returns once started.
func (s *Service) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return nil
	}
	m, err := micro.AddService(s.o.Conn, micro.Config{Name: "tenaz-poller", Version: Version, Description: "Polls providers, fires deadlines, reconciles stuck events", QueueGroup: "tenaz-poller"})
	if err != nil {
		return err
	}
	g := m.AddGroup(s.o.Config.Prefix + ".api.poller")
	if err := g.AddEndpoint("ping", micro.HandlerFunc(func(r micro.Request) { _ = r.Respond([]byte("pong")) })); err != nil {
		_ = m.Stop()
		return err
	}
	s.micro, s.started = m, true
	s.log.Info().Msg("poller started")
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
	s.log.Info().Msg("poller stopped")
	return s.micro.Stop()
}

// Ready reports whether the service is started and connected.
func (s *Service) Ready() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.started {
		return errors.New("poller not started")
	}
	if !s.o.Conn.IsConnected() {
		return errors.New("poller: NATS not connected")
	}
	return nil
}

// Routes registers the service's HTTP routes on mux (none yet).
func (s *Service) Routes(mux *http.ServeMux) {}
