// Package callbacks is the webhook receiver's memory in the
// tenaz_callbacks bucket: which event a provider's reference belongs to
// (written by the dispatcher when a target accepts work it will answer by
// webhook). Every key carries a per-key TTL, so the bucket never grows
// past the events that can still be answered. (Which webhook-ids were
// applied is in each event's own history, written with the result.)
//
//	x, _ := callbacks.Open(ctx, js)
//	_ = x.PutRef(ctx, "bureau_a", "ref_7", rec.ID, sla+retention)
//	id, _, err := x.Lookup(ctx, "bureau_a", "ref_7")
package callbacks

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/tenaz"
)

// ErrNotFound is returned by Lookup for a reference nobody recorded.
var ErrNotFound = errors.New("callbacks: unknown reference")

// minTTL is the shortest per-key TTL the server accepts.
const minTTL = time.Second

// Index reads and writes the tenaz_callbacks bucket.
type Index struct{ kv jetstream.KeyValue }

// Open binds to the bucket (streams.Apply creates it).
func Open(ctx context.Context, js jetstream.JetStream) (*Index, error) {
	kv, err := js.KeyValue(ctx, tenaz.BucketCallbacks)
	if err != nil {
		return nil, fmt.Errorf("callbacks: open %s: %w", tenaz.BucketCallbacks, err)
	}
	return &Index{kv: kv}, nil
}

// key hashes an outside string (any bytes, any length) into a key token.
func key(kind, target, s string) string {
	h := sha256.Sum256([]byte(s))
	return kind + "." + target + "." + hex.EncodeToString(h[:16])
}

// PutRef records that target's reference ref belongs to event id, for ttl.
// Recording the same pair again is not an error.
func (x *Index) PutRef(ctx context.Context, target, ref, id string, ttl time.Duration) error {
	_, err := x.kv.Create(ctx, key("ref", target, ref), []byte(id), jetstream.KeyTTL(max(ttl, minTTL)))
	if errors.Is(err, jetstream.ErrKeyExists) {
		_, err = x.kv.Put(ctx, key("ref", target, ref), []byte(id))
	}
	if err != nil {
		return fmt.Errorf("callbacks: record reference of %s: %w", id, err)
	}
	return nil
}

// Lookup returns the event id of target's reference ref.
func (x *Index) Lookup(ctx context.Context, target, ref string) (string, error) {
	e, err := x.kv.Get(ctx, key("ref", target, ref))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return "", ErrNotFound
	}
	if err != nil {
		return "", fmt.Errorf("callbacks: look up reference: %w", err)
	}
	return string(e.Value()), nil
}
