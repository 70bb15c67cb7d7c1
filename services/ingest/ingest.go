package ingest

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
	"github.com/tenaz/tenaz/pkg/callbacks"
	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/dead"
	"github.com/tenaz/tenaz/pkg/directget"
	"github.com/tenaz/tenaz/pkg/httpapi"
	"github.com/tenaz/tenaz/pkg/keeper"
	"github.com/tenaz/tenaz/pkg/lane"
	"github.com/tenaz/tenaz/pkg/lifecycle"
	"github.com/tenaz/tenaz/pkg/live"
	"github.com/tenaz/tenaz/pkg/metrics"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natsconn"
	"github.com/tenaz/tenaz/pkg/queue"
	"github.com/tenaz/tenaz/pkg/quota"
	"github.com/tenaz/tenaz/pkg/store"
)

// ErrStopped is the cause of a deliberate stop.
var ErrStopped = errors.New("ingest: stopped")

// Options configure the service.
type Options struct {
	// Conn is the NATS connection. Required.
	Conn *nats.Conn
	// Config is the validated tenaz config. Required.
	Config *config.Config
	// Live is the config in force, reloaded (pkg/live): the targets'
	// callback secrets are read from it per webhook. Defaults to Config
	// alone. (API keys are Auth's, which its owner updates.)
	Live *live.Config
	// Logger defaults to a disabled logger.
	Logger *zerolog.Logger
	// Workers is how many intake messages are fetched ahead and queued for
	// the batch loops. Defaults to 256.
	Workers int
	// Batchers is how many batches are accepted concurrently. Defaults to 4.
	Batchers int
	// ReplyTimeout is how long POST /v1/events waits for its submission to
	// be accepted before answering 202 with status "accepted". Defaults to 5s.
	ReplyTimeout time.Duration
	// SkipStreams does not apply the stream layout at start (it is applied
	// by `tenaz streams apply` or another service).
	SkipStreams bool
	// Hooks for crash tests; nil in production.
	Hooks *Hooks
	// Metrics records accepted and rejected submissions and the dispatch
	// consumers' backlog (read when /metrics is scraped). Defaults to
	// metrics.Default.
	Metrics *metrics.Set
	// Auth checks the HTTP routes' credentials: the scope each route
	// needs, the key's account, its submission rate. Nil serves them
	// without authentication (tests, embedded use); binaries set it.
	Auth *auth.Authenticator
	// EarlyWebhooks is how many webhooks naming a reference not recorded
	// yet each target may have held at once (see awaitRef). Defaults to
	// 256.
	EarlyWebhooks int
}

// Hooks let tests stop the accept path at its dangerous points.
type Hooks struct {
	// AfterCreate runs after the record is written and before the EVENTS
	// publish; returning an error abandons the message unacked, as a crash would.
	AfterCreate func(id string) error
	// BeforeIntake runs as each intake message arrives at this replica,
	// before it is validated; id is the event id its submission names.
	// Blocking holds the message, as a slow replica would; returning an
	// error hands it back at once, to be delivered again to any replica.
	BeforeIntake func(id string) error
	// AfterRepeatSubmit runs after a repeat's firing is published to
	// INTAKE, before it is acked; key is the occurrence's idempotency key.
	// Returning an error leaves the firing unacked, as a crash would.
	AfterRepeatSubmit func(key string) error
	// BeforeRepeatPurge runs when a repeat is about to be removed (deleted
	// over the API, or no longer in the config), after it was read: what
	// runs then stands for a change made meanwhile.
	BeforeRepeatPurge func(account, name string)
	// StaleRead runs before ingest reads an account's submissions back
	// from INTAKE (an anchor's drain, the older ones an ordered submission
	// accepts first); true stands for an answer from a replica behind its
	// stream's leader (a direct get), which has none of them yet.
	StaleRead func(account string) bool
}

