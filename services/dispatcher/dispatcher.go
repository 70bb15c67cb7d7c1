package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/rs/zerolog"

	"github.com/tenaz/tenaz/pkg/accounts"
	"github.com/tenaz/tenaz/pkg/auth"
	"github.com/tenaz/tenaz/pkg/breaker"
	"github.com/tenaz/tenaz/pkg/callbacks"
	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/dead"
	"github.com/tenaz/tenaz/pkg/directget"
	"github.com/tenaz/tenaz/pkg/lane"
	"github.com/tenaz/tenaz/pkg/lifecycle"
	"github.com/tenaz/tenaz/pkg/live"
	"github.com/tenaz/tenaz/pkg/metrics"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natsconn"
	"github.com/tenaz/tenaz/pkg/owner"
	"github.com/tenaz/tenaz/pkg/queue"
	"github.com/tenaz/tenaz/pkg/quota"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/store"
	"github.com/tenaz/tenaz/pkg/target"
)

// poolIdle is how long an idle delivery worker waits for work before it exits.
const poolIdle = 2 * time.Second

// ErrStopped is the cause of a deliberate stop.
var ErrStopped = errors.New("dispatcher: stopped")

// Options configure the dispatcher.
type Options struct {
	// Conn is the NATS connection. Required.
	Conn *nats.Conn
	// Metrics records attempts, retries, outcomes and latencies. Defaults
	// to metrics.Default.
	Metrics *metrics.Set
	// Config is the validated tenaz config. Required.
	Config *config.Config
	// Live is the config in force, reloaded (pkg/live): the accounts'
	// limits and target overrides and the targets are read from it per
	// call. Defaults to Config alone, never reloaded.
	Live *live.Config
	// Logger defaults to a disabled logger.
	Logger *zerolog.Logger
	// Auth checks the operator credential of the micro endpoints (accounts).
	// Nil serves them without (tests, embedded use); binaries set it.
	Auth *auth.Authenticator
	// Instance names this replica in history entries and among the
	// owners of accounts: it must differ between replicas. Defaults to
	// names.Instance().
	Instance string
	// HTTPClient makes the target calls. Defaults to target.DefaultClient.
	HTTPClient *http.Client
	// Relist is how often idle readers are retired. Defaults to 30s.
	Relist time.Duration
	// Adopt is how often the accounts with events waiting in EVENTS and no
	// reader are looked for (those from before this replica started).
	// Defaults to 1s.
	Adopt time.Duration
	// IdleAfter retires an account's reader after this long without
	// events (nothing unsettled). Defaults to 10m; negative: never.
	IdleAfter time.Duration
	// Heartbeat is how often this replica tells the others it is alive;
	// after three missed ones its accounts move to the others. Defaults
	// to 1s.
	Heartbeat time.Duration
	// SkipStreams does not apply the stream layout at start.
	SkipStreams bool
	// Handlers are Go handlers by name, for kinds whose config says
	// `handler: <name>` instead of a target. Start fails if one is missing.
	Handlers map[string]Handler
	// Hooks for crash tests; nil in production.
	Hooks *Hooks
}

// Hooks let tests stop the dispatch path at its dangerous points.
type Hooks struct {
	// AfterClaim runs after the claim is stored and before the target is
	// called; an error abandons the message unacked, as a crash would.
	AfterClaim func(id string, attempt int) error
	// AfterCall runs after the target answered and before the outcome is
	// stored; an error abandons the message unacked, as a crash would.
	AfterCall func(id string, attempt int) error
	// AfterStore runs after the outcome is stored and before the ordered
	// lane advances and the message is acked; an error abandons the
	// message unacked, as a crash would.
	AfterStore func(id string, status state.State) error
	// LaneRead runs before an ordered event reads its predecessor in its
	// lane; an error stands for that read failing (a server restart).
	LaneRead func(id string) error
	// BeforeStart runs once this replica took an account's lease, before
	// its reader starts; an error fails the start, as a failed server
	// call would (a stream or its consumer changing leader).
	BeforeStart func(account string) error
	// BeforeRelease runs before this replica releases an account's lease;
	// an error fails the release, as a failed server call would.
	BeforeRelease func(account string) error
}

