// Package store keeps event records in the state buckets (one per
// partition: a record's is its event id's, streams.Layout) and changes them
// only by compare-and-set on the revision. A write is a JetStream publish
// to the record's $KV subject with Nats-Expected-Last-Subject-Sequence, so
// it can be sent synchronously or pipelined (WriteAsync) without another
// round trip per write.
//
//	rec, rev, effects, err := st.Transition(ctx, account, id, state.Action{Name: state.Claim, Seq: seq})
package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/size"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/streams"
)

// Conditions callers branch on.
var (
	ErrNotFound = errors.New("event not found")
	ErrExists   = errors.New("event already exists")
	ErrConflict = errors.New("revision conflict")
	// ErrUndecodable is a record whose stored value does not decode: put
	// by hand (`nats kv put`), or by another version. Reading it again
	// never helps, so it is not an outage; Get returns its revision with
	// it, so that it can be replaced by compare-and-set.
	ErrUndecodable = errors.New("the event's stored record does not decode")
)

// The server's err_codes for a failed last-sequence expectation: 10071 on a
// single server, 10164 from a replicated (clustered) stream.
const (
	jsErrWrongLastSequence        = 10071
	jsErrWrongLastSequenceCluster = 10164
)

// IsWrongSequence reports whether err is a failed compare-and-set.
func IsWrongSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jsErrWrongLastSequence || apiErr.ErrorCode == jsErrWrongLastSequenceCluster)
}

// IsKeyTaken reports whether a KV create found the key taken:
// jetstream.ErrKeyExists, or a failed compare-and-set, which kv.Create
// returns as it is when the key's last entry was a delete or purge
// marker and another writer took the key in between (a replicated
// bucket answers it with 10164, which ErrKeyExists does not match).
func IsKeyTaken(err error) bool {
	return errors.Is(err, jetstream.ErrKeyExists) || IsWrongSequence(err)
}

// The server's err_codes for a write refused for lack of room: 10023
// (the server's or the account's storage is used up) and 10077 (a
// stream's own limit, "maximum bytes exceeded", with discard new).
const (
	jsErrInsufficientResources = 10023
	jsErrStreamStoreFailed     = 10077
)

// ErrFull is wrapped by the errors of writes tenaz refuses itself for a
// bound of its own (pkg/dead's per-account bound), so that their writers
// wait as for a full stream.
var ErrFull = errors.New("full")

// IsFull reports whether err is a JetStream write refused because the
// storage (the server's, the account's or the stream's) is full: nothing
// was stored, and only freeing room (an operator, retention) helps.
func IsFull(err error) bool {
	if errors.Is(err, ErrFull) {
		return true
	}
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	return apiErr.ErrorCode == jsErrInsufficientResources ||
		apiErr.ErrorCode == jsErrStreamStoreFailed && strings.HasPrefix(apiErr.Description, "maximum ")
}

// IsGone reports whether err is a message delete refused because the
// message is not there: another deleted it first (two movers, a purge),
// which for the deleter is as good as its own. nats.go puts the server's
// answer (err_code 10057, "no message found") in the text of
// ErrMsgDeleteUnsuccessful, not as an APIError, so the text decides.
func IsGone(err error) bool {
	return errors.Is(err, jetstream.ErrMsgNotFound) ||
		errors.Is(err, jetstream.ErrMsgDeleteUnsuccessful) && strings.Contains(err.Error(), "no message found")
}

// Options of a Store.
type Options struct {
	// Retention is how long a done or cancelled record stays (per-key TTL).
	// Defaults to 7 days.
	Retention time.Duration
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
	// MaxConflicts bounds the read-modify-write retries of Update. Defaults to 32.
	MaxConflicts int
	// Layout is the store's (streams.Apply returns it). Zero: read it
	// from the server.
	Layout streams.Layout
	// Prefix is the installation's subject prefix, which its bucket names
	// carry (config prefix). Defaults to names.DefaultPrefix.
	Prefix string
}

// Store reads and writes event records, each in the state bucket of its
// partition (Options.Layout: its event id's, or in a store from before
// its account's).
type Store struct {
	js    jetstream.JetStream
	subj  names.Subjects
	parts []partition
	o     Options
}

// partition is one state bucket.
type partition struct {
	kv     jetstream.KeyValue
	prefix string // $KV.<bucket>.
}

