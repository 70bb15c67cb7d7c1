package effect

import (
	"context"
	"crypto/sha256"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/outcome"
	"github.com/tenaz/tenaz/pkg/store"
)

// Conditions callers branch on.
var (
	// ErrNotFound: Get found no record for the key (never applied, or
	// forgotten after Options.Retention).
	ErrNotFound = errors.New("effect: no record for this key")
	// ErrInProgress: another run holds a live claim on the key. Transient:
	// retry later (the job's own retry is the way). Returned as an
	// *InProgressError, which carries the owner and the lease.
	ErrInProgress = errors.New("effect: being applied by another run")
	// ErrFailed: an earlier run of fn failed permanently, so fn is not run
	// again. Returned wrapped in outcome.Permanent, so a dispatcher handler
	// that returns it dead-letters its event.
	ErrFailed = errors.New("effect: failed permanently")
	// ErrLeaseLost: fn ran, but meanwhile the claim's lease ran out and
	// another run took the key over, so the effect may have been applied
	// twice. The record says what the other run did.
	ErrLeaseLost = errors.New("effect: lease lost to another run")
	// ErrInvalidKey: the key is empty, longer than MaxKeyLen or not UTF-8,
	// or the account is not an account name.
	ErrInvalidKey = errors.New("effect: invalid key")
	// ErrResultTooLarge: fn succeeded and done is recorded, but its result
	// was longer than MaxResult and is not kept.
	ErrResultTooLarge = errors.New("effect: result too large to keep")
	// ErrInvalidOptions wraps every problem with Options.
	ErrInvalidOptions = errors.New("effect: invalid options")
)

// Limits.
const (
	// MaxKeyLen is the longest key, in bytes (the key is kept in the record).
	MaxKeyLen = 4096
	// MaxResult is the longest result of fn that is recorded, in bytes.
	MaxResult = 64 << 10
	// MinLease is the shortest Options.Lease.
	MinLease = 100 * time.Millisecond
)

// maxConflicts bounds the read-and-compare-and-set rounds of a claim.
const maxConflicts = 16

// settleTimeout bounds how long Do keeps trying to record fn's outcome
// after fn returned (also when the caller's context is already done: the
// record is what keeps fn from running twice).
const settleTimeout = 10 * time.Second

// Status of a key.
type Status string

// The statuses.
const (
	// StatusRunning: a run claimed the key and runs fn until LeaseUntil,
	// which it renews while fn runs.
	StatusRunning Status = "running"
	// StatusDone: fn succeeded; Result is what it returned. Final.
	StatusDone Status = "done"
	// StatusReleased: the last run of fn failed with a transient error
	// (Error); the next Do runs fn again.
	StatusReleased Status = "released"
	// StatusFailed: fn failed with an outcome.Permanent error (Error). Final.
	StatusFailed Status = "failed"
)

// Record is what the ledger keeps for one key of an account, as JSON in
// tenaz_effects under StorageKey(Account, Key).
type Record struct {
	Account    string    `json:"account,omitempty"`    // "" in a record written before keys were per account
	Key        string    `json:"key"`                  // the caller's key
	Status     Status    `json:"status"`               // see the Status constants
	Owner      string    `json:"owner,omitempty"`      // Options.Owner of the run that last claimed the key
	Runs       int       `json:"runs"`                 // how many times fn was started for the key
	LeaseUntil time.Time `json:"lease_until,omitzero"` // running: the claim holds until then
	Result     []byte    `json:"result,omitempty"`     // done: fn's result
	Error      string    `json:"error,omitempty"`      // released, failed: fn's error (running: the last one)
	CreatedAt  time.Time `json:"created_at"`           // first claim
	UpdatedAt  time.Time `json:"updated_at"`           // last write; done: when it was recorded
	Revision   uint64    `json:"-"`                    // the KV revision read
}

// Outcome is what Do reports.
type Outcome struct {
	// Applied is true when this call ran fn to success.
	Applied bool
	// Result is fn's result: this call's, or the one recorded by the run
	// that applied the effect.
	Result []byte
	// At is when done was recorded.
	At time.Time
}