// Service is the dispatcher.
type Service struct {
	o     Options
	nc    *nats.Conn
	js    jetstream.JetStream
	cfg   *config.Config // as started: what cannot change live
	live  *live.Config   // the accounts, targets and their limits in force (conf)
	subj  names.Subjects
	dead  *dead.Writer
	log   zerolog.Logger
	st    *store.Store
	q     *queue.Queue
	order lane.Order
	refs  *callbacks.Index

	breakers *breaker.Registry
	pauses   *accounts.Pauses   // the operators' pauses of accounts (pause.go)
	paused   accounts.PauseBook // those pauses as last heard
	actor    string

	lifecycle.Base

	mu      sync.Mutex
	serving bool               // readers may start: set by start, cleared by stop
	streams []jetstream.Stream // EVENTS of each partition
	readers map[string]*reader
	// New accounts' readers are started by workers (starts.go):
	// starting holds the accounts queued or being started, startQueue
	// those queued; starts counts the starts under way.
	starting   map[string]bool
	startQueue []string
	startFails map[string]int // failed starts in a row, by account (retryStartLocked)
	startWake  chan struct{}
	starts     sync.WaitGroup
	known      map[string]bool          // every account with messages this replica heard of
	handing    map[string]chan struct{} // accounts whose reader is stopping to hand them over
	owners     *owner.Group
	quotas     *quota.Quotas // the targets' provider-wide limits (a reload may give a target one); nil before Start
	targets    *target.Cache
	guards     map[string]*guard
	built      *config.Config // the config the guards and pacers were built from (configChanged)
	// targetAuto is each "concurrency: auto" target's latency-learned
	// share on this replica (see targetLimit).
	targetAuto map[string]*autoLimit
	pacers     map[string]*pacer
	watches    []jetstream.ConsumeContext // of each trimmed partition (watch.go)
	published  []*nats.Subscription       // of each work-queue partition (watch.go)
	gets       *directget.Mux             // the tails' direct gets (tail.go)
	micro      micro.Service
	runCtx     context.Context
	cancel     context.CancelCauseFunc
	bg         sync.WaitGroup
	// calls is done once Stop leaves no time for a call to end: a call
	// not made by then is not made (errNotCalled). A context, so that a
	// call's wait ends with it without a goroutine of its own
	// (context.AfterFunc).
	calls    context.Context
	endCalls context.CancelFunc

	pool  *pool
	runs  inflight
	loads accountLoads // calls per account, for the account metrics

	rndMu sync.Mutex
	rnd   *rand.Rand
}

// New validates the options and builds the dispatcher; it does no I/O.
func New(o Options) (*Service, error) {
	if o.Conn == nil || o.Config == nil {
		return nil, errors.New("dispatcher: Conn and Config are required")
	}
	if o.Metrics == nil {
		o.Metrics = metrics.Default
	}
	if o.Relist <= 0 {
		o.Relist = 30 * time.Second
	}
	if o.Adopt <= 0 {
		o.Adopt = time.Second
	}
	if o.IdleAfter == 0 {
		o.IdleAfter = 10 * time.Minute
	}
	if o.Instance == "" {
		o.Instance = names.Instance()
	}
	log := zerolog.Nop()
	if o.Logger != nil {
		log = o.Logger.With().Str("service", "dispatcher").Logger()
	}
	js, err := natsconn.JetStream(o.Conn)
	if err != nil {
		return nil, fmt.Errorf("dispatcher: %w", err)
	}
	s := &Service{
		o: o, nc: o.Conn, js: js, cfg: o.Config, subj: names.NewSubjects(o.Config.Prefix), log: log,
		actor: "dispatcher/" + o.Instance, readers: map[string]*reader{}, starting: map[string]bool{}, startFails: map[string]int{}, startWake: make(chan struct{}, 1), known: map[string]bool{}, handing: map[string]chan struct{}{}, targets: target.NewCache(o.Config, o.HTTPClient),
		guards: map[string]*guard{}, targetAuto: map[string]*autoLimit{}, pacers: map[string]*pacer{},
		rnd: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(os.Getpid()))),
	}
	s.dead = &dead.Writer{JS: js, Subj: s.subj, Bound: func(a string) int64 { return s.conf().DeadLettersOf(a) }, Full: o.Metrics.DeadFull}
	if s.live = o.Live; s.live == nil {
		s.live = live.Static(o.Config)
	}
	s.Init("dispatcher", o.Conn)
	s.built = s.live.Load()
	s.targets.Reset(s.built)
	s.live.OnChange(s.configChanged)
	return s, nil
}

// Start binds the streams and the store, watches the accounts' messages
// and starts a reader for each account of this replica with messages
// waiting. It returns once started.
func (s *Service) Start(ctx context.Context) error { return s.Base.Start(ctx, s.start) }

