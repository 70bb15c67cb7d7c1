package quota

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/store"
)

// Key prefixes in the bucket.
const (
	targetPrefix = "t."
	keyPrefix    = "k."
)

// TargetKey is the record of a target's limit.
func TargetKey(target string) string { return targetPrefix + target }

// AccountTargetKey is the record of a target's limit as account calls it
// with an endpoint or credentials of its own (config.OwnTarget). Target
// and account names hold no dot, so it never names another record.
func AccountTargetKey(target, account string) string {
	return targetPrefix + target + "." + account
}

// KeyOf is the record that account's calls of target take their limit
// from under c: the account's own (AccountTargetKey) when it calls the
// target with an endpoint or credentials of its own (config.OwnTarget),
// else the target's, shared by every account.
func KeyOf(c *config.Config, account, target string) string {
	if c.OwnTarget(account, target) {
		return AccountTargetKey(target, account)
	}
	return TargetKey(target)
}

// APIKey is the record of an API key's submission rate (by key id).
func APIKey(id string) string { return keyPrefix + id }

// recheck bounds every wait on a stored record: a replica that waits, and
// a refusal, read the record again at least this often (a watch that fell
// behind, a replica taken for dead meanwhile, a record reset by hand).
const recheck = time.Second

// maxTries bounds the compare-and-sets Take tries before it gives up.
const maxTries = 16

// Errors.
var (
	// ErrClosed is returned by Acquire and Take after Close.
	ErrClosed = errors.New("quota: closed")
	// ErrContended is returned by Take when every compare-and-set lost.
	ErrContended = errors.New("quota: too many conflicting writes")
)

// Options configure a replica's Quotas.
type Options struct {
	// Instance names this replica among those that hold slots of a
	// concurrency limit (owner.Group.Self). Required for Acquire.
	Instance string
	// Live returns the live replicas, sorted (owner.Group.Present): those
	// that take turns; any other is taken out of the line. nil counts every
	// replica that ever held a slot.
	Live func() []string
	// Counted returns the replicas whose calls in flight count, sorted
	// (owner.Group.Counted): the live ones, and those taken for dead whose
	// calls may still run. Any other's slots are forgotten. nil: Live's.
	Counted func() []string
	// Logger defaults to a disabled logger.
	Logger *zerolog.Logger
	// Prefix is the installation's subject prefix, which its bucket names
	// carry (config prefix). Defaults to names.DefaultPrefix.
	Prefix string
}

// Quotas is a replica's access to the shared limits.
type Quotas struct {
	o   Options
	kv  jetstream.KeyValue
	log zerolog.Logger

	ctx    context.Context // ends with Close: the lines' loops
	cancel context.CancelFunc

	mu     sync.Mutex
	closed bool
	takers map[string]*taker
	lines  map[string]*line
}

// Open binds the bucket (names.BucketQuotas: streams.Apply creates it).
func Open(ctx context.Context, js jetstream.JetStream, o Options) (*Quotas, error) {
	kv, err := js.KeyValue(ctx, names.NewSubjects(o.Prefix).Bucket(names.BucketQuotas))
	if err != nil {
		return nil, fmt.Errorf("quota: %w", err)
	}
	log := zerolog.Nop()
	if o.Logger != nil {
		log = *o.Logger
	}
	q := &Quotas{o: o, kv: kv, log: log, takers: map[string]*taker{}, lines: map[string]*line{}}
	q.ctx, q.cancel = context.WithCancel(context.Background())
	return q, nil
}

// Close stops the waiting (Acquire returns ErrClosed) and takes this
// replica's slots and place in line out of every record it used, within
// ctx. Release what was acquired first. Idempotent.
func (q *Quotas) Close(ctx context.Context) {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return
	}
	q.closed = true
	lines := slices.Collect(func(yield func(*line) bool) {
		for _, l := range q.lines {
			if !yield(l) {
				return
			}
		}
	})
	q.mu.Unlock()
	q.cancel()
	for _, l := range lines {
		<-l.done
	}
	for _, l := range lines {
		if err := l.flush(ctx); err != nil {
			q.log.Debug().Err(err).Str("key", l.key).Msg("quota: giving this replica's slots back")
		}
	}
}

// Take spends one token of key's bucket. ok false means the bucket is
// empty, and wait is how long until it holds one. A token costs one
// compare-and-set; a refusal costs none (it is decided from the record
// as last read, read again at least every second): the tokens of a
// record read earlier are never fewer than those of the record now.
func (q *Quotas) Take(ctx context.Context, key string, l Limit) (ok bool, wait time.Duration, err error) {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return false, 0, ErrClosed
	}
	t := q.takers[key]
	if t == nil {
		t = &taker{}
		q.takers[key] = t
	}
	q.mu.Unlock()
	ok, err = t.change(ctx, q, key, l, func(r *record) bool {
		if r.whole() < 1 {
			wait = r.due(l)
			return false
		}
		wait = 0
		r.Tokens--
		return true
	})
	return ok, wait, err
}

