package breaker

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/tenaz/tenaz/pkg/metrics"
	"github.com/tenaz/tenaz/pkg/names"
)

// Options of a Registry.
type Options struct {
	// Instance names this replica in the records it writes (updated_by,
	// prober) and in advisories. Defaults to "<hostname>-<random>".
	Instance string
	// Now is the clock that open_until and probe claims are read and written
	// with. Defaults to time.Now.
	Now func() time.Time
	// OnChange is called on every replica, from its watcher goroutine (one
	// call at a time, in revision order per breaker), once per transition of
	// any breaker: open, half_open, closed. A re-open after a failed probe
	// is a transition; a new prober taking over an expired claim is not.
	// The initial values count as transitions from closed, so a replica that
	// starts while a breaker is open is told before New returns. The
	// replica's own writes reach its watcher directly, so it never misses
	// its own transitions; a value written elsewhere that the bucket
	// (history 1) replaces before this replica's watch reads it is not
	// reported, and the next one is, with From as this replica saw it. It
	// must not block for long nor call Stop. Defaults to nil (nothing).
	OnChange func(Change)
	// Publish sends a core NATS message. The replica that writes a
	// transition publishes Advisory(change) to
	// <prefix>.advisory.breaker.<account>.<target> with it. It must not
	// block for long. Defaults to nil (no advisories).
	Publish func(subject string, data []byte)
	// Prefix is the subject prefix of advisories. Defaults to "tenaz".
	Prefix string
	// Logger receives transitions (info) and watcher problems (warn).
	// Defaults to a no-op logger.
	Logger *zerolog.Logger
	// Metrics receives the state of every breaker this replica watches
	// (tenaz_breaker_state), on every value the watcher sees. Defaults to
	// metrics.Default.
	Metrics *metrics.Set
}

// Registry holds this replica's breakers and keeps them in step with the
// tenaz_breakers bucket through one watcher. Safe for concurrent use.
type Registry struct {
	kv       jetstream.KeyValue
	instance string
	now      func() time.Time
	onChange func(Change)
	pub      func(string, []byte)
	subjects names.Subjects
	log      zerolog.Logger
	metrics  *metrics.Set

	mu       sync.Mutex
	breakers map[string]*Breaker   // by account.target
	accounts map[string][]*Breaker // the valid ones, by account (OpenUntil)

	w        jetstream.KeyWatcher
	wctx     context.Context  // the watches' context (ends with Stop)
	status   chan nats.Status // the connection's reconnects
	nc       *nats.Conn
	own      chan ownWrite // values this replica wrote, for the watcher
	cancel   context.CancelFunc
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
}

// New binds the tenaz_breakers bucket (it must exist: streams.Apply),
// starts watching it and returns once the current value of every breaker
// has been loaded (and reported to OnChange when not closed). Call Stop to
// end the watcher.
func New(ctx context.Context, js jetstream.JetStream, opts Options) (*Registry, error) {
	bucket := names.NewSubjects(opts.Prefix).Bucket(names.BucketBreakers)
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("breaker: bucket %s: %w", bucket, err)
	}
	r := &Registry{
		kv:       kv,
		instance: opts.Instance,
		now:      opts.Now,
		onChange: opts.OnChange,
		pub:      opts.Publish,
		subjects: names.NewSubjects(opts.Prefix),
		log:      zerolog.Nop(),
		metrics:  opts.Metrics,
		breakers: map[string]*Breaker{},
		accounts: map[string][]*Breaker{},
		own:      make(chan ownWrite, 64),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	if r.instance == "" {
		r.instance = defaultInstance()
	}
	if r.now == nil {
		r.now = time.Now
	}
	if r.metrics == nil {
		r.metrics = metrics.Default
	}
	if opts.Logger != nil {
		r.log = *opts.Logger
	}
	// The watcher outlives ctx (which only bounds start-up).
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w, err := kv.WatchAll(wctx)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("breaker: watch %s: %w", bucket, err)
	}
	r.w, r.wctx, r.cancel = w, wctx, cancel
	// After a server restart the watch's consumer is gone and the client
	// notices only when heartbeats are missed (10-20s): the watcher
	// watches again on every reconnect instead.
	if r.nc = js.Conn(); r.nc != nil {
		r.status = r.nc.StatusChanged(nats.CONNECTED)
	}
	ready := make(chan struct{})
	go r.watch(ready)
	select {
	case <-ready:
		return r, nil
	case <-r.done:
		return nil, fmt.Errorf("breaker: watch %s: ended before the initial values", bucket)
	case <-ctx.Done():
		r.Stop()
		return nil, fmt.Errorf("breaker: watch %s: %w", bucket, context.Cause(ctx))
	}
}

func defaultInstance() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "breaker"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return host + "-" + hex.EncodeToString(b[:])
}