func (s *Service) start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkHandlers(); err != nil {
		return err
	}
	subj, st, err := store.Bind(ctx, s.js, s.cfg, s.o.SkipStreams, nil)
	if err != nil {
		return fmt.Errorf("dispatcher: %w", err)
	}
	s.subj, s.st = subj, st
	s.q = queue.New(s.js, subj)
	lanes, err := lane.Open(ctx, s.js, s.cfg.Prefix)
	if err != nil {
		return fmt.Errorf("dispatcher: %w", err)
	}
	s.order = lane.Order{Lanes: lanes, Records: st, Queue: s.q}
	if s.refs, err = callbacks.Open(ctx, s.js, s.cfg.Prefix); err != nil {
		return fmt.Errorf("dispatcher: %w", err)
	}
	s.streams = make([]jetstream.Stream, subj.Parts())
	for p := range s.streams {
		if s.streams[p], err = s.js.Stream(ctx, subj.EventsStreamOf(p)); err != nil {
			return fmt.Errorf("dispatcher: %w", err)
		}
	}
	if s.pauses, err = accounts.OpenPauses(ctx, s.js, subj); err != nil {
		return fmt.Errorf("dispatcher: %w", err)
	}
	s.runCtx, s.cancel = context.WithCancelCause(context.Background())
	if err := s.watchPauses(ctx); err != nil {
		s.cancel(ErrStopped)
		return fmt.Errorf("dispatcher: %w", err)
	}
	s.calls, s.endCalls = context.WithCancel(context.Background())
	s.pool = newPool(poolIdle)
	log := s.log
	if s.breakers, err = breaker.New(ctx, s.js, breaker.Options{
		Instance: s.o.Instance, OnChange: s.onBreaker, Prefix: s.cfg.Prefix, Logger: &log,
		Publish: func(subject string, data []byte) { _ = s.nc.Publish(subject, data) },
	}); err != nil {
		s.cancel(ErrStopped)
		return fmt.Errorf("dispatcher: breakers: %w", err)
	}
	if s.owners, err = owner.Join(ctx, s.js, owner.Options{Instance: s.o.Instance, Heartbeat: s.o.Heartbeat, Prefix: s.cfg.Prefix,
		Linger: func() time.Duration { return s.conf().LongestCall() }, OnChange: s.ownersChanged, Logger: &log}); err != nil {
		s.breakers.Stop()
		s.cancel(ErrStopped)
		return fmt.Errorf("dispatcher: owners: %w", err)
	}
	// Opened whether or not a target has a provider-wide limit now: a
	// reload may give one a limit (opening costs a bucket lookup; nothing
	// is read or written until a limited target is called).
	if s.quotas, err = quota.Open(ctx, s.js, quota.Options{Instance: s.owners.Self(), Live: s.owners.Present, Counted: s.owners.Counted, Logger: &log, Prefix: s.cfg.Prefix}); err != nil {
		s.owners.Leave(ctx)
		s.breakers.Stop()
		s.cancel(ErrStopped)
		return fmt.Errorf("dispatcher: quotas: %w", err)
	}
	if s.gets, err = directget.New(s.nc); err != nil {
		return fmt.Errorf("dispatcher: %w", err)
	}
	s.watchLoads()
	s.serving = true
	s.Defer(s.stop)
	for p, st := range s.streams {
		if !queue.Trims(st) {
			sub, err := s.watchPublishes(p) // a work queue takes no watch (watch.go)
			if err != nil {
				return fmt.Errorf("dispatcher: %w", err)
			}
			s.published = append(s.published, sub)
			continue
		}
		w, err := s.watch(s.runCtx, p)
		if err != nil {
			return fmt.Errorf("dispatcher: %w", err)
		}
		s.watches = append(s.watches, w)
	}
	if s.micro, err = s.registerMicro(); err != nil {
		s.log.Warn().Err(err).Msg("micro registration failed")
	}
	s.bg.Add(3 + startsAtOnce)
	go s.sweepLoop()
	go s.adoptLoop()
	go s.trimLoop()
	for range startsAtOnce {
		go s.startLoop()
	}
	s.log.Info().Int("accounts", len(s.known)).Msg("dispatcher started")
	return nil
}

// adoptLoop looks for accounts with messages and no reader
// (adoptOrphans) every Adopt, the first time at once. A look that took
// long (many accounts with events waiting) waits ten times as long before
// the next, so that it stays a small share of the server's work.
func (s *Service) adoptLoop() {
	defer s.bg.Done()
	for {
		start := time.Now()
		ctx, cancel := context.WithTimeout(s.runCtx, max(s.o.Adopt, 10*time.Second))
		if err := s.adoptOrphans(ctx); err != nil && s.runCtx.Err() == nil {
			s.log.Debug().Err(err).Msg("looking for accounts with waiting events")
		}
		cancel()
		select {
		case <-s.runCtx.Done():
			return
		case <-time.After(max(s.o.Adopt, 10*time.Since(start))):
		}
	}
}

