package poller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/rs/zerolog"

	"github.com/tenaz/tenaz/pkg/accounts"
	"github.com/tenaz/tenaz/pkg/auth"
	"github.com/tenaz/tenaz/pkg/breaker"
	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/dead"
	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/lane"
	"github.com/tenaz/tenaz/pkg/lifecycle"
	"github.com/tenaz/tenaz/pkg/live"
	"github.com/tenaz/tenaz/pkg/metrics"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natsconn"
	"github.com/tenaz/tenaz/pkg/owner"
	"github.com/tenaz/tenaz/pkg/queue"
	"github.com/tenaz/tenaz/pkg/quota"
	"github.com/tenaz/tenaz/pkg/store"
	"github.com/tenaz/tenaz/pkg/target"
)

// Version is reported by the micro service: the build's version, the
// same for every tenaz service (metrics.BuildInfo.SemVer).
var Version = metrics.Build().SemVer()

// Options configure the service.
type Options struct {
	// Conn is the NATS connection. Required.
	Conn *nats.Conn
	// Config is the validated tenaz config. Required.
	Config *config.Config
	// Live is the config in force, reloaded (pkg/live): the targets and
	// the accounts' target overrides are read from it per poll. Defaults
	// to Config alone, never reloaded.
	Live *live.Config
	// Logger defaults to a disabled logger.
	Logger *zerolog.Logger
	// Auth checks the operator credential of the micro endpoints (reconcile).
	// Nil serves them without (tests, embedded use); binaries set it.
	Auth *auth.Authenticator
	// SkipStreams does not apply the stream layout at start (tenaz run
	// applies it once for every service).
	SkipStreams bool
	// HTTPClient polls targets. Defaults to target.DefaultClient.
	HTTPClient *http.Client
	// Instance names this replica in history entries ("poller/<Instance>")
	// and among the replicas holding slots of the targets' limits. Defaults
	// to names.Instance(): two replicas on one host (or each pid 1 in its
	// container) must not share one name, or their slots would be counted
	// as one replica's.
	Instance string
	// NoReconciler leaves the periodic sweep off (Reconcile can still be
	// called, e.g. by the micro endpoint).
	NoReconciler bool
	// Metrics records polls, outcomes, repairs and the events census.
	// Defaults to metrics.Default.
	Metrics *metrics.Set
	// OnSweep, if set, receives the report of every reconciler sweep
	// (metrics, tests).
	OnSweep func(Report)
}

// Service is the poller: it handles the timers the dispatcher schedules
// (callback deadlines and polls, fired by the server onto
// <prefix>.timers.> and shared by every replica through one durable
// consumer) and runs the reconciler.
type Service struct {
	o     Options
	log   zerolog.Logger
	nc    *nats.Conn
	js    jetstream.JetStream
	cfg   *config.Config
	subj  names.Subjects
	dead  *dead.Writer
	st    *store.Store
	q     *queue.Queue
	order lane.Order // wakes what waits behind an event the poller finished
	actor string

	lifecycle.Base
	cc      []jetstream.ConsumeContext // one per partition
	targets *target.Cache
	live    *live.Config       // the targets and account overrides in force
	turns   *turns             // each account's timers waiting for a worker
	pace    *pacer             // the targets' provider-wide rates and concurrency, which polls take too
	paused  accounts.PauseBook // the operators' pauses, which hold polls too
	breaker *breaker.Registry  // the dispatchers' breakers, watched: an open one holds polls too
	wg      sync.WaitGroup     // timers in flight
	bg      sync.WaitGroup     // reconciler and trim loops
	runCtx  context.Context
	cancel  context.CancelFunc
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
	if o.Metrics == nil {
		o.Metrics = metrics.Default
	}
	if o.Instance == "" {
		o.Instance = names.Instance()
	}
	js, err := natsconn.JetStream(o.Conn)
	if err != nil {
		return nil, fmt.Errorf("poller: %w", err)
	}
	s := &Service{o: o, log: log, nc: o.Conn, js: js, cfg: o.Config, subj: names.NewSubjects(o.Config.Prefix),
		actor: "poller/" + o.Instance, live: o.Live}
	s.Init("poller", o.Conn)
	s.dead = &dead.Writer{JS: js, Subj: s.subj, Bound: func(a string) int64 { return s.live.Load().DeadLettersOf(a) }, Full: o.Metrics.DeadFull}
	if s.live == nil {
		s.live = live.Static(o.Config)
	}
	s.targets = target.NewCache(s.live.Load(), o.HTTPClient)
	s.live.OnChange(s.targets.Reset) // a reloaded target or account override polls with its new URL and headers
	return s, nil
}

