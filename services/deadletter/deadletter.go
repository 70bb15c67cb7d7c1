package deadletter

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
	"github.com/tenaz/tenaz/pkg/httpapi"
	"github.com/tenaz/tenaz/pkg/lane"
	"github.com/tenaz/tenaz/pkg/lifecycle"
	liveconfig "github.com/tenaz/tenaz/pkg/live"
	"github.com/tenaz/tenaz/pkg/metrics"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natsconn"
	"github.com/tenaz/tenaz/pkg/queue"
	"github.com/tenaz/tenaz/pkg/search"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/store"
	"github.com/tenaz/tenaz/services/deadletter/internal/index"
)

// Version is reported by the micro service: the build's version, the
// same for every tenaz service (metrics.BuildInfo.SemVer).
var Version = metrics.Build().SemVer()

// Buckets and stream of the deadletter service (see streams/data).
const (
	BucketIndex = "tenaz_deadindex"
	// BucketOps keeps replay jobs, the digest's state, the accounts'
	// pauses and the audit of operator actions.
	BucketOps    = accounts.BucketOps
	StreamDigest = "TENAZ_DIGEST"
	// StreamAdvisories keeps the server's advisories the deadletter service
	// acts on (streams/data/stream-advisories.json).
	StreamAdvisories = "TENAZ_ADVISORIES"
)

// Options configure the service.
type Options struct {
	// Conn is the NATS connection. Required.
	Conn *nats.Conn
	// Config is the validated tenaz config. Required.
	Config *config.Config
	// Live is the config in force, reloaded (pkg/live), whose accounts
	// bucket the operator API manages (/v1/config). Defaults to Config
	// alone, with the accounts bucket watched from Start.
	Live *liveconfig.Config
	// Logger defaults to a disabled logger.
	Logger *zerolog.Logger
	// SkipStreams does not apply the stream layout at start (tenaz run
	// applies it once for every service).
	SkipStreams bool
	// Auth checks the operator credential of every NATS endpoint (the
	// Authorization header of the request) and the actor it records comes
	// from it. Nil answers them without authentication, as anonymous
	// (tests, embedded use); binaries set it. The HTTP routes are judged
	// by the Guard in front of them (daemon.Handler), whose principal is
	// the actor there.
	Auth *auth.Authenticator
	// Instance names this replica in job leases and breaker records.
	// Defaults to names.Instance().
	Instance string
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
	// HTTPClient posts the digest webhook. Defaults to a client with a 10s
	// timeout that follows no redirect.
	HTTPClient *http.Client
	// Settle is how old a revision of a state bucket is when its
	// followers (the search indexer, the audit archiver) read it: the
	// index and the archive lag the records by about this, and an event
	// that passes through several states within it is read and written
	// once. Defaults to search.DefaultSettle.
	Settle time.Duration
	// JobLease is how long a replica's claim on a replay job lasts unless
	// it renews it, which it does three times a lease while it runs the
	// job: once it lapses, another replica takes the job over. Defaults
	// to 30s.
	JobLease time.Duration
}

// Service is the deadletter service.
type Service struct {
	o    Options
	cfg  *config.Config
	live *liveconfig.Config // the accounts and targets in force, the accounts bucket (stored.go)
	log  zerolog.Logger
	js   jetstream.JetStream
	// follow is the followers' own context on the connection: its writes
	// in flight are bounded (followWindow), so that a batch's hundreds of
	// index and archive writes reach the server a window at a time and
	// events' writes are not queued behind them.
	follow jetstream.JetStream
	subj   names.Subjects
	dead   *dead.Writer
	now    func() time.Time

	st     *store.Store
	q      *queue.Queue
	order  lane.Order // wakes what waits behind an event an operator or a give-up finished
	pauses *accounts.Pauses
	kvIdx  jetstream.KeyValue
	kvOps  jetstream.KeyValue
	deadSt jetstream.Stream // DEAD
	x      *index.Index
	brk    *breaker.Registry
	ui     *ui
	tabs   *tabCounts

	// archive is TENAZ_AUDIT; marks the archiver's last write per event.
	archive jetstream.Stream
	marks   marks

	indexer *search.Indexer // the search index's (search.go)
	search  *search.Searcher

	lifecycle.Base
	micro    micro.Service
	ccs      []jetstream.ConsumeContext
	watch    jetstream.KeyWatcher
	wg       sync.WaitGroup // message handlers in flight
	bg       sync.WaitGroup // background loops
	runCtx   context.Context
	cancel   context.CancelCauseFunc
	jobKick  chan struct{}
	watchEnd chan struct{}
}

// followWindow bounds the followers' writes in flight (Service.follow);
// each waits up to search.StallWait for room.
const followWindow = 32

