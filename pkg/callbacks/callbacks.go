// Package callbacks is the webhook receiver's memory in the
// tenaz_callbacks bucket: which event a provider's reference belongs to
// (written by the dispatcher when a target accepts work it will answer by
// webhook). A reference is held per account and target, by the first
// event that records it: another event naming the same reference is a
// conflict, never a re-point, and no account's reference resolves to
// another account's event. Every key carries a per-key TTL, so the bucket
// never grows past the events that can still be answered. Which
// webhook-ids were applied is in each event's own history, written with
// the result; the bucket also holds which event each was applied to, for
// as long as its signature can be replayed, so that a copy sent to
// another account's URL is known (HoldWebhook).
//
//	x, _ := callbacks.Open(ctx, js)
//	err := x.PutRef(ctx, "acme", "bureau_a", "ref_7", rec.ID, sla+retention)
//	id, err := x.Lookup(ctx, "acme", "bureau_a", "ref_7", nil)
package callbacks

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/store"
)

var (
	// ErrNotFound is returned by Lookup for a reference nobody recorded.
	ErrNotFound = errors.New("callbacks: unknown reference")
	// ErrConflict is wrapped by the *ConflictError of PutRef.
	ErrConflict = errors.New("callbacks: reference held by another event")
	// ErrAmbiguous is returned by Lookup without an account when events of
	// more than one account hold the reference.
	ErrAmbiguous = errors.New("callbacks: reference held in more than one account")
)

// ConflictError says which event already holds a reference.
type ConflictError struct {
	Holder string // the event id the reference stays with
	// Legacy: the holder was recorded in the legacy layout, which has no
	// account, so the holder may be another account's event.
	Legacy bool
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("%v: %s", ErrConflict, e.Holder)
}

func (e *ConflictError) Unwrap() error { return ErrConflict }

// minTTL is the shortest per-key TTL the server accepts.
const minTTL = time.Second

// Index reads and writes the tenaz_callbacks bucket.
type Index struct{ kv jetstream.KeyValue }

// Open binds to the bucket of the installation of prefix (streams.Apply
// creates it).
func Open(ctx context.Context, js jetstream.JetStream, prefix string) (*Index, error) {
	bucket := names.NewSubjects(prefix).Bucket(names.BucketCallbacks)
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("callbacks: open %s: %w", bucket, err)
	}
	return &Index{kv: kv}, nil
}

// hash turns an outside string (any bytes, any length) into a key token.
func hash(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:16])
}

// refKey is ref.<target>.<account>.<hash of ref>. Account and target are
// validated tokens; the account sits after the target so that one filter
// (ref.<target>.*.<hash>) finds every account holding a reference.
func refKey(account, target, ref string) string {
	return "ref." + target + "." + account + "." + hash(ref)
}

// refAccount is the account of a refKey.
func refAccount(key string) string {
	parts := strings.Split(key, ".")
	if len(parts) != 4 {
		return ""
	}
	return parts[2]
}

// legacyKey is the layout before references were per account,
// ref.<target>.<hash>. Such keys are still read, and still count as held,
// until their TTL (the callback SLA plus retention) ends them.
func legacyKey(target, ref string) string { return "ref." + target + "." + hash(ref) }

// PutRef records that account's reference ref at target belongs to event
// id, for ttl. Recording the same pair again is not an error. When another
// event holds the reference (in this layout or the legacy one), the
// mapping is left as it is and the error is a *ConflictError naming the
// holder.
func (x *Index) PutRef(ctx context.Context, account, target, ref, id string, ttl time.Duration) error {
	if e, err := x.kv.Get(ctx, legacyKey(target, ref)); err == nil && string(e.Value()) != id {
		return &ConflictError{Holder: string(e.Value()), Legacy: true}
	} else if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("callbacks: record reference of %s: %w", id, err)
	}
	holder, err := x.hold(ctx, refKey(account, target, ref), id, ttl)
	if err != nil {
		return fmt.Errorf("callbacks: record reference of %s: %w", id, err)
	}
	if holder != "" {
		return &ConflictError{Holder: holder}
	}
	return nil
}