// Start binds to the streams, starts consuming timers and the reconciler,
// and registers the micro service. It returns once started.
func (s *Service) Start(ctx context.Context) error { return s.Base.Start(ctx, s.start) }

func (s *Service) start(ctx context.Context) error {
	subj, st, err := store.Bind(ctx, s.js, s.cfg, s.o.SkipStreams, nil)
	if err != nil {
		return fmt.Errorf("poller: %w", err)
	}
	s.subj, s.st = subj, st
	s.q = queue.New(s.js, subj)
	lanes, err := lane.Open(ctx, s.js, s.cfg.Prefix)
	if err != nil {
		return fmt.Errorf("poller: %w", err)
	}
	s.order = lane.Order{Lanes: lanes, Records: st, Queue: s.q}
	// A guest of the dispatchers' replicas: its heartbeat keeps the
	// slots of the targets' concurrency its polls hold counted (pacer).
	guests, err := owner.Join(ctx, s.js, owner.Options{Instance: s.actor, Guest: true, Linger: func() time.Duration { return s.live.Load().LongestCall() }, Prefix: s.cfg.Prefix, Logger: &s.log})
	if err != nil {
		return fmt.Errorf("poller: %w", err)
	}
	s.Defer(func(ctx context.Context) { guests.Leave(ctx) })
	quotas, err := quota.Open(ctx, s.js, quota.Options{Instance: guests.Self(), Live: guests.Present, Counted: guests.Counted, Logger: &s.log, Prefix: s.cfg.Prefix})
	if err != nil {
		return fmt.Errorf("poller: %w", err)
	}
	s.pace = newPacer(quotas, guests)
	pauses, err := accounts.OpenPauses(ctx, s.js, subj)
	if err != nil {
		return fmt.Errorf("poller: %w", err)
	}
	fctx, cancel := context.WithTimeout(ctx, accounts.FollowWait)
	stopFollowing, err := pauses.Follow(fctx, &s.paused, nil)
	cancel()
	if err != nil {
		return fmt.Errorf("poller: the operators' pauses: %w", err)
	}
	s.Defer(func(context.Context) { stopFollowing() })
	log := s.log
	if s.breaker, err = breaker.New(ctx, s.js, breaker.Options{Instance: s.actor, Prefix: s.cfg.Prefix, Logger: &log, Metrics: s.o.Metrics}); err != nil {
		return fmt.Errorf("poller: the breakers: %w", err)
	}
	s.Defer(func(context.Context) { s.breaker.Stop() })
	s.runCtx, s.cancel = context.WithCancel(context.Background())
	s.Defer(func(ctx context.Context) {
		s.cancel()
		s.bg.Wait()
		quotas.Close(ctx)
		s.log.Info().Msg("poller stopped")
	})
	n := s.cfg.Poller.Concurrency
	s.turns = newTurns(n)
	for range n {
		s.wg.Add(1)
		go s.work()
	}
	// Stop takes no more timers, gives those waiting back (another
	// replica takes them at once) and lets those running finish (bounded
	// by its context).
	s.Defer(func(ctx context.Context) {
		for _, cc := range s.cc {
			cc.Drain()
		}
		s.cc = nil
		for _, m := range s.turns.close() {
			_ = m.Nak()
		}
		done := make(chan struct{})
		go func() { s.wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
		}
	})
	// One consumer per partition's EVENTS, the workers shared through
	// the accounts' turns.
	ackWait := time.Duration(0)
	for p := range subj.Parts() {
		cons, err := s.js.Consumer(ctx, subj.EventsStreamOf(p), names.ConsumerPoller)
		if err != nil {
			return fmt.Errorf("poller: timers consumer: %w", err)
		}
		if w := cons.CachedInfo().Config.AckWait; ackWait == 0 || w < ackWait {
			ackWait = w
		}
		cc, err := cons.Consume(s.receive, queue.Pull(n)...)
		if err != nil {
			return fmt.Errorf("poller: consume timers: %w", err)
		}
		s.cc = append(s.cc, cc)
		st, err := s.js.Stream(ctx, subj.EventsStreamOf(p))
		if err != nil {
			return fmt.Errorf("poller: timers stream: %w", err)
		}
		if queue.Trims(st) {
			t := &queue.Trimmer{Stream: st, Consumer: cons, Filter: subj.TimersIn(p),
				Failed: func() { s.o.Metrics.TrimFailed(metrics.TrimTimers) }}
			s.bg.Add(1)
			go func() { defer s.bg.Done(); t.Run(s.runCtx, trimEvery, s.log) }()
		}
	}
	s.bg.Add(1)
	go func() { defer s.bg.Done(); s.keepAlive(ackWait) }()
	m, err := s.addMicro()
	if err != nil {
		return err
	}
	s.Defer(func(context.Context) { _ = m.Stop() })
	if !s.o.NoReconciler {
		s.bg.Add(1)
		go s.reconcileLoop()
	}
	s.log.Info().Int("concurrency", n).Msg("poller started")
	return nil
}