// Stop stops the watcher and waits for it to end. The breakers keep
// working on what they knew but no longer learn other replicas' changes.
// Idempotent.
func (r *Registry) Stop() {
	r.stopOnce.Do(func() { close(r.stop) })
	<-r.done
}

// Instance is the name this replica writes in records and advisories.
func (r *Registry) Instance() string { return r.instance }

// breaker returns the breaker of account.target, making it (with the
// default Config) if this replica does not know it yet.
func (r *Registry) breaker(account, target string) *Breaker {
	key := account + "." + target
	r.mu.Lock()
	defer r.mu.Unlock()
	b, ok := r.breakers[key]
	if !ok {
		b = newBreaker(r, account, target)
		r.breakers[key] = b
		if b.err == nil { // an invalid name's breaker is never open
			r.accounts[account] = append(r.accounts[account], b)
		}
	}
	return b
}

// For returns the breaker of account and target, the same one on every
// call. A Config different from the previous call's (after defaults)
// replaces it, restarting the local failure count. An account or target
// that is not one subject token of [A-Za-z0-9_-] gives a breaker whose
// methods return an error wrapping ErrInvalidName.
func (r *Registry) For(account, target string, c Config) *Breaker {
	b := r.breaker(account, target)
	c = c.WithDefaults()
	b.mu.Lock()
	if b.cfg != c {
		b.setConfigLocked(c)
	}
	b.mu.Unlock()
	return b
}

// List returns every breaker this replica knows (from the bucket or from
// For), sorted by account and target, each with its current shared state.
func (r *Registry) List() []Change {
	r.mu.Lock()
	bs := make([]*Breaker, 0, len(r.breakers))
	for _, b := range r.breakers {
		if b.err == nil {
			bs = append(bs, b)
		}
	}
	r.mu.Unlock()
	out := make([]Change, 0, len(bs))
	for _, b := range bs {
		b.mu.Lock()
		out = append(out, b.change(b.rec, ""))
		b.mu.Unlock()
	}
	slices.SortFunc(out, func(a, b Change) int {
		return cmp.Or(cmp.Compare(a.Account, b.Account), cmp.Compare(a.Target, b.Target))
	})
	return out
}

// Close closes the breaker of account and target for everyone (an
// operator's decision; actor is recorded in the reason), whatever state it
// is in. Closing a closed breaker writes nothing.
func (r *Registry) Close(ctx context.Context, account, target, actor string) error {
	b := r.breaker(account, target)
	if b.err != nil {
		return b.err
	}
	return b.close(ctx, actor)
}

// Open opens the breaker of account and target for everyone until until
// (an operator's decision; actor and reason are recorded in the record's
// reason), whatever state it is in: no call leaves until then, and after
// it one probe decides, as after any cooldown. A probe in flight is
// superseded: its outcome is ignored. until must be in the future.
func (r *Registry) Open(ctx context.Context, account, target string, until time.Time, actor, reason string) error {
	b := r.breaker(account, target)
	if b.err != nil {
		return b.err
	}
	if !until.After(r.now()) {
		return fmt.Errorf("breaker %s: open until %s: %w", b.key, until.Format(time.RFC3339), ErrPast)
	}
	return b.open(ctx, until, actor, reason)
}

// ErrPast is returned by Open for an until that is not in the future.
var ErrPast = errors.New("breaker: the time is not in the future")

// OpenUntil is the latest end of a cooldown among account's open
// breakers, as this replica knows them; zero when none is open.
func (r *Registry) OpenUntil(account string) time.Time {
	// A reader asks at its start: with many accounts, looking through
	// every breaker for each would cost the square of their count.
	r.mu.Lock()
	bs := slices.Clone(r.accounts[account])
	r.mu.Unlock()
	var until time.Time
	for _, b := range bs {
		b.mu.Lock()
		if b.rec.state() == Open && b.rec.OpenUntil.After(until) {
			until = b.rec.OpenUntil
		}
		b.mu.Unlock()
	}
	return until
}

// HeldUntil is the end of the cooldown of account and target's breaker
// while the shared record, as this replica last watched it, is open and
// the cooldown has not ended; zero otherwise. It writes nothing and
// makes no breaker: a replica that only reads the breakers (the poller,
// whose polls an open breaker holds as it holds calls) asks with it.
func (r *Registry) HeldUntil(account, target string) time.Time {
	r.mu.Lock()
	b, ok := r.breakers[account+"."+target]
	r.mu.Unlock()
	if !ok {
		return time.Time{}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rec.state() == Open && b.rec.OpenUntil.After(r.now()) {
		return b.rec.OpenUntil
	}
	return time.Time{}
}

func (r *Registry) publish(c Change) {
	if r.pub == nil {
		return
	}
	r.pub(r.subjects.AdvisoryBreaker(c.Account, c.Target), Advisory(c))
}