// ErrStopped is the cause of the service's context once Stop is called.
var ErrStopped = errors.New("deadletter: stopped")

// New validates the options; it does no I/O.
func New(o Options) (*Service, error) {
	if o.Conn == nil || o.Config == nil {
		return nil, errors.New("deadletter: Conn and Config are required")
	}
	log := zerolog.Nop()
	if o.Logger != nil {
		log = o.Logger.With().Str("service", "deadletter").Logger()
	}
	js, err := natsconn.JetStream(o.Conn)
	if err != nil {
		return nil, err
	}
	follow, err := natsconn.JetStream(o.Conn, jetstream.WithPublishAsyncMaxPending(followWindow))
	if err != nil {
		return nil, err
	}
	if o.Instance == "" {
		o.Instance = names.Instance()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.JobLease <= 0 {
		o.JobLease = 30 * time.Second
	}
	if o.HTTPClient == nil {
		// No redirect is followed, as for a target's call: a 3xx would
		// send the digest (account names and counts) to the host it names.
		o.HTTPClient = &http.Client{Timeout: 10 * time.Second,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	s := &Service{o: o, cfg: o.Config, log: log, js: js, follow: follow, subj: names.NewSubjects(o.Config.Prefix), now: o.Now, x: index.New()}
	s.Init("deadletter", o.Conn)
	s.dead = &dead.Writer{JS: js, Subj: s.subj, Bound: func(a string) int64 { return s.live.Load().DeadLettersOf(a) }, Full: metrics.Default.DeadFull}
	s.tabs = &tabCounts{every: o.Config.Deadletter.CountsEvery.D()}
	if s.live = o.Live; s.live == nil {
		s.live = liveconfig.Static(o.Config)
	}
	if s.ui, err = newUI(s); err != nil {
		return nil, err
	}
	return s, nil
}

// Start loads the index, starts the consumers (advisories, DEAD arrivals,
// digest ticks), the replay-job runner and the micro service. It returns
// once the index holds everything dead or in review.
func (s *Service) Start(ctx context.Context) error { return s.Base.Start(ctx, s.start) }

// start sets the service up. Its one undo, stop, ends whatever it had
// started, so a start that fails half way leaves nothing running.
func (s *Service) start(ctx context.Context) (err error) {
	s.runCtx, s.cancel = context.WithCancelCause(context.Background())
	s.jobKick = make(chan struct{}, 1)
	s.tabs.mu.Lock()
	s.tabs.closed = false
	s.tabs.mu.Unlock()
	s.Defer(s.stop)

	if s.subj, s.st, err = store.Bind(ctx, s.js, s.cfg, s.o.SkipStreams, s.now); err != nil {
		return fmt.Errorf("deadletter: %w", err)
	}
	s.q = queue.New(s.js, s.subj)
	lanes, err := lane.Open(ctx, s.js, s.cfg.Prefix)
	if err != nil {
		return fmt.Errorf("deadletter: %w", err)
	}
	s.order = lane.Order{Lanes: lanes, Records: s.st, Queue: s.q}
	if s.o.Live == nil { // no process watches the accounts bucket for us
		if err = s.live.Watch(s.runCtx, s.js, store.LayoutOptions(s.cfg)); err != nil {
			return fmt.Errorf("deadletter: %w", err)
		}
	}
	if s.kvIdx, err = s.js.KeyValue(ctx, s.subj.Bucket(BucketIndex)); err != nil {
		return fmt.Errorf("deadletter: bucket %s: %w", s.subj.Bucket(BucketIndex), err)
	}
	if s.kvOps, err = s.js.KeyValue(ctx, s.subj.Bucket(BucketOps)); err != nil {
		return fmt.Errorf("deadletter: bucket %s: %w", s.subj.Bucket(BucketOps), err)
	}
	if s.pauses, err = accounts.OpenPauses(ctx, s.js, s.subj); err != nil {
		return fmt.Errorf("deadletter: %w", err)
	}
	if s.deadSt, err = s.js.Stream(ctx, s.subj.Stream(names.StreamDead)); err != nil {
		return fmt.Errorf("deadletter: stream %s: %w", s.subj.Stream(names.StreamDead), err)
	}
	if err := s.startView(ctx); err != nil {
		return err
	}
	if err := s.consume(ctx, s.subj.Stream(StreamAdvisories), "deadletter", nil, 1, s.handleAdvisory); err != nil {
		return err
	}
	if err := s.consume(ctx, s.subj.Stream(names.StreamDead), "", s.dataConsumer("consumer-deadletter-index.json"), arrivalWorkers, s.handleArrival); err != nil {
		return err
	}
	if s.brk, err = breaker.New(ctx, s.js, breaker.Options{
		Instance: s.o.Instance, Now: s.now, Prefix: s.cfg.Prefix, Logger: &s.log,
		Publish: func(subj string, data []byte) { _ = s.o.Conn.Publish(subj, data) },
	}); err != nil {
		return fmt.Errorf("deadletter: %w", err)
	}
	if err := s.startDigest(ctx); err != nil {
		return err
	}
	if err := s.startArchive(ctx); err != nil {
		return err
	}
	if err := s.startSearch(ctx); err != nil {
		return err
	}
	s.bg.Add(2)
	go s.runJobs()
	go s.checkView()
	if s.micro, err = s.registerMicro(); err != nil {
		return fmt.Errorf("deadletter: micro: %w", err)
	}
	s.log.Info().Int("dead", s.x.Count(state.Dead)).Int("manual_review", s.x.Count(state.ManualReview)).Msg("deadletter started")
	return nil
}

// consume starts a consumer: the durable name of an existing one, or the
// config to create or update; workers > 1 handles that many messages at once.
func (s *Service) consume(ctx context.Context, stream, durable string, cfg func() (jetstream.ConsumerConfig, error), workers int, h func(context.Context, jetstream.Msg)) error {
	var cons jetstream.Consumer
	var err error
	if cfg != nil {
		c, cerr := cfg()
		if cerr != nil {
			return fmt.Errorf("deadletter: %w", cerr)
		}
		durable = c.Durable
		cons, err = s.js.CreateOrUpdateConsumer(ctx, stream, c)
	} else {
		cons, err = s.js.Consumer(ctx, stream, durable)
	}
	if err != nil {
		return fmt.Errorf("deadletter: consumer %s on %s: %w", durable, stream, err)
	}
	ctx = s.runCtx
	sem := make(chan struct{}, max(1, workers))
	cc, err := cons.Consume(func(m jetstream.Msg) {
		s.wg.Add(1)
		if workers <= 1 {
			defer s.wg.Done()
			h(ctx, m)
			return
		}
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; s.wg.Done() }()
			h(ctx, m)
		}()
	}, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		if !errors.Is(err, jetstream.ErrNoHeartbeat) {
			s.log.Debug().Err(err).Str("consumer", durable).Msg("consume")
		}
	}))
	if err != nil {
		return fmt.Errorf("deadletter: consume %s: %w", durable, err)
	}
	s.ccs = append(s.ccs, cc)
	return nil
}