// Service is the ingest service.
type Service struct {
	o    Options
	nc   *nats.Conn
	js   jetstream.JetStream
	cfg  *config.Config
	subj names.Subjects
	dead *dead.Writer
	log  zerolog.Logger
	// floodLog is log for what a flood repeats (a refusal not kept):
	// a few lines a minute, the rest counted.
	floodLog zerolog.Logger
	st       *store.Store
	q        *queue.Queue
	lanes    *lane.Lanes
	order    lane.Order // wakes what waits behind an event a callback or a cancel finished
	refs     *callbacks.Index
	refused  map[string]*refusals // by target: refused webhooks' rate and log
	replies  *replies
	quotas   *quota.Quotas // the API keys' submission rates, shared by every replica; nil when no key has one

	metrics *metrics.Set
	paused  accounts.PauseBook // the operators' pauses, for the backlog collector

	lifecycle.Base
	cc      jetstream.ConsumeContext
	micro   micro.Service
	in      chan jetstream.Msg
	live    liveCounts // each account's submissions in s.in or a batch
	ordered []*orderedQueue
	intake  jetstream.Stream
	gets    *directget.Mux // reads INTAKE back for anchors' drains
	trim    *queue.Trimmer // nil when INTAKE is a work queue (a store from before)

	deadlines *deadlines // purges the deadlines of applied callbacks
	early     slots      // the webhooks held waiting for their reference, by target (awaitRef)

	// repeats is TENAZ_REPEATS, and repeatCC consumes its firings (repeat.go).
	repeats  jetstream.Stream
	repeatCC jetstream.ConsumeContext

	scanMu  sync.Mutex
	scanned map[string]uint64 // account → INTAKE sequence up to which its ordered submissions are accepted
	drained map[string]uint64 // account → INTAKE sequence up to which a drain to INTAKE's end settled all of its submissions
	wg      sync.WaitGroup
	bg      sync.WaitGroup
	cancel  context.CancelCauseFunc
}

// New validates the options and builds the service; it does no I/O.
func New(o Options) (*Service, error) {
	if o.Conn == nil || o.Config == nil {
		return nil, errors.New("ingest: Conn and Config are required")
	}
	if o.Workers <= 0 {
		o.Workers = 256
	}
	if o.Batchers <= 0 {
		o.Batchers = 4
	}
	if o.ReplyTimeout <= 0 {
		o.ReplyTimeout = 5 * time.Second
	}
	if o.EarlyWebhooks <= 0 {
		o.EarlyWebhooks = 256
	}
	log := zerolog.Nop()
	if o.Logger != nil {
		log = o.Logger.With().Str("service", "ingest").Logger()
	}
	js, err := natsconn.JetStream(o.Conn)
	if err != nil {
		return nil, fmt.Errorf("ingest: %w", err)
	}
	s := &Service{
		o: o, nc: o.Conn, js: js, cfg: o.Config, subj: names.NewSubjects(o.Config.Prefix), log: log,
		floodLog: log.Sample(&zerolog.BurstSampler{Burst: 5, Period: time.Minute}),
		early:    slots{size: o.EarlyWebhooks},
	}
	s.Init("ingest", o.Conn)
	s.refused = newRefusals(o.Config, log)
	s.metrics = o.Metrics
	if s.metrics == nil {
		s.metrics = metrics.Default
	}
	s.dead = &dead.Writer{JS: js, Subj: s.subj, Bound: func(a string) int64 { return s.conf().DeadLettersOf(a) }, Full: s.metrics.DeadFull, Waiting: s.metrics.SetDeadWaiting,
		RefusalBound: func(string) int64 { return s.cfg.Deadletter.MaxRefusalsPerAccount }}
	return s, nil
}

// Start binds the streams, starts consuming INTAKE and registers the micro
// service. It returns once started. Stop (lifecycle.Base) drains: no new
// intake messages, in-flight ones finish (or, past ctx's deadline, are
// abandoned unacked for redelivery). Ready (lifecycle.Base) reports
// whether the service is started and connected.
func (s *Service) Start(ctx context.Context) error { return s.Base.Start(ctx, s.start) }