// GiveBack returns a token Take spent for a call that was not made
// after all (its request could not be built, its account was paused
// meanwhile), up to the bucket's size. Like a token, it costs one
// compare-and-set.
func (q *Quotas) GiveBack(ctx context.Context, key string, l Limit) error {
	q.mu.Lock()
	t := q.takers[key]
	q.mu.Unlock()
	if t == nil || l.Rate <= 0 {
		return nil // nothing taken here
	}
	_, err := t.change(ctx, q, key, l, func(r *record) bool {
		r.Tokens = min(r.Tokens+1, l.burst())
		return true
	})
	return err
}

// change applies f to key's record, refilled to now, and writes it by
// compare-and-set unless f declines (false); wrote reports the write.
// The record is read again when it was last read a recheck ago or lost
// a write.
func (t *taker) change(ctx context.Context, q *Quotas, key string, l Limit, f func(*record) bool) (wrote bool, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for range maxTries {
		if t.read.IsZero() || time.Since(t.read) >= recheck {
			if t.rec, t.rev, err = q.get(ctx, key); err != nil {
				t.read = time.Time{}
				return false, err
			}
			t.read = time.Now()
		}
		r := t.rec.clone()
		r.refill(l, time.Now())
		if !f(&r) {
			return false, nil
		}
		rev, err := q.put(ctx, key, r, t.rev)
		if err == nil {
			t.rec, t.rev, t.read = r, rev, time.Now()
			return true, nil
		}
		t.read = time.Time{}
		if !isConflict(err) {
			return false, err
		}
	}
	return false, ErrContended
}

// taker is what this replica knows of one key that Take spends.
type taker struct {
	mu   sync.Mutex
	rec  record
	rev  uint64
	read time.Time // when rec was last known to be the stored one; zero: read it
}

func (q *Quotas) get(ctx context.Context, key string) (record, uint64, error) {
	e, err := q.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return record{}, 0, nil
	}
	if err != nil {
		return record{}, 0, err
	}
	r, _ := decode(e)
	return r, e.Revision(), nil
}

// decode reads an entry's record; a delete, or a value that is not a
// record, is a new one (a full bucket, nothing in flight).
func decode(e jetstream.KeyValueEntry) (record, bool) {
	var r record
	if e.Operation() != jetstream.KeyValuePut || json.Unmarshal(e.Value(), &r) != nil {
		return record{}, false
	}
	return r, true
}

// put writes r if the key is still at rev (0: it has no record).
func (q *Quotas) put(ctx context.Context, key string, r record, rev uint64) (uint64, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return 0, err
	}
	if rev == 0 {
		return q.kv.Create(ctx, key, b)
	}
	return q.kv.Update(ctx, key, b, rev)
}

// live is the live replicas, sorted; nil counts everyone.
func (q *Quotas) live() []string { return sortedOf(q.o.Live) }

// counted is the replicas whose slots count, sorted; nil counts everyone.
func (q *Quotas) counted() []string {
	if q.o.Counted == nil {
		return q.live()
	}
	return sortedOf(q.o.Counted)
}

// sortedOf is what f returns, sorted; nil when f is.
func sortedOf(f func() []string) []string {
	if f == nil {
		return nil
	}
	out := f()
	if out == nil {
		out = []string{}
	}
	slices.Sort(out)
	return out
}

// isConflict reports a compare-and-set that lost.
func isConflict(err error) bool {
	return store.IsKeyTaken(err) || errors.Is(err, jetstream.ErrKeyRevisionMismatch)
}

// Usage is a concurrency limit as it stands.
type Usage struct {
	// Concurrency is the calls it allows in flight now: learned, or as
	// configured (0: none).
	Concurrency int
	// InFlight is the calls in flight over the counted replicas.
	InFlight int
	// Waiting is this replica's callers waiting for a token or a slot
	// (Usage only; Read does not know them).
	Waiting int
}

func usageOf(r record, l Limit, live []string) Usage {
	return Usage{Concurrency: l.concurrency(r), InFlight: r.othersHeld(live, "")}
}

// Usage is key's limit as this replica last knew it, without a read;
// false when this replica has not used key.
func (q *Quotas) Usage(key string) (Usage, bool) {
	q.mu.Lock()
	ln := q.lines[key]
	q.mu.Unlock()
	if ln == nil {
		return Usage{}, false
	}
	counted := q.counted()
	ln.mu.Lock()
	defer ln.mu.Unlock()
	u := usageOf(ln.rec, ln.lim, counted)
	u.Waiting = len(ln.waiting)
	return u, true
}

// Read reads key's limit l in the installation of prefix as it stands,
// counting the calls in flight of the replicas in live (sorted; nil:
// every replica in the record).
func Read(ctx context.Context, js jetstream.JetStream, prefix, key string, l Limit, live []string) (Usage, error) {
	kv, err := js.KeyValue(ctx, names.NewSubjects(prefix).Bucket(names.BucketQuotas))
	if err != nil {
		return Usage{}, fmt.Errorf("quota: %w", err)
	}
	q := &Quotas{kv: kv}
	r, _, err := q.get(ctx, key)
	if err != nil {
		return Usage{}, err
	}
	return usageOf(r, l, live), nil
}
