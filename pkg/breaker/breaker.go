package breaker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/store"
)

// State is the shared state of a breaker as stored in the bucket.
type State string

// The states of a breaker.
const (
	// Closed lets every call through and counts consecutive failures.
	Closed State = "closed"
	// Open refuses every call until open_until.
	Open State = "open"
	// HalfOpen lets exactly one probe call through, across all replicas.
	HalfOpen State = "half_open"
)

// Defaults of Config.
const (
	DefaultFailures     = 5
	DefaultCooldown     = 2 * time.Minute
	DefaultProbeTimeout = 30 * time.Second
)

// probeWait is how much later a caller refused because another replica is
// probing should ask again (capped by the probe claim's expiry).
const probeWait = time.Second

// maxAttempts bounds the compare-and-set loops of one call.
const maxAttempts = 8

// forever is the local failsafe-go breaker's open delay: it never half-opens
// on its own, because only the shared open_until (on the registry's clock)
// decides when the cooldown ends.
const forever = 100 * 365 * 24 * time.Hour

// ErrInvalidName is wrapped by the errors of a breaker whose account or
// target is not one subject token of [A-Za-z0-9_-] (1 to 64 characters).
// It wraps names.ErrInvalidName.
var ErrInvalidName = fmt.Errorf("breaker: %w", names.ErrInvalidName)

// errConflict is a failed compare-and-set.
var errConflict = errors.New("breaker: revision conflict")

// ErrProbeLost is Claim's answer for a probe whose claim another caller
// took first, here or on another replica, or whose breaker moved on (an
// operator closed it): its call must not be made.
var ErrProbeLost = errors.New("breaker: the probe's claim was taken over")

// Config configures one breaker. Non-positive fields take their defaults.
type Config struct {
	// Failures is how many consecutive failures, counted over all
	// replicas, open the breaker. Defaults to 5.
	Failures int
	// Cooldown is how long the breaker stays open before one probe call is
	// allowed. Defaults to 2m.
	Cooldown time.Duration
	// ProbeTimeout is how long a replica's claim to make the probe call
	// lasts; after it another replica may probe (the first one crashed or
	// hung). Set it to at least the target's call timeout. Defaults to 30s.
	ProbeTimeout time.Duration
}

// WithDefaults returns c with every non-positive field set to its default.
func (c Config) WithDefaults() Config {
	if c.Failures <= 0 {
		c.Failures = DefaultFailures
	}
	if c.Cooldown <= 0 {
		c.Cooldown = DefaultCooldown
	}
	if c.ProbeTimeout <= 0 {
		c.ProbeTimeout = DefaultProbeTimeout
	}
	return c
}

// Change is a breaker's state as a replica sees it: what OnChange receives
// for a transition and what List returns for every known breaker.
type Change struct {
	// Account and Target name the breaker.
	Account, Target string
	// State is the state it moved to (or is in, for List).
	State State
	// From is the state it moved from ("" when unknown, as in List).
	From State
	// OpenUntil is when the cooldown ends (zero when closed).
	OpenUntil time.Time
	// Reason says why, e.g. "5 consecutive failures", "probe failed",
	// "closed by alice".
	Reason string
	// At is when the transition was written (the writer's clock).
	At time.Time
	// By is the instance that wrote it.
	By string
	// Failures is the failure count that led to the state (0 when closed).
	Failures int
}

// Permit is the answer of Allow; pass it back to Record after the call.
type Permit struct {
	// OK says the call may be made.
	OK bool
	// Probe says the call is to be the half-open probe: Claim takes the
	// probe for it right before the call, and of the callers given one,
	// here or on other replicas, only the first to claim makes its call.
	Probe bool
	// RetryAt, when OK is false, is when to ask again: the end of the
	// cooldown while open, or a moment later while another replica probes.
	RetryAt time.Time

	rev     uint64 // closed: the revision its closed state began at; probe: the revision the claim replaces, then the claim's
	claimed bool   // a probe's claim is taken (Claim)
}