// InProgressError is ErrInProgress with what the record says.
type InProgressError struct {
	Owner      string    // the run holding the claim
	LeaseUntil time.Time // when its claim runs out unless renewed
}

func (e *InProgressError) Error() string {
	return fmt.Sprintf("effect: being applied by %s (lease until %s)", e.Owner, e.LeaseUntil.UTC().Format(time.RFC3339Nano))
}

// Is makes errors.Is(err, ErrInProgress) true.
func (e *InProgressError) Is(target error) bool { return target == ErrInProgress }

// Options of a Ledger.
type Options struct {
	// Owner names this process in the records it claims (shown by Get and
	// in InProgressError). It is for diagnostics only: a live claim is never
	// taken over, whoever owns it. Defaults to <hostname>-<pid>.
	Owner string
	// Lease is how long a claim holds. Do renews it every Lease/3 while fn
	// runs, so it runs out only when the owner died or lost NATS; then
	// another Do takes the key over and runs fn again. Leases are judged by
	// each process's clock: keep Lease well above the clock skew between
	// them. At least MinLease. Defaults to 30s.
	Lease time.Duration
	// Retention is how long a record is kept after its last write (a
	// per-key TTL). After it the key is forgotten, and a Do for it would run
	// fn again: keep it longer than anything may retry. Defaults to 30 days.
	Retention time.Duration
	// Now is the clock leases are set and judged by. Defaults to time.Now.
	Now func() time.Time
	// Prefix is the installation's subject prefix, which its bucket names
	// carry (config prefix). Defaults to names.DefaultPrefix.
	Prefix string
}

// WithDefaults returns o with every unset field at its default.
func (o Options) WithDefaults() Options {
	if o.Owner == "" {
		h, _ := os.Hostname()
		o.Owner = fmt.Sprintf("%s-%d", h, os.Getpid())
	}
	if o.Lease == 0 {
		o.Lease = 30 * time.Second
	}
	if o.Retention == 0 {
		o.Retention = 30 * 24 * time.Hour
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Validate checks o (after WithDefaults).
func (o Options) Validate() error {
	var errs []error
	if o.Lease < MinLease {
		errs = append(errs, fmt.Errorf("%w: Lease must be at least %s, got %s", ErrInvalidOptions, MinLease, o.Lease))
	}
	if o.Retention < time.Second || o.Retention <= o.Lease {
		errs = append(errs, fmt.Errorf("%w: Retention must be at least 1s and longer than Lease, got %s", ErrInvalidOptions, o.Retention))
	}
	return errors.Join(errs...)
}

// Ledger records side effects by key in the tenaz_effects bucket. It is
// safe for concurrent use; any number of processes may share the bucket.
type Ledger struct {
	js     jetstream.JetStream
	stream jetstream.Stream
	subj   string // "$KV.tenaz_effects."
	o      Options
}

// Open binds the tenaz_effects bucket (it must exist: streams.Apply, which
// every tenaz service runs at start-up, creates it).
func Open(ctx context.Context, js jetstream.JetStream, o Options) (*Ledger, error) {
	o = o.WithDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	bucket := names.NewSubjects(o.Prefix).Bucket(names.BucketEffects)
	s, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return nil, fmt.Errorf("effect: bucket %s (created by streams.Apply): %w", bucket, err)
	}
	return &Ledger{js: js, stream: s, subj: "$KV." + bucket + ".", o: o}, nil
}

var storageEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// StorageKey is the KV key an account's key is recorded under in
// tenaz_effects: 52 base32 characters of the SHA-256 of both, so that any
// string (dots, wildcards, spaces, any length) is a valid, distinct KV
// key, and two accounts' equal keys are two records. The record keeps
// both. For operators: `nats kv get tenaz_effects <StorageKey(account, key)>`.
func StorageKey(account, key string) string {
	// An account name has no newline: "a\nb" names one pair only.
	sum := sha256.Sum256([]byte(account + "\n" + key))
	return storageEncoding.EncodeToString(sum[:])
}

// legacyKey is where a key was recorded before keys were per account.
func legacyKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return storageEncoding.EncodeToString(sum[:])
}