// start sets the service up; each step registers its undo, which Stop
// runs in reverse: the repeats' firings stop first, then INTAKE is
// drained and what was taken finishes, and the shared parts go last.
func (s *Service) start(ctx context.Context) error {
	subj, st, err := store.Bind(ctx, s.js, s.cfg, s.o.SkipStreams, nil)
	if err != nil {
		return fmt.Errorf("ingest: %w", err)
	}
	s.subj, s.st = subj, st
	s.q = queue.New(s.js, subj)
	if s.lanes, err = lane.Open(ctx, s.js, s.cfg.Prefix); err != nil {
		return fmt.Errorf("ingest: %w", err)
	}
	s.order = lane.Order{Lanes: s.lanes, Records: st, Queue: s.q}
	if s.refs, err = callbacks.Open(ctx, s.js, s.cfg.Prefix); err != nil {
		return fmt.Errorf("ingest: %w", err)
	}
	s.Defer(func(context.Context) { s.log.Info().Msg("ingest stopped") })
	// The keys' rates, counted over every ingest replica; shared whether or
	// not a key has a rate now, since a reload may give one a rate.
	if !s.o.Auth.Disabled() {
		if s.quotas, err = quota.Open(ctx, s.js, quota.Options{Logger: &s.log, Prefix: s.cfg.Prefix}); err != nil {
			return fmt.Errorf("ingest: %w", err)
		}
		s.o.Auth.ShareRates(s.quotas)
		s.Defer(func(ctx context.Context) { s.quotas.Close(ctx); s.quotas = nil })
	}
	// Every replica must seal and check with the one key: one on a key of
	// its own would take its peers' HTTP submissions for NATS ones and
	// ack them for an anchor, which a peer's drain then passes over as
	// answered, and loses if the first dies. So a replica that cannot
	// read the key does not start (a rollout then stops at it).
	key, err := openReplyKey(ctx, s.js, subj)
	if err != nil {
		return fmt.Errorf("ingest: %w", err)
	}
	if s.replies, err = newReplies(s.nc, key); err != nil {
		return fmt.Errorf("ingest: %w", err)
	}
	s.Defer(func(context.Context) { s.replies.close() })
	cons, err := s.js.Consumer(ctx, subj.Stream(names.StreamIntake), "ingest")
	if err != nil {
		return fmt.Errorf("ingest: intake consumer: %w", err)
	}
	if s.intake, err = s.js.Stream(ctx, subj.Stream(names.StreamIntake)); err != nil {
		return fmt.Errorf("ingest: intake stream: %w", err)
	}
	if s.gets, err = directget.New(s.nc); err != nil {
		return fmt.Errorf("ingest: %w", err)
	}
	s.Defer(func(context.Context) { s.gets.Close() })
	if s.micro, err = s.registerMicro(); err != nil {
		return fmt.Errorf("ingest: micro: %w", err)
	}
	s.Defer(func(context.Context) { _ = s.micro.Stop() })
	// ingest always runs (it is never scaled to zero), so it reports the
	// dispatch backlog that the dispatcher's autoscaler reads, less the
	// paused accounts'.
	stopBacklog := s.metrics.WatchBacklog(s.js, metrics.BacklogOptions{Streams: eventStreams(subj), Paused: s.followPauses(ctx, subj)})
	s.Defer(func(context.Context) { stopBacklog() })
	s.deadlines = newDeadlines(s.q, s.log)
	s.Defer(func(context.Context) { s.deadlines.close() })
	s.scanned = map[string]uint64{}
	s.drained = map[string]uint64{}
	runCtx, cancel := context.WithCancelCause(context.Background())
	s.cancel = cancel
	s.Defer(func(context.Context) { cancel(ErrStopped); s.bg.Wait() })
	s.in = make(chan jetstream.Msg, s.o.Workers)
	for range s.o.Batchers {
		s.wg.Add(1)
		go s.batchLoop(runCtx)
	}
	s.ordered = make([]*orderedQueue, s.o.Batchers)
	for i := range s.ordered {
		s.ordered[i] = newOrderedQueue(queue.Trims(s.intake), s.replies.answered)
		s.wg.Add(1)
		go s.orderedLoop(runCtx, s.ordered[i])
	}
	// No more callbacks: the loops finish what is queued, or are cut at
	// ctx's deadline (their messages come back unacked).
	s.Defer(func(ctx context.Context) {
		s.closeIn()
		done := make(chan struct{})
		go func() { s.wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			cancel(ErrStopped)
			<-done
		}
	})
	s.cc, err = cons.Consume(s.route, append(queue.Pull(s.o.Workers), jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		if !errors.Is(err, jetstream.ErrNoHeartbeat) {
			s.log.Debug().Err(err).Msg("intake consume")
		}
	}))...)
	if err != nil {
		return fmt.Errorf("ingest: consume: %w", err)
	}
	s.Defer(func(ctx context.Context) {
		s.cc.Drain()
		select {
		case <-s.cc.Closed():
		case <-ctx.Done():
			s.cc.Stop()
			<-s.cc.Closed()
		}
	})
	s.bg.Add(1)
	go func() { defer s.bg.Done(); keeper.Run(runCtx, s.js, s.subj, time.Second) }()
	if queue.Trims(s.intake) {
		// Unfiltered, the server drops whole blocks at once; the keeper's
		// messages below the floor go with them, which is harmless.
		s.trim = &queue.Trimmer{Stream: s.intake, Consumer: cons, Failed: func() { s.metrics.TrimFailed(metrics.TrimIntake) }}
		s.bg.Add(1)
		go func() { defer s.bg.Done(); s.trim.Run(runCtx, trimEvery, s.log) }()
	}
	s.bg.Add(1)
	go func() { defer s.bg.Done(); s.moveWaiting(runCtx) }()
	if err := s.startRepeats(ctx, runCtx); err != nil {
		return fmt.Errorf("ingest: repeats: %w", err)
	}
	s.Defer(s.stopRepeats)
	s.log.Info().Msg("ingest started")
	return nil
}