// Stop (lifecycle.Base) drains the consumers, ends the background loops
// and deregisters. Idempotent and safe before Start. Ready (lifecycle.Base)
// reports whether the service is started and connected.

// stop ends what start started, whatever of it did start.
func (s *Service) stop(ctx context.Context) {
	if s.micro != nil {
		_ = s.micro.Stop()
		s.micro = nil
	}
	for _, cc := range s.ccs {
		cc.Drain()
	}
	for _, cc := range s.ccs {
		select {
		case <-cc.Closed():
		case <-ctx.Done():
			cc.Stop()
			<-cc.Closed()
		}
	}
	s.ccs = nil
	s.wg.Wait()
	if err := s.stopSearch(ctx); err != nil {
		s.log.Warn().Err(err).Msg("stopping the search indexer")
	}
	if s.cancel != nil {
		s.cancel(ErrStopped)
	}
	s.tabs.mu.Lock()
	s.tabs.closed = true
	s.tabs.mu.Unlock()
	s.bg.Wait()
	if s.watch != nil {
		_ = s.watch.Stop()
		<-s.watchEnd
		s.watch = nil
	}
	if s.brk != nil {
		s.brk.Stop()
		s.brk = nil
	}
	s.log.Info().Msg("deadletter stopped")
}

// Routes registers the screen (/ui/) and the JSON API (/v1/dead,
// /v1/review, /v1/breakers) on mux. While the service is not started
// they answer 503.
func (s *Service) Routes(mux httpapi.Router) {
	m := readyMux{mux: mux, s: s}
	s.apiRoutes(m)
	s.ui.routes(m)
}

// readyMux registers handlers that answer 503 unless the service runs (a
// stopped replica's index no longer follows the bucket).
type readyMux struct {
	mux httpapi.Router
	s   *Service
}

func (m readyMux) Handle(pattern string, h http.Handler) {
	m.mux.Handle(pattern, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := m.s.Ready(); err != nil {
			httpapi.Error(w, http.StatusServiceUnavailable, "not_ready", err.Error())
			return
		}
		h.ServeHTTP(w, r)
	}))
}

func (m readyMux) HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request)) {
	m.Handle(pattern, http.HandlerFunc(h))
}

// Handler is the service's HTTP routes alone (for mounting behind
// authentication), answering a /v1 request no route takes as every
// tenaz listener does (httpapi.Mux).
func (s *Service) Handler() http.Handler {
	mux := httpapi.NewMux()
	s.Routes(mux)
	return mux
}