func checkKey(account, key string) error {
	if err := names.ValidateAccount(account); err != nil {
		return fmt.Errorf("%w: account: %v", ErrInvalidKey, err)
	}
	switch {
	case key == "":
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: %d bytes, at most %d", ErrInvalidKey, len(key), MaxKeyLen)
	case !utf8.ValidString(key):
		return fmt.Errorf("%w: not valid UTF-8", ErrInvalidKey)
	}
	return nil
}

// Get returns the record of account's key, or ErrNotFound.
func (l *Ledger) Get(ctx context.Context, account, key string) (Record, error) {
	if err := checkKey(account, key); err != nil {
		return Record{}, err
	}
	r, _, found, err := l.read(ctx, account, key)
	if err != nil {
		return Record{}, err
	}
	if !found {
		return Record{}, ErrNotFound
	}
	return r, nil
}

// Do applies an effect once per key of an account: it claims key, runs
// fn, and records done with fn's result, all by compare-and-set on the
// key's record. Keys are per account, as idempotency keys are: a handler
// passes its event's account (Delivery.Event.Account), so that another
// account's event with the same business key (an order id of its own)
// neither skips this one's effect nor reads its result.
//
//   - key done: fn is not run; Do returns the recorded result, Applied false.
//   - key claimed by a live run (any process, this one too): fn is not run;
//     Do returns an *InProgressError (errors.Is ErrInProgress), transient.
//   - key failed: fn is not run; Do returns ErrFailed, marked permanent.
//   - otherwise (new, released, or a claim whose lease ran out because its
//     owner died) Do claims the key, renews the claim every Lease/3 while fn
//     runs, and records fn's outcome: nil error → done (Applied true);
//     an outcome.Permanent error → failed, never run again; any other error
//     → released, so the next Do runs fn again. fn's error is returned
//     as it is, so outcome.Permanent and outcome.RetryAfter reach the caller.
//     A panic in fn releases the key and goes on panicking.
//
// fn's context is cancelled with cause ErrLeaseLost if the claim is lost
// while fn runs (the lease could not be renewed in time and another run
// took the key over).
//
// The guarantee: fn runs to success at most once per key (within
// Retention) as long as each run that reaches fn's side effect also lives
// to record done. If the process dies in between, fn runs again once the
// lease runs out: pass the key on to the external system as its
// idempotency key, or make fn check first whether the effect exists.
func (l *Ledger) Do(ctx context.Context, account, key string, fn func(ctx context.Context) ([]byte, error)) (Outcome, error) {
	if err := checkKey(account, key); err != nil {
		return Outcome{}, err
	}
	c, out, err := l.claim(ctx, account, key)
	if err != nil || c == nil {
		return out, err
	}
	return l.run(ctx, c, fn)
}

// claim is a claim this process holds.
type claim struct {
	rec Record
	rev uint64
}

// claim takes key for this run, or reports why not: a non-nil claim, or
// the outcome and error Do returns.
func (l *Ledger) claim(ctx context.Context, account, key string) (*claim, Outcome, error) {
	for range maxConflicts {
		cur, rev, found, err := l.read(ctx, account, key)
		if err != nil {
			return nil, Outcome{}, err
		}
		now := l.o.Now()
		next := Record{Account: account, Key: key, Status: StatusRunning, Owner: l.o.Owner, Runs: 1,
			LeaseUntil: now.Add(l.o.Lease), CreatedAt: now, UpdatedAt: now}
		if found {
			switch cur.Status {
			case StatusDone:
				return nil, Outcome{Result: cur.Result, At: cur.UpdatedAt}, nil
			case StatusFailed:
				return nil, Outcome{}, outcome.Permanent(fmt.Errorf("%w: %s", ErrFailed, cur.Error))
			case StatusRunning:
				if now.Before(cur.LeaseUntil) {
					return nil, Outcome{}, &InProgressError{Owner: cur.Owner, LeaseUntil: cur.LeaseUntil}
				}
				// Its owner died (or lost NATS for a whole lease): take over.
			case StatusReleased:
			default:
				return nil, Outcome{}, fmt.Errorf("effect: record has unknown status %q", cur.Status)
			}
			next.Runs, next.CreatedAt, next.Error = cur.Runs+1, cur.CreatedAt, cur.Error
		}
		nrev, err := l.write(ctx, next, rev)
		if err == nil {
			next.Revision = nrev
			return &claim{rec: next, rev: nrev}, Outcome{}, nil
		}
		if !errors.Is(err, errConflict) {
			return nil, Outcome{}, err
		}
	}
	return nil, Outcome{}, errors.New("effect: too many conflicting writes")
}