// record is the JSON value under "<account>.<target>" in tenaz_breakers.
type record struct {
	State      State     `json:"state"`
	OpenUntil  time.Time `json:"open_until,omitzero"`
	OpenedAt   time.Time `json:"opened_at,omitzero"`
	Failures   int       `json:"failures"`
	Prober     string    `json:"prober,omitempty"`
	ProbeUntil time.Time `json:"probe_until,omitzero"`
	UpdatedBy  string    `json:"updated_by,omitempty"`
	UpdatedAt  time.Time `json:"updated_at,omitzero"`
	Reason     string    `json:"reason,omitempty"`
}

// state is the record's state; an absent or unknown one counts as closed.
func (r record) state() State {
	switch r.State {
	case Open, HalfOpen:
		return r.State
	}
	return Closed
}

// Breaker is one account + target's breaker in this replica: a local
// failsafe-go CircuitBreaker that counts failures and mirrors the shared
// state, plus the latest shared record this replica knows. Safe for
// concurrent use.
type Breaker struct {
	r               *Registry
	account, target string
	key             string
	err             error // invalid name

	sem chan struct{} // serialises this replica's writes of the key

	mu    sync.Mutex
	cfg   Config                             // defaults until For says otherwise
	cb    circuitbreaker.CircuitBreaker[any] // counts failures; mirrors the shared state
	rec   record                             // latest known shared value
	rev   uint64                             // its revision; 0 = none known
	epoch uint64                             // the revision at which rec's state began

	// offered is the probe permit Allow gave here and not claimed yet:
	// other callers here are refused until it is claimed or until, its
	// caller gone, ProbeTimeout passes.
	offered struct {
		rev   uint64
		until time.Time
	}

	// What the watcher last reported, so OnChange fires once per transition.
	seenRev      uint64
	seenState    State
	seenOpenedAt time.Time
}

func newBreaker(r *Registry, account, target string) *Breaker {
	b := &Breaker{
		r: r, account: account, target: target, key: account + "." + target,
		sem:       make(chan struct{}, 1),
		seenState: Closed,
	}
	if err := validToken(account); err != nil {
		b.err = fmt.Errorf("%w: account %q: %v", ErrInvalidName, account, err)
	} else if err := validToken(target); err != nil {
		b.err = fmt.Errorf("%w: target %q: %v", ErrInvalidName, target, err)
	}
	b.setConfigLocked(Config{}.WithDefaults())
	return b
}

func validToken(t string) error {
	if t == "" || len(t) > 64 {
		return errors.New("must be 1-64 characters")
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return errors.New("must be characters of [A-Za-z0-9_-]")
		}
	}
	return nil
}

// setConfigLocked (re)builds the local failsafe-go breaker for c and puts
// it in the shared state. The local failure count restarts.
func (b *Breaker) setConfigLocked(c Config) {
	b.cfg = c
	b.cb = circuitbreaker.NewBuilder[any]().
		WithFailureThreshold(uint(c.Failures)).
		WithDelay(forever).
		Build()
	switch b.rec.state() {
	case Open:
		b.cb.Open()
	case HalfOpen:
		b.cb.HalfOpen()
	}
}

// adoptLocked makes rec (at rev) the known shared value if it is newer,
// and mirrors its state into the local failsafe-go breaker. It never
// writes: this is the only path by which remote changes reach the local
// breaker, and nothing on it leads to a KV write (the loop guard).
func (b *Breaker) adoptLocked(rec record, rev uint64) {
	if rev <= b.rev {
		return
	}
	old := b.rec.state()
	b.rec, b.rev = rec, rev
	if rec.state() != old {
		b.epoch = rev
	}
	switch rec.state() {
	case Open:
		b.cb.Open() // a no-op when already open (e.g. tripped here)
	case HalfOpen:
		b.cb.HalfOpen()
	case Closed:
		// Closed after closed leaves a local trip that is not written yet
		// alone; closed after open or half-open starts counting afresh.
		if old != Closed {
			b.cb.Close()
		}
	}
}