// sweepLoop retires the idle readers every Relist, and gives back any
// lease kept past its reader (releaseStrays).
func (s *Service) sweepLoop() {
	defer s.bg.Done()
	t := time.NewTicker(s.o.Relist)
	defer t.Stop()
	for {
		select {
		case <-s.runCtx.Done():
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(s.runCtx, max(s.o.Relist, 10*time.Second))
			var idle []*reader
			s.mu.Lock()
			if s.serving {
				idle = s.idleLocked()
			}
			s.mu.Unlock()
			s.retire(ctx, idle)
			s.releaseStrays()
			cancel()
		}
	}
}

// streamOf is the EVENTS stream of account's partition.
func (s *Service) streamOf(account string) jetstream.Stream {
	return s.streams[s.subj.PartitionOf(account)]
}

func (s *Service) ensureReader(account string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.serving {
		s.ensureReaderLocked(account)
	}
}

// ensureReaderLocked notes account as known and, when it is this
// replica's to serve and has no reader yet, queues the start of one
// (starts.go). Callers hold s.mu.
func (s *Service) ensureReaderLocked(account string) {
	if names.ValidateAccount(account) != nil {
		return
	}
	s.known[account] = true
	if _, ok := s.readers[account]; ok || s.starting[account] {
		return
	}
	if _, ok := s.handing[account]; ok || !s.owners.Assigned(account) {
		return
	}
	s.queueStartLocked(account)
}

// Stop drains every reader: no new messages; in-flight deliveries finish
// within ctx, after which they are abandoned unacked (redelivered later).
// A message taken but not yet called is called only while its call can
// still end config.StopMargin before ctx's deadline, given the longest
// target timeout; after that it is left unacked: a call cut by the
// deadline may have reached the target, and would be made again.
// Stop (lifecycle.Base) is idempotent and safe before Start.
func (s *Service) stop(ctx context.Context) {
	s.mu.Lock()
	s.serving = false
	s.dropStartsLocked()
	readers := s.readers
	s.readers = map[string]*reader{}
	handing := make([]chan struct{}, 0, len(s.handing))
	for _, done := range s.handing {
		handing = append(handing, done)
	}
	workers := s.pool
	for _, w := range s.watches {
		w.Stop()
	}
	for _, sub := range s.published {
		_ = sub.Unsubscribe()
	}
	s.mu.Unlock()
	if len(handing) > 0 {
		s.log.Info().Int("accounts", len(handing)).Msg("stopping: the accounts being handed over finish their calls first")
	}
	if dl, ok := ctx.Deadline(); ok {
		last := time.AfterFunc(time.Until(dl)-s.conf().LongestCall()-config.StopMargin.D(), s.endCalls)
		defer last.Stop()
	}
	done := make(chan struct{})
	go func() {
		var wg sync.WaitGroup
		for _, l := range readers {
			wg.Add(1)
			go func() { defer wg.Done(); l.stop() }()
		}
		wg.Wait()
		s.starts.Wait() // a reader started meanwhile stops itself (startAccount)
		// An account being handed over keeps its lease until its calls
		// returned: leaving before that (Leave) let the next owner take it
		// at once and call beside them, and the cancel below cut them.
		for _, h := range handing {
			<-h
		}
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		s.cancel(ErrStopped)
		<-done
	}
	// The readers' leases, and any kept past its reader.
	s.giveBackAll(s.owners.Held())
	if s.quotas != nil { // every call returned: no slot is held
		qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		s.quotas.Close(qctx)
		cancel()
	}
	s.owners.Leave(context.WithoutCancel(ctx))
	s.breakers.Stop()
	s.cancel(ErrStopped)
	s.bg.Wait()
	s.gets.Close()
	workers.stop()
	if s.micro != nil {
		_ = s.micro.Stop()
	}
	s.log.Info().Msg("dispatcher stopped")
}

// giveBackAll gives back the accounts of a stopped replica,
// releasesAtOnce at a time: a release is one small write, and 16 at a
// time 100,000 accounts took 9 s to stop.
func (s *Service) giveBackAll(accounts []string) {
	var wg sync.WaitGroup
	slots := make(chan struct{}, releasesAtOnce)
	for _, account := range accounts {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			s.giveBack(account)
		})
	}
	wg.Wait()
}

// releasesAtOnce is how many leases a stopping replica gives back at once.
const releasesAtOnce = 256

// Accounts returns the accounts this replica owns and consumes.
func (s *Service) Accounts() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.readers))
	for a := range s.readers {
		out = append(out, a)
	}
	return out
}

func (s *Service) target(account, name string) (*target.Target, error) {
	return s.targets.Get(account, name)
}

func (s *Service) jitter() *rand.Rand {
	s.rndMu.Lock()
	defer s.rndMu.Unlock()
	return rand.New(rand.NewPCG(s.rnd.Uint64(), s.rnd.Uint64()))
}

func trimErr(err error) string {
	m := err.Error()
	if len(m) > 2048 {
		m = m[:2048] + "…"
	}
	return strings.ToValidUTF8(m, "?")
}