// run runs fn under claim c and records its outcome.
func (l *Ledger) run(ctx context.Context, c *claim, fn func(ctx context.Context) ([]byte, error)) (Outcome, error) {
	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := l.keepLease(ctx, c, cancel)
	returned := false
	defer func() {
		if !returned { // fn panicked: free the key for the next run; the panic goes on
			stop()
			_, _ = l.settle(ctx, c, StatusReleased, nil, "fn panicked")
		}
	}()
	res, fnErr := fn(fctx)
	returned = true
	stop()

	if fnErr != nil {
		st := StatusReleased
		if outcome.IsPermanent(fnErr) {
			st = StatusFailed
		}
		if _, err := l.settle(ctx, c, st, nil, fnErr.Error()); err != nil {
			return Outcome{}, errors.Join(fnErr, err)
		}
		return Outcome{}, fnErr
	}
	kept, note := res, ""
	if len(res) > MaxResult {
		kept, note = nil, fmt.Sprintf("result of %d bytes not kept (at most %d)", len(res), MaxResult)
	}
	at, err := l.settle(ctx, c, StatusDone, kept, note)
	out := Outcome{Applied: true, Result: res, At: at}
	if err == nil && note != "" {
		err = fmt.Errorf("%w: %s", ErrResultTooLarge, note)
	}
	return out, err
}

// keepLease renews c's lease every Lease/3 until the returned stop is
// called (stop waits for it to end, after which c is the caller's again).
// If the claim turns out to be lost, it cancels fn with ErrLeaseLost.
func (l *Ledger) keepLease(ctx context.Context, c *claim, cancel context.CancelCauseFunc) (stop func()) {
	every := l.o.Lease / 3
	done, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			next := c.rec
			now := l.o.Now()
			next.LeaseUntil, next.UpdatedAt = now.Add(l.o.Lease), now
			wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), every)
			rev, err := l.write(wctx, next, c.rev)
			wcancel()
			switch {
			case err == nil:
				next.Revision = rev
				c.rec, c.rev = next, rev
			case errors.Is(err, errConflict):
				if cur, ok := l.ours(ctx, c); ok && cur.Status == StatusRunning {
					c.rec, c.rev = cur, cur.Revision
					continue
				}
				cancel(ErrLeaseLost)
				return
			}
			// Any other error: NATS is unavailable; try again at the next tick.
		}
	}()
	return func() { close(done); <-ended }
}

// settle records the end of c's run. It keeps trying a failed write (not a
// conflict) until settleTimeout, even after ctx ended: if the record is
// not written, the key stays claimed and fn runs again after the lease.
func (l *Ledger) settle(ctx context.Context, c *claim, st Status, result []byte, msg string) (time.Time, error) {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	wait := 50 * time.Millisecond
	for {
		now := l.o.Now()
		next := c.rec
		next.Status, next.Result, next.Error, next.LeaseUntil, next.UpdatedAt = st, result, trimMsg(msg), time.Time{}, now
		_, err := l.write(wctx, next, c.rev)
		if err == nil {
			return now, nil
		}
		if errors.Is(err, errConflict) {
			cur, ok := l.ours(wctx, c)
			switch {
			case ok && cur.Status == st:
				return cur.UpdatedAt, nil
			case ok && cur.Status == StatusRunning:
				c.rec, c.rev = cur, cur.Revision
				continue
			}
			return now, fmt.Errorf("%w: recording %s found the record changed", ErrLeaseLost, st)
		}
		select {
		case <-wctx.Done():
			return now, fmt.Errorf("effect: recording %s (the key stays claimed until its lease runs out): %w", st, err)
		case <-time.After(wait):
			wait = min(2*wait, time.Second)
		}
	}
}