// Open binds the state buckets (they must exist: streams.Apply).
func Open(ctx context.Context, js jetstream.JetStream, o Options) (*Store, error) {
	if o.Layout.Partitions == 0 {
		l, err := streams.StoreLayout(ctx, js, o.Prefix)
		if err != nil {
			return nil, fmt.Errorf("store: %w", err)
		}
		o.Layout = l
	}
	subj := names.NewSubjects(o.Prefix).WithLayout(o.Layout)
	parts := make([]partition, subj.Parts())
	for p := range parts {
		name := subj.StateBucketOf(p)
		kv, err := js.KeyValue(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("store: bucket %s: %w", name, err)
		}
		parts[p] = partition{kv: kv, prefix: "$KV." + name + "."}
	}
	if o.Retention <= 0 {
		o.Retention = 7 * 24 * time.Hour
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.MaxConflicts <= 0 {
		o.MaxConflicts = 32
	}
	return &Store{js: js, subj: subj, parts: parts, o: o}, nil
}

// Now is the store's clock.
func (s *Store) Now() time.Time { return s.o.Now() }

// KVs are the state buckets, one per partition (watchers, listings).
func (s *Store) KVs() []jetstream.KeyValue {
	out := make([]jetstream.KeyValue, len(s.parts))
	for i, p := range s.parts {
		out[i] = p.kv
	}
	return out
}

// Layout is the store's.
func (s *Store) Layout() streams.Layout { return s.o.Layout }

func (s *Store) of(account, id string) partition {
	return s.parts[s.o.Layout.RecordPartition(account, id)]
}

// Bucket is the state bucket of the record of account's event id.
func (s *Store) Bucket(account, id string) string {
	return s.subj.StateBucketOf(s.o.Layout.RecordPartition(account, id))
}

// Get returns the record of account's event id and its revision, or
// ErrNotFound, or ErrUndecodable with the revision. Records placed by event id are found by it alone; in a
// store from before, an account of "" (a caller who knows only the id: an
// operator, a callback without its account) looks in every partition.
func (s *Store) Get(ctx context.Context, account, id string) (state.Record, uint64, error) {
	if err := names.ValidateEventID(id); err != nil {
		return state.Record{}, 0, fmt.Errorf("%w: %v", ErrNotFound, err)
	}
	if account != "" || s.o.Layout.RecordsByEvent || len(s.parts) == 1 {
		return get(ctx, s.of(account, id).kv, id)
	}
	type found struct {
		r   state.Record
		rev uint64
		err error
	}
	res := make(chan found, len(s.parts))
	for _, p := range s.parts {
		go func() {
			r, rev, err := get(ctx, p.kv, id)
			res <- found{r, rev, err}
		}()
	}
	var failed found
	for range s.parts {
		f := <-res
		switch {
		case f.err == nil:
			return f.r, f.rev, nil
		case !errors.Is(f.err, ErrNotFound):
			failed = f
		}
	}
	if failed.err != nil {
		return state.Record{}, failed.rev, failed.err
	}
	return state.Record{}, 0, ErrNotFound
}

func get(ctx context.Context, kv jetstream.KeyValue, id string) (state.Record, uint64, error) {
	e, err := kv.Get(ctx, id)
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return state.Record{}, 0, ErrNotFound
		}
		return state.Record{}, 0, fmt.Errorf("store: get %s: %w", id, err)
	}
	var r state.Record
	if err := state.DecodeJSON(e.Value(), &r); err != nil {
		return state.Record{}, e.Revision(), fmt.Errorf("%w: %s: %v", ErrUndecodable, id, err)
	}
	return r, e.Revision(), nil
}

func (s *Store) msg(r state.Record, rev uint64) *nats.Msg {
	m := nats.NewMsg(s.of(r.Account, r.ID).prefix + r.ID)
	m.Data = r.AppendJSON(make([]byte, 0, 512+256*len(r.History)))
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(rev, 10))
	if r.Status.Terminal() {
		m.Header.Set("Nats-TTL", s.o.Retention.String())
	}
	return m
}

func mapErr(err error, id string, create bool) error {
	if IsWrongSequence(err) {
		if create {
			return ErrExists
		}
		return ErrConflict
	}
	if size.IsTooLarge(err) { // permanent: the same record fails again
		return fmt.Errorf("store: write %s: %w: %w", id, size.ErrTooLarge, err)
	}
	return fmt.Errorf("store: write %s: %w", id, err)
}