// receive puts a fired timer in its account's line, where it waits for
// a worker (turns); an account holding all the timers it may here has
// the timer put off.
func (s *Service) receive(m jetstream.Msg) {
	env, err := event.Unmarshal(m.Data())
	if err != nil {
		s.log.Error().Err(err).Str("subject", m.Subject()).Msg("undecodable timer dropped")
		_ = m.TermWithReason("malformed timer")
		return
	}
	switch err := s.turns.add(fired{m: m, env: env, kept: time.Now()}); {
	case errors.Is(err, errStopping):
		_ = m.Nak() // another replica takes it
	case errors.Is(err, errCrowded):
		s.crowded(m, env)
	}
}

// work is one worker: it handles the timers of each account in turn
// until the replica stops.
func (s *Service) work() {
	defer s.wg.Done()
	for {
		f, ok := s.turns.next()
		if !ok {
			return
		}
		s.handle(s.runCtx, f.m, f.env)
		s.turns.done(f)
	}
}

// keepAlive keeps the timers this replica holds, waiting in the accounts'
// lines or running, from being redelivered: each is marked in progress
// once it has been held a quarter of the consumer's ack wait, so at most
// half of it passes between two marks.
func (s *Service) keepAlive(ackWait time.Duration) {
	every := max(ackWait/4, time.Second)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-s.runCtx.Done():
			return
		case <-tick.C:
			for _, m := range s.turns.stale(time.Now().Add(-every)) {
				_ = m.InProgress()
			}
		}
	}
}

func (s *Service) addMicro() (micro.Service, error) {
	m, err := micro.AddService(s.nc, micro.Config{Name: "tenaz-poller", Version: Version,
		Description: "Polls providers, fires callback deadlines, reconciles stuck events", QueueGroup: "tenaz-poller",
		StatsHandler: s.o.Metrics.StatsHandler})
	if err != nil {
		return nil, err
	}
	g := m.AddGroup(s.cfg.Prefix + ".api.poller")
	if err := g.AddEndpoint("ping", micro.HandlerFunc(func(r micro.Request) { _ = r.Respond([]byte("pong")) })); err != nil {
		_ = m.Stop()
		return nil, err
	}
	// reconcile runs one sweep now and answers its report: an operator's
	// (a sweep of every record, and every account's census).
	if err := g.AddEndpoint("reconcile", s.o.Auth.OperatorOnly(micro.HandlerFunc(func(r micro.Request) {
		ctx, cancel := context.WithTimeout(s.runCtx, 5*time.Minute)
		defer cancel()
		rep, err := s.Reconcile(ctx)
		if err != nil {
			_ = r.Error("500", err.Error(), nil)
			return
		}
		_ = r.RespondJSON(rep)
	}))); err != nil {
		_ = m.Stop()
		return nil, err
	}
	// Once Start returns, the server routes requests to the endpoints.
	if err := s.nc.Flush(); err != nil {
		_ = m.Stop()
		return nil, err
	}
	return m, nil
}

// Stop (lifecycle.Base) stops taking timers, lets those in flight finish
// (bounded by ctx) and deregisters. Idempotent and safe before Start.
// Ready (lifecycle.Base) reports whether the service is started and
// connected.

func (s *Service) target(account, name string) (*target.Target, error) {
	return s.targets.Get(account, name)
}