// ours reads c's record again after a conflicting write: the write it
// conflicted with may be one of this run's own whose answer was lost
// (stored, but the publish timed out or the connection dropped). ok
// reports that the record is still this run's claim, as stored now.
func (l *Ledger) ours(ctx context.Context, c *claim) (Record, bool) {
	r, _, found, err := l.readAt(ctx, StorageKey(c.rec.Account, c.rec.Key), c.rec.Account, c.rec.Key)
	if err != nil || !found || r.Owner != c.rec.Owner || r.Runs != c.rec.Runs || !r.CreatedAt.Equal(c.rec.CreatedAt) {
		return Record{}, false
	}
	return r, true
}

func trimMsg(m string) string {
	if len(m) > 2048 {
		m = m[:2048] + "…"
	}
	return strings.ToValidUTF8(m, "?")
}

// errConflict is a failed compare-and-set.
var errConflict = errors.New("effect: revision conflict")

// read returns account's record of key and the revision to
// compare-and-set against: 0 when the key never had a message, the
// marker's when it was deleted or expired (found false). A key that never
// had one may have a record from before keys were per account: it is
// taken as the key's (its effect was applied, or is being applied, for
// some account), at revision 0, so that an upgrade runs nothing twice;
// the next write goes to the account's own record.
func (l *Ledger) read(ctx context.Context, account, key string) (Record, uint64, bool, error) {
	r, rev, found, err := l.readAt(ctx, StorageKey(account, key), account, key)
	if err != nil || found || rev != 0 {
		return r, rev, found, err
	}
	r, _, found, err = l.readAt(ctx, legacyKey(key), "", key)
	return r, 0, found, err
}

// readAt reads the record at storage key sk, which must be account's key.
func (l *Ledger) readAt(ctx context.Context, sk, account, key string) (Record, uint64, bool, error) {
	m, err := l.stream.GetLastMsgForSubject(ctx, l.subj+sk)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Record{}, 0, false, nil
	}
	if err != nil {
		return Record{}, 0, false, fmt.Errorf("effect: read: %w", err)
	}
	switch {
	case m.Header.Get("KV-Operation") == "DEL", m.Header.Get("KV-Operation") == "PURGE",
		m.Header.Get(jetstream.MarkerReasonHeader) != "":
		return Record{}, m.Sequence, false, nil
	}
	var r Record
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return Record{}, 0, false, fmt.Errorf("effect: decode record: %w", err)
	}
	if r.Key != key || r.Account != account { // two keys with one SHA-256: never seen, never ignored
		return Record{}, 0, false, fmt.Errorf("effect: storage key %s holds another key", sk)
	}
	r.Revision = m.Sequence
	return r, m.Sequence, true, nil
}

// write stores r if the key's last revision is still rev (0: no message),
// with the retention as its TTL.
func (l *Ledger) write(ctx context.Context, r Record, rev uint64) (uint64, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return 0, fmt.Errorf("effect: encode record: %w", err)
	}
	m := nats.NewMsg(l.subj + StorageKey(r.Account, r.Key))
	m.Data = b
	ack, err := l.js.PublishMsg(ctx, m, jetstream.WithExpectLastSequencePerSubject(rev), jetstream.WithMsgTTL(l.o.Retention))
	if err != nil {
		if store.IsWrongSequence(err) {
			return 0, errConflict
		}
		return 0, fmt.Errorf("effect: write: %w", err)
	}
	return ack.Sequence, nil
}