// Routes registers the HTTP API on mux, and the OpenAPI document of the
// whole API (GET /v1/openapi.json).
func (s *Service) Routes(mux httpapi.Router) {
	a := s.o.Auth // POST /v1/callbacks/{target} is authenticated by its signature instead
	mux.Handle("POST /v1/events", a.Require(auth.Submit, http.HandlerFunc(s.handlePost)))
	mux.Handle("GET /v1/events/{id}", a.Require(auth.Read, http.HandlerFunc(s.handleGet)))
	mux.Handle("GET /v1/events/{id}/history", a.Require(auth.Read, http.HandlerFunc(s.handleHistory)))
	mux.Handle("DELETE /v1/events/{id}", a.Require(auth.Operate, http.HandlerFunc(s.handleCancel)))
	mux.HandleFunc("POST /v1/callbacks/{target}", s.handleCallback)
	mux.HandleFunc("POST /v1/callbacks/{target}/{account}", s.handleCallback)
	s.repeatRoutes(mux)
	// The document covers deadletter's routes too; ingest serves it, as
	// the service every installation exposes.
	mux.HandleFunc("GET "+httpapi.OpenAPIPath, httpapi.ServeOpenAPI)
}

// followPauses keeps s.paused current with the operators' pauses until
// stop and returns what the backlog collector asks of it; nil when ingest
// cannot read them (a NATS user from before they were its): the backlog
// then counts every account's messages as runnable, as it did before, and
// ingest accepts events all the same.
func (s *Service) followPauses(ctx context.Context, subj names.Subjects) func(time.Time) []string {
	pauses, err := accounts.OpenPauses(ctx, s.js, subj)
	if err == nil {
		wait, cancel := context.WithTimeout(ctx, accounts.FollowWait)
		defer cancel()
		var stop func()
		if stop, err = pauses.Follow(wait, &s.paused, nil); err == nil {
			s.Defer(func(context.Context) { stop() })
			return s.paused.Holding
		}
	}
	s.log.Warn().Err(err).Msg("the backlog leaves no paused account out: the operators' pauses (pause.* in tenaz_ops) cannot be read")
	return nil
}

// eventStreams is every partition's EVENTS stream.
func eventStreams(subj names.Subjects) []string {
	out := make([]string, subj.Parts())
	for p := range out {
		out[p] = subj.EventsStreamOf(p)
	}
	return out
}