// Create stores a new record; ErrExists if the id is taken.
func (s *Store) Create(ctx context.Context, r state.Record) (uint64, error) {
	ack, err := s.js.PublishMsg(ctx, s.msg(r, 0))
	if err != nil {
		return 0, mapErr(err, r.ID, true)
	}
	return ack.Sequence, nil
}

// Write replaces the record if its revision is still rev; ErrConflict if
// not. A record NATS refuses for its size (by Write, Create or their
// async forms) is an error wrapping size.ErrTooLarge.
func (s *Store) Write(ctx context.Context, r state.Record, rev uint64) (uint64, error) {
	ack, err := s.js.PublishMsg(ctx, s.msg(r, rev))
	if err != nil {
		return 0, mapErr(err, r.ID, false)
	}
	return ack.Sequence, nil
}

// Pending is a write in flight (WriteAsync, CreateAsync).
type Pending struct {
	f      jetstream.PubAckFuture
	id     string
	create bool
}

// Wait returns the new revision, or ErrConflict (ErrExists for a create),
// or another error.
func (p Pending) Wait(ctx context.Context) (uint64, error) {
	select {
	case ack := <-p.f.Ok():
		return ack.Sequence, nil
	case err := <-p.f.Err():
		return 0, mapErr(err, p.id, p.create)
	case <-ctx.Done():
		return 0, context.Cause(ctx)
	}
}

// WriteAsync sends the compare-and-set write without waiting for it, so
// that writes of many events share round trips.
func (s *Store) WriteAsync(r state.Record, rev uint64) (Pending, error) {
	f, err := s.js.PublishMsgAsync(s.msg(r, rev))
	if err != nil {
		return Pending{}, mapErr(err, r.ID, false)
	}
	return Pending{f: f, id: r.ID}, nil
}

// CreateAsync is Create without waiting: many creates share round trips.
func (s *Store) CreateAsync(r state.Record) (Pending, error) {
	f, err := s.js.PublishMsgAsync(s.msg(r, 0))
	if err != nil {
		return Pending{}, mapErr(err, r.ID, true)
	}
	return Pending{f: f, id: r.ID, create: true}, nil
}

// Update reads the record, applies fn and writes the result by
// compare-and-set, re-reading and re-applying on a conflict. An error from
// fn ends it unchanged.
func (s *Store) Update(ctx context.Context, account, id string, fn func(state.Record) (state.Record, error)) (state.Record, uint64, error) {
	for i := 0; ; i++ {
		cur, rev, err := s.Get(ctx, account, id)
		if err != nil {
			return state.Record{}, 0, err
		}
		next, err := fn(cur)
		if err != nil {
			return cur, rev, err
		}
		account = cur.Account // found: its partition is known from here
		nrev, err := s.Write(ctx, next, rev)
		if err == nil {
			return next, nrev, nil
		}
		if !errors.Is(err, ErrConflict) || i >= s.o.MaxConflicts {
			return cur, rev, err
		}
	}
}

// Transition applies one state-machine action to the stored record,
// retrying on conflicts; it returns the new record and the effects to carry
// out. An illegal move returns state.ErrInvalidTransition and the current
// record.
func (s *Store) Transition(ctx context.Context, account, id string, a state.Action) (state.Record, uint64, []state.EffectKind, error) {
	var effects []state.EffectKind
	r, rev, err := s.Update(ctx, account, id, func(cur state.Record) (state.Record, error) {
		next, eff, err := state.Apply(cur, a, s.o.Now())
		effects = eff
		return next, err
	})
	return r, rev, effects, err
}

// Envelope rebuilds the envelope of rec's event from the record (which
// keeps the payload): what a message of the event carries.
func (s *Store) Envelope(rec state.Record) (event.Envelope, error) {
	if len(rec.Payload) == 0 {
		return event.Envelope{}, fmt.Errorf("store: record %s has no payload (written before payloads were kept)", rec.ID)
	}
	return event.Envelope{ID: rec.ID, IdempotencyKey: rec.IdempotencyKey, Account: rec.Account, Kind: rec.Kind,
		EntityID: rec.EntityID, OrderingKey: rec.OrderingKey, CreatedAt: rec.CreatedAt, Payload: rec.Payload, Traceparent: rec.Traceparent}, nil
}
