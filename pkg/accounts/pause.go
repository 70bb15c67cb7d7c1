// Package accounts keeps the operators' pauses of accounts (Pauses), in
// the operators' bucket.
package accounts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/store"
)

// An operator's pause of an account is a record in the operators' bucket.
// Every dispatcher replica watches the pauses (Watch) and reads nothing
// of a paused account until the later of the operator's pause and the
// account's open breakers (Want), so neither undoes the other.

// BucketOps is the operators' bucket (streams/data/kv-ops.json): replay
// jobs, the digest's state, the accounts' pauses ("pause.<account>") and
// the audit of operator actions on accounts and breakers.
const BucketOps = "tenaz_ops"

// PauseForever is the end of a pause until resumed.
var PauseForever = time.Date(2999, 1, 1, 0, 0, 0, 0, time.UTC)

// Pause is an operator's pause of an account's dispatch: while it holds,
// no call of the account is made; its events wait in EVENTS.
type Pause struct {
	Account string `json:"account"`
	// Until ends the pause by itself; zero: until an operator resumes.
	Until time.Time `json:"until,omitzero"`
	// Actor is who paused ("operator:alice"), Reason why, At when.
	Actor  string    `json:"actor"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// Holds reports whether the pause is in force at now.
func (p Pause) Holds(now time.Time) bool { return p.Until.IsZero() || now.Before(p.Until) }

// End is when the pause ends: Until, or PauseForever.
func (p Pause) End() time.Time {
	if p.Until.IsZero() {
		return PauseForever
	}
	return p.Until
}

// Want is until when an account's dispatch must be paused at
// now: the later of the operator's pause p (when there is one, ok, and it
// holds) and breakerUntil, the end of its open breakers' cooldown. Zero:
// it must run.
func Want(p Pause, ok bool, breakerUntil, now time.Time) time.Time {
	var until time.Time
	if ok && p.Holds(now) {
		until = p.End()
	}
	if breakerUntil.After(now) && breakerUntil.After(until) {
		until = breakerUntil
	}
	return until
}

// pauseKey is account's key in the operators' bucket.
func pauseKey(account string) string { return "pause." + account }

// Pauses keeps the operators' pauses in the operators' bucket, for the
// dispatchers to apply.
type Pauses struct {
	kv jetstream.KeyValue
}

// OpenPauses binds the operators' bucket (it must exist: streams.Apply)
// of subj's installation.
func OpenPauses(ctx context.Context, js jetstream.JetStream, subj names.Subjects) (*Pauses, error) {
	kv, err := js.KeyValue(ctx, subj.Bucket(BucketOps))
	if err != nil {
		return nil, fmt.Errorf("accounts: bucket %s: %w", subj.Bucket(BucketOps), err)
	}
	return &Pauses{kv: kv}, nil
}

// Get reads account's pause; ok is false when it has none. rev is the
// pause's revision (0 when it has none).
func (ps *Pauses) Get(ctx context.Context, account string) (p Pause, ok bool, rev uint64, err error) {
	e, err := ps.kv.Get(ctx, pauseKey(account))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Pause{}, false, 0, nil
	}
	if err != nil {
		return Pause{}, false, 0, fmt.Errorf("accounts: pause of %s: %w", account, err)
	}
	if err := json.Unmarshal(e.Value(), &p); err != nil {
		return Pause{}, false, e.Revision(), fmt.Errorf("accounts: pause of %s: %w", account, err)
	}
	return p, true, e.Revision(), nil
}

// List returns every pause in the bucket, held or expired.
func (ps *Pauses) List(ctx context.Context) ([]Pause, error) {
	keys, err := ps.kv.ListKeysFiltered(ctx, pauseKey("*"))
	if err != nil {
		return nil, fmt.Errorf("accounts: listing pauses: %w", err)
	}
	var out []Pause
	for k := range keys.Keys() {
		account := k[len(pauseKey("")):]
		p, ok, _, err := ps.Get(ctx, account)
		if err != nil {
			_ = keys.Stop()
			return nil, err
		}
		if ok {
			out = append(out, p)
		}
	}
	return out, nil
}

// Set stores p as its account's pause (replacing any).
func (ps *Pauses) Set(ctx context.Context, p Pause) error {
	if err := names.ValidateAccount(p.Account); err != nil {
		return err
	}
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	if _, err := ps.kv.Put(ctx, pauseKey(p.Account), b); err != nil {
		return fmt.Errorf("accounts: pausing %s: %w", p.Account, err)
	}
	return nil
}

// ErrPauseChanged is Clear's refusal of a pause written (or cleared)
// since the revision it was given.
var ErrPauseChanged = errors.New("accounts: the pause changed since it was read")

// Clear removes account's pause. rev, when not 0, is the revision of the
// pause the caller read (Get): a pause written or cleared since is left
// as it is and Clear returns ErrPauseChanged, so that a resume never ends
// a newer pause it did not see.
func (ps *Pauses) Clear(ctx context.Context, account string, rev uint64) error {
	var opts []jetstream.KVDeleteOpt
	if rev != 0 {
		opts = append(opts, jetstream.LastRevision(rev))
	}
	err := ps.kv.Delete(ctx, pauseKey(account), opts...)
	if rev != 0 && (errors.Is(err, jetstream.ErrKeyRevisionMismatch) || store.IsWrongSequence(err)) {
		return fmt.Errorf("resuming %s: %w", account, ErrPauseChanged)
	}
	if err != nil {
		return fmt.Errorf("accounts: resuming %s: %w", account, err)
	}
	return nil
}

// Watch calls fn with each account's pause as it is now, then with each
// change (ok false: resumed), until stop. It returns once the pauses held
// now were passed to fn, or fails when ctx ends first: a NATS user that
// may not watch the pauses gets no answer from the server, only ctx's end.
func (ps *Pauses) Watch(ctx context.Context, fn func(account string, p Pause, ok bool)) (stop func(), err error) {
	// The watch lives until stop, not ctx: nats.go ends a watch with the
	// context it was created with.
	life, cancel := context.WithCancel(context.Background())
	type started struct {
		w   jetstream.KeyWatcher
		err error
	}
	got := make(chan started, 1)
	go func() {
		w, err := ps.kv.Watch(life, pauseKey("*"))
		got <- started{w, err}
	}()
	fail := func(err error) (func(), error) {
		cancel()
		return nil, fmt.Errorf("accounts: watching the pauses (pause.* in %s): %w", BucketOps, err)
	}
	var w jetstream.KeyWatcher
	select {
	case r := <-got:
		if r.err != nil {
			return fail(r.err)
		}
		w = r.w
	case <-ctx.Done():
		return fail(ctx.Err())
	}
	apply := func(e jetstream.KeyValueEntry) {
		account := e.Key()[len(pauseKey("")):]
		var p Pause
		if e.Operation() != jetstream.KeyValuePut || json.Unmarshal(e.Value(), &p) != nil {
			fn(account, Pause{}, false)
			return
		}
		fn(account, p, true)
	}
	for held := true; held; {
		select {
		case e, open := <-w.Updates():
			switch {
			case !open:
				return fail(errors.New("the watch ended"))
			case e == nil:
				held = false
			default:
				apply(e)
			}
		case <-ctx.Done():
			return fail(ctx.Err())
		}
	}
	go func() {
		defer func() { _ = w.Stop() }()
		for e := range w.Updates() {
			if e != nil {
				apply(e)
			}
		}
	}()
	return cancel, nil
}

// PauseBook is the operators' pauses as a replica last heard them
// (Follow). Its zero value is empty and ready.
type PauseBook struct {
	mu sync.Mutex
	m  map[string]Pause
}

// Get is account's pause as last heard; ok is false when it has none.
func (b *PauseBook) Get(account string) (p Pause, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p, ok = b.m[account]
	return p, ok
}

// Holding returns the accounts whose pause holds at now, sorted.
func (b *PauseBook) Holding(now time.Time) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for account, p := range b.m {
		if p.Holds(now) {
			out = append(out, account)
		}
	}
	slices.Sort(out)
	return out
}

func (b *PauseBook) set(account string, p Pause, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !ok {
		delete(b.m, account)
		return
	}
	if b.m == nil {
		b.m = map[string]Pause{}
	}
	b.m[account] = p
}

// FollowWait bounds a service's wait at its start for the pauses held now
// (Follow): a NATS user that may not watch them gets no answer at all.
const FollowWait = 10 * time.Second

// Follow keeps book current with the pauses in the bucket until stop, and
// calls changed (when not nil) with the account of each pause it hears,
// those held now included. It returns once the pauses held now are in
// book, or fails when ctx ends first (Watch).
func (ps *Pauses) Follow(ctx context.Context, book *PauseBook, changed func(account string)) (stop func(), err error) {
	return ps.Watch(ctx, func(account string, p Pause, ok bool) {
		book.set(account, p, ok)
		if changed != nil {
			changed(account)
		}
	})
}