func (b *Breaker) adopt(rec record, rev uint64) {
	b.mu.Lock()
	b.adoptLocked(rec, rev)
	b.mu.Unlock()
}

// seen is the watcher's path: it adopts the value and reports whether it
// is a transition this replica has not reported yet.
func (b *Breaker) seen(rec record, rev uint64) (Change, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.adoptLocked(rec, rev)
	if rev <= b.seenRev {
		return Change{}, false
	}
	from := b.seenState
	st := rec.state()
	fire := st != from || st == Open && !rec.OpenedAt.Equal(b.seenOpenedAt)
	b.seenRev, b.seenState, b.seenOpenedAt = rev, st, rec.OpenedAt
	return b.change(rec, from), fire
}

func (b *Breaker) change(rec record, from State) Change {
	c := Change{
		Account: b.account, Target: b.target,
		State: rec.state(), From: from,
		Reason: rec.Reason, At: rec.UpdatedAt, By: rec.UpdatedBy,
		Failures: rec.Failures,
	}
	if c.State != Closed {
		c.OpenUntil = rec.OpenUntil
	}
	return c
}

// lock takes the breaker's write semaphore (one writer per replica, so
// concurrent callers in one replica do not race each other to the bucket).
func (b *Breaker) lock(ctx context.Context) (func(), error) {
	select {
	case b.sem <- struct{}{}:
		return func() { <-b.sem }, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// write stores rec by compare-and-set on rev (0: the key must not exist)
// and returns the new revision, or errConflict.
func (b *Breaker) write(ctx context.Context, rec record, rev uint64) (uint64, error) {
	data, err := json.Marshal(rec)
	if err != nil {
		return 0, fmt.Errorf("breaker %s: encode: %w", b.key, err)
	}
	var nrev uint64
	if rev == 0 {
		nrev, err = b.r.kv.Create(ctx, b.key, data)
	} else {
		nrev, err = b.r.kv.Update(ctx, b.key, data, rev)
	}
	if store.IsKeyTaken(err) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return 0, errConflict
	}
	if err != nil {
		return 0, fmt.Errorf("breaker %s: write: %w", b.key, err)
	}
	return nrev, nil
}

// refresh reads the key and adopts what it holds (after a lost
// compare-and-set, when the watcher has not caught up yet).
func (b *Breaker) refresh(ctx context.Context) error {
	e, err := b.r.kv.Get(ctx, b.key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		// Absent or deleted: closed, and the next write creates it.
		b.mu.Lock()
		if b.rec.state() != Closed {
			b.cb.Close()
		}
		b.rec, b.rev = record{State: Closed}, 0
		b.mu.Unlock()
		return nil
	}
	if err != nil {
		return fmt.Errorf("breaker %s: read: %w", b.key, err)
	}
	rec, err := decode(e.Value())
	if err != nil {
		return fmt.Errorf("breaker %s: %w", b.key, err)
	}
	b.adopt(rec, e.Revision())
	return nil
}

func decode(data []byte) (record, error) {
	var rec record
	if err := json.Unmarshal(data, &rec); err != nil {
		return record{}, fmt.Errorf("decode: %w", err)
	}
	return rec, nil
}

// committed adopts a record this replica wrote, publishes the advisory of
// the transition and logs it.
func (b *Breaker) committed(rec record, rev uint64, from State) {
	b.adopt(rec, rev)
	b.r.wrote(b, rec, rev)
	c := b.change(rec, from)
	b.r.publish(c)
	b.r.log.Info().Str("account", b.account).Str("target", b.target).
		Str("from", string(from)).Str("state", string(c.State)).
		Time("open_until", c.OpenUntil).Str("reason", c.Reason).Uint64("revision", rev).
		Msg("breaker transition")
}

// Allow asks whether a call to the target may be made now. While closed it
// answers OK without I/O. While open it refuses with RetryAt = open_until.
// Once open_until has passed it answers OK with Probe set, to one caller
// here at a time, and refuses the others with RetryAt a moment later: the
// caller takes the probe with Claim right before its call, and of the
// callers given a probe permit, here or on other replicas, only the first
// to claim it calls. So the claim covers the call, not its wait for its
// turn (a target's slot, its account's pace), which may be longer than
// any claim: a probe claimed here and waiting went out beside the one of
// the caller that took its expired claim over. Likewise for a claim that
// expired (its prober crashed). A tripped breaker whose open cannot be
// stored refuses for a cooldown, with its bucket's error. An invalid
// name's error comes with a zero Permit: there is no breaker to ask.
func (b *Breaker) Allow(ctx context.Context) (Permit, error) {
	if b.err != nil {
		return Permit{}, b.err
	}
	for {
		now := b.r.now()
		b.mu.Lock()
		rec, rev, tripped := b.rec, b.rev, b.cb.IsOpen()
		b.mu.Unlock()
		switch rec.state() {
		case Closed:
			if !tripped {
				b.mu.Lock()
				epoch := b.epoch
				b.mu.Unlock()
				return Permit{OK: true, rev: epoch}, nil
			}
			// Tripped here but the open is not in the bucket yet (its
			// write failed): write it now, refusing meanwhile.
			if err := b.trip(ctx); err != nil {
				// Open here, not stored: refused for a cooldown, as if
				// it were (not asked again every second per event).
				b.mu.Lock()
				cooldown := b.cfg.Cooldown
				b.mu.Unlock()
				return Permit{RetryAt: now.Add(max(cooldown, probeWait))}, err
			}
			continue
		case Open:
			if now.Before(rec.OpenUntil) {
				return Permit{RetryAt: rec.OpenUntil}, nil
			}
		case HalfOpen:
			if now.Before(rec.ProbeUntil) {
				return Permit{RetryAt: earliest(rec.ProbeUntil, now.Add(probeWait))}, nil
			}
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.rev != rev {
			return Permit{RetryAt: now.Add(probeWait)}, nil // moved on meanwhile: ask again
		}
		if b.offered.rev == rev && now.Before(b.offered.until) {
			return Permit{RetryAt: earliest(b.offered.until, now.Add(probeWait))}, nil
		}
		b.offered.rev, b.offered.until = rev, now.Add(b.cfg.ProbeTimeout)
		return Permit{OK: true, Probe: true, rev: rev}, nil
	}
}

// Claim takes the probe for p, right before its call, by compare-and-set
// from the record Allow saw: half_open, with this replica as the prober,
// until ProbeTimeout from now. ErrProbeLost says another caller claimed
// first, or the breaker moved on: the call must not be made. A bucket
// error refuses too: the claim cannot be known. Any other permit is
// returned as it is, without I/O.
func (b *Breaker) Claim(ctx context.Context, p Permit) (Permit, error) {
	if !p.OK || !p.Probe || p.claimed {
		return p, nil
	}
	if b.err != nil {
		return Permit{}, b.err
	}
	b.mu.Lock()
	if b.offered.rev == p.rev {
		b.offered.rev = 0 // claimed or lost: another caller here may be offered the next one
	}
	b.mu.Unlock()
	claimed, err := b.claim(ctx, p.rev, b.r.now())
	if err != nil {
		return Permit{}, err
	}
	if !claimed.OK {
		return Permit{}, ErrProbeLost
	}
	return claimed, nil
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// claim writes half_open with this replica as the prober, by
// compare-and-set on rev. A zero Permit means the value had moved on.
func (b *Breaker) claim(ctx context.Context, rev uint64, now time.Time) (Permit, error) {
	release, err := b.lock(ctx)
	if err != nil {
		return Permit{}, err
	}
	defer release()
	b.mu.Lock()
	cur, curRev, cfg := b.rec, b.rev, b.cfg
	b.mu.Unlock()
	if curRev != rev {
		return Permit{}, nil // another caller here wrote or learned something newer
	}
	next := cur
	next.State = HalfOpen
	next.Prober = b.r.instance
	next.ProbeUntil = now.Add(cfg.ProbeTimeout)
	next.UpdatedBy = b.r.instance
	next.UpdatedAt = now
	if cur.state() == HalfOpen {
		next.Reason = fmt.Sprintf("probe claim of %s expired; probing", cur.Prober)
	} else {
		next.Reason = "cooldown over; probing"
	}
	nrev, err := b.write(ctx, next, rev)
	if errors.Is(err, errConflict) {
		return Permit{}, b.refresh(ctx)
	}
	if err != nil {
		return Permit{}, err
	}
	if cur.state() == HalfOpen {
		b.adopt(next, nrev) // a new prober, not a transition
		b.r.wrote(b, next, nrev)
	} else {
		b.committed(next, nrev, cur.state())
	}
	return Permit{OK: true, Probe: true, rev: nrev, claimed: true}, nil
}

// Record reports the outcome of a call made with an OK permit: success, or
// a failure that counts (the caller decides: transient failures and
// timeouts count, a rejected payload does not). A permit that was not OK is
// ignored.
//
// For an ordinary call a failure adds one to the shared count of
// consecutive failures (a compare-and-set of the record), so every replica
// counts into the same number; when it reaches Config.Failures the same
// write opens the breaker for everyone. A success after failures resets
// the count (one write); a success after a success writes nothing. When
// the bucket cannot be written the local failsafe-go breaker counts on its
// own, and its trip is written by the next Allow. The outcome of a call
// allowed before the breaker last changed state is ignored. For the probe, success closes the breaker everywhere
// and resets the counts, failure re-opens it for another cooldown; if the
// claim was superseded meanwhile (it expired and another replica probed, or
// an operator closed the breaker) the outcome is ignored. An error means
// the bucket could not be written; for a trip, the next Allow retries it.
func (b *Breaker) Record(ctx context.Context, p Permit, success bool) error {
	if b.err != nil {
		return b.err
	}
	if !p.OK {
		return nil
	}
	if p.Probe {
		return b.recordProbe(ctx, p, success)
	}
	b.mu.Lock()
	if b.epoch != p.rev || b.rec.state() != Closed || b.cb.IsOpen() {
		b.mu.Unlock()
		return nil // allowed before the last change, or already tripped
	}
	if success {
		b.cb.RecordSuccess()
		counted := b.rec.Failures > 0
		b.mu.Unlock()
		if !counted {
			return nil
		}
		return b.count(ctx, p.rev, false)
	}
	b.mu.Unlock()
	return b.count(ctx, p.rev, true)
}

// OpenedSince reports whether the breaker opened (or began probing) after
// p was given, and until when: a call allowed then that has not been made
// yet should not be made now.
func (b *Breaker) OpenedSince(p Permit) (until time.Time, opened bool) {
	if !p.OK || p.Probe {
		return time.Time{}, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.epoch == p.rev || b.rec.state() == Closed {
		return time.Time{}, false
	}
	return b.rec.OpenUntil, true
}

// count writes the shared count of consecutive failures one higher
// (failed) or back to zero, by compare-and-set; the failure that reaches
// the threshold writes open instead. A state change since the permit's
// epoch makes the outcome moot. If the bucket cannot be written, a
// failure is counted by the local breaker alone.
func (b *Breaker) count(ctx context.Context, epoch uint64, failed bool) error {
	release, err := b.lock(ctx)
	if err != nil {
		return err
	}
	defer release()
	for range maxAttempts {
		b.mu.Lock()
		cur, rev, cfg, now := b.rec, b.rev, b.cfg, b.r.now()
		moot := b.epoch != epoch || cur.state() != Closed || b.cb.IsOpen()
		b.mu.Unlock()
		if moot || !failed && cur.Failures == 0 {
			return nil
		}
		next := cur
		next.State, next.Failures, next.UpdatedBy, next.UpdatedAt, next.Reason = Closed, 0, b.r.instance, now, ""
		if failed {
			next.Failures = cur.Failures + 1
			next.Reason = fmt.Sprintf("%d consecutive failures", next.Failures)
		}
		opens := next.Failures >= cfg.Failures
		if opens {
			next = record{
				State: Open, OpenedAt: now, OpenUntil: now.Add(cfg.Cooldown),
				Failures: next.Failures, UpdatedBy: b.r.instance, UpdatedAt: now, Reason: next.Reason,
			}
		}
		nrev, err := b.write(ctx, next, rev)
		if errors.Is(err, errConflict) {
			if err := b.refresh(ctx); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			if failed {
				b.mu.Lock()
				b.cb.RecordFailure()
				b.mu.Unlock()
			}
			return err
		}
		if opens {
			b.committed(next, nrev, Closed)
		} else {
			b.adopt(next, nrev)
			b.r.wrote(b, next, nrev)
		}
		return nil
	}
	return fmt.Errorf("breaker %s: count: %w after %d attempts", b.key, errConflict, maxAttempts)
}

// trip writes open after the local breaker tripped, unless the shared
// state is already open or half-open (then it was adopted) or the local
// trip was undone by a close in between.
func (b *Breaker) trip(ctx context.Context) error {
	release, err := b.lock(ctx)
	if err != nil {
		return err
	}
	defer release()
	for range maxAttempts {
		b.mu.Lock()
		cur, rev, cfg, tripped := b.rec, b.rev, b.cfg, b.cb.IsOpen()
		b.mu.Unlock()
		if cur.state() != Closed || !tripped {
			return nil
		}
		now := b.r.now()
		next := record{
			State: Open, OpenedAt: now, OpenUntil: now.Add(cfg.Cooldown),
			Failures: cfg.Failures, UpdatedBy: b.r.instance, UpdatedAt: now,
			Reason: fmt.Sprintf("%d consecutive failures", cfg.Failures),
		}
		nrev, err := b.write(ctx, next, rev)
		if errors.Is(err, errConflict) {
			if err := b.refresh(ctx); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		b.committed(next, nrev, Closed)
		return nil
	}
	return fmt.Errorf("breaker %s: open: %w after %d attempts", b.key, errConflict, maxAttempts)
}

func (b *Breaker) recordProbe(ctx context.Context, p Permit, success bool) error {
	release, err := b.lock(ctx)
	if err != nil {
		return err
	}
	defer release()
	b.mu.Lock()
	cur, rev, cfg := b.rec, b.rev, b.cfg
	b.mu.Unlock()
	if !p.claimed {
		return nil // not claimed: its call was not made
	}
	if rev != p.rev {
		b.r.log.Debug().Str("account", b.account).Str("target", b.target).
			Msg("breaker probe outcome ignored: the claim was superseded")
		return nil
	}
	now := b.r.now()
	next := record{State: Closed, UpdatedBy: b.r.instance, UpdatedAt: now, Reason: "probe succeeded"}
	if !success {
		next = record{
			State: Open, OpenedAt: now, OpenUntil: now.Add(cfg.Cooldown),
			Failures: cur.Failures + 1, UpdatedBy: b.r.instance, UpdatedAt: now,
			Reason: "probe failed",
		}
	}
	nrev, err := b.write(ctx, next, p.rev)
	if errors.Is(err, errConflict) {
		b.r.log.Debug().Str("account", b.account).Str("target", b.target).
			Msg("breaker probe outcome ignored: the claim was superseded")
		return b.refresh(ctx)
	}
	if err != nil {
		return err
	}
	b.committed(next, nrev, HalfOpen)
	return nil
}

// close writes closed (an operator's decision).
func (b *Breaker) close(ctx context.Context, actor string) error {
	if actor == "" {
		actor = "an operator"
	}
	return b.operatorWrite(ctx, "close", func(cur record, now time.Time) (record, bool) {
		if cur.state() == Closed {
			b.cb.Close() // also drop a local trip that is not written yet
			return record{}, false
		}
		return record{State: Closed, UpdatedBy: b.r.instance, UpdatedAt: now, Reason: "closed by " + actor}, true
	})
}

// open writes open until until (an operator's decision); the failure
// count is kept.
func (b *Breaker) open(ctx context.Context, until time.Time, actor, reason string) error {
	if actor == "" {
		actor = "an operator"
	}
	why := "opened by " + actor
	if reason != "" {
		why += ": " + reason
	}
	return b.operatorWrite(ctx, "open", func(cur record, now time.Time) (record, bool) {
		return record{State: Open, OpenedAt: now, OpenUntil: until, Failures: cur.Failures,
			UpdatedBy: b.r.instance, UpdatedAt: now, Reason: why}, true
	})
}

// operatorWrite writes an operator's decision by compare-and-set on the
// record read from the bucket: next (called under b.mu) makes the record
// to write of the current one, or says there is nothing to write. op names
// the decision in an error.
func (b *Breaker) operatorWrite(ctx context.Context, op string, next func(cur record, now time.Time) (record, bool)) error {
	release, err := b.lock(ctx)
	if err != nil {
		return err
	}
	defer release()
	for range maxAttempts {
		if err := b.refresh(ctx); err != nil {
			return err
		}
		b.mu.Lock()
		cur, rev := b.rec, b.rev
		rec, write := next(cur, b.r.now())
		b.mu.Unlock()
		if !write {
			return nil
		}
		nrev, err := b.write(ctx, rec, rev)
		if errors.Is(err, errConflict) {
			continue
		}
		if err != nil {
			return err
		}
		b.committed(rec, nrev, cur.state())
		return nil
	}
	return fmt.Errorf("breaker %s: %s: %w after %d attempts", b.key, op, errConflict, maxAttempts)
}

// State returns this replica's view: the state and, unless closed, the end
// of the cooldown. It is the shared state as last seen, except that a trip
// counted here whose open is not in the bucket yet reads as open with a
// zero time.
func (b *Breaker) State() (State, time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.cb.State() {
	case circuitbreaker.OpenState:
		if b.rec.state() == Closed {
			return Open, time.Time{}
		}
		return Open, b.rec.OpenUntil
	case circuitbreaker.HalfOpenState:
		return HalfOpen, b.rec.OpenUntil
	}
	return Closed, time.Time{}
}

// Account is the breaker's account.
func (b *Breaker) Account() string { return b.account }

// Target is the breaker's target.
func (b *Breaker) Target() string { return b.target }

// advisory is the JSON of Advisory.
type advisory struct {
	Account   string    `json:"account"`
	Target    string    `json:"target"`
	State     State     `json:"state"`
	From      State     `json:"from,omitempty"`
	OpenUntil time.Time `json:"open_until,omitzero"`
	Reason    string    `json:"reason,omitempty"`
	Failures  int       `json:"failures"`
	By        string    `json:"by,omitempty"`
	At        time.Time `json:"at"`
}

// Advisory is the JSON body of the breaker advisory
// (tenaz.advisory.breaker.<account>.<target>): account, target, state,
// from, open_until (RFC 3339, absent when closed), reason, failures, by
// (the writing instance) and at. The replica that wrote a transition
// publishes it through Options.Publish.
func Advisory(c Change) []byte {
	data, err := json.Marshal(advisory{
		Account: c.Account, Target: c.Target, State: c.State, From: c.From,
		OpenUntil: c.OpenUntil, Reason: c.Reason, Failures: c.Failures, By: c.By, At: c.At,
	})
	if err != nil { // only strings, ints and times: cannot happen
		return nil
	}
	return data
}