// HoldWebhook records that target's webhook whose content is content
// (its id and body: the same for its copies and the provider's retries,
// which sign it again with another timestamp) was applied to event id,
// for ttl (at least as long as its signature stays valid), and returns
// "", or the other event it was applied to before, left as it is. Only a
// copy or a retry of the message has the same content, so one applied to
// another event is one sent to another URL: the account in
// /v1/callbacks/{target}/{account} is not signed. Not the webhook-id
// alone: a provider that numbers its messages per tenant would send two
// accounts' different messages under one id.
func (x *Index) HoldWebhook(ctx context.Context, target, content, id string, ttl time.Duration) (string, error) {
	holder, err := x.hold(ctx, "wh."+target+"."+hash(content), id, ttl)
	if err != nil {
		return "", fmt.Errorf("callbacks: record webhook of %s: %w", id, err)
	}
	return holder, nil
}

// hold creates key with value id for ttl, and returns "", or the other
// value key holds.
func (x *Index) hold(ctx context.Context, key, id string, ttl time.Duration) (string, error) {
	// Two tries: the holder's key may expire between the Create and the Get.
	for range 2 {
		_, err := x.kv.Create(ctx, key, []byte(id), jetstream.KeyTTL(max(ttl, minTTL)))
		if err == nil {
			return "", nil
		}
		if !store.IsKeyTaken(err) {
			return "", err
		}
		e, err := x.kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return "", err
		}
		if string(e.Value()) == id {
			return "", nil
		}
		return string(e.Value()), nil
	}
	return "", errors.New("the key changed twice while it was written")
}

// Lookup returns the event id that holds account's reference ref at
// target. With account "" (a webhook that does not say its account) it is
// the one account's event that holds it, or ErrAmbiguous when several do;
// the accounts apart says are not counted (those such a webhook cannot
// complete: nil, none). A reference recorded in the legacy layout
// carries no account: its event is returned for any account, and the
// caller must check the event's account.
func (x *Index) Lookup(ctx context.Context, account, target, ref string, apart func(account string) bool) (string, error) {
	var id string
	var err error
	if account != "" {
		id, err = x.get(ctx, refKey(account, target, ref))
	} else {
		id, err = x.only(ctx, "ref."+target+".*."+hash(ref), apart)
	}
	if errors.Is(err, ErrNotFound) {
		return x.get(ctx, legacyKey(target, ref))
	}
	return id, err
}

// Await returns once account's reference ref at target is recorded (at
// once if it is), or with ctx's error; with account "" once any account's
// is but those apart says (as for Lookup). A provider may call back
// before its answer to the call reaches tenaz, and so before the
// dispatcher records the reference the webhook names. Look the reference
// up again after it.
func (x *Index) Await(ctx context.Context, account, target, ref string, apart func(account string) bool) error {
	filter := refKey(account, target, ref)
	if account == "" {
		filter = "ref." + target + ".*." + hash(ref)
	}
	w, err := x.kv.Watch(ctx, filter, jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("callbacks: await reference: %w", err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("callbacks: await reference: the watch ended")
			}
			if e != nil && (account != "" || apart == nil || !apart(refAccount(e.Key()))) {
				return nil
			}
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

func (x *Index) get(ctx context.Context, key string) (string, error) {
	e, err := x.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return "", ErrNotFound
	}
	if err != nil {
		return "", fmt.Errorf("callbacks: look up reference: %w", err)
	}
	return string(e.Value()), nil
}

// only returns the value of the one key matching filter, of the
// accounts apart does not say (any, when nil).
func (x *Index) only(ctx context.Context, filter string, apart func(account string) bool) (string, error) {
	l, err := x.kv.ListKeysFiltered(ctx, filter)
	if err != nil {
		return "", fmt.Errorf("callbacks: look up reference: %w", err)
	}
	keys := map[string]bool{} // a lister may report a key twice
	for k := range l.Keys() {
		if apart == nil || !apart(refAccount(k)) {
			keys[k] = true
		}
	}
	_ = l.Stop()
	switch len(keys) {
	case 0:
		return "", ErrNotFound
	case 1:
		for k := range keys {
			return x.get(ctx, k)
		}
	}
	return "", fmt.Errorf("%w (%d accounts)", ErrAmbiguous, len(keys))
}
