// Package lane orders events that share an ordering key: each is delivered
// only after its predecessor (the one accepted before it with the same
// account and key) is finished — done, dead, in manual review or
// cancelled — so a failing event holds its lane until it is done or dead,
// and different keys run in parallel. A cancelled event holds nobody: the
// one behind it waits for what it waited for.
//
// The lane itself is one KV entry per account + key (bucket tenaz_lanes)
// holding its tail; each event record points back to its predecessor
// (After) and forward to its successor (Next). Ingest appends (Append),
// the dispatcher checks the predecessor before claiming (Order.Blocker)
// and parks a waiting event on its own server-side schedule; whoever
// finishes an event wakes its successor (Order.Advance), and the lane
// entry is removed when its last event finishes (Release).
//
//	prev, err := lanes.Append(ctx, "acme", "order-7", id)
package lane

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/store"
)

// Bucket is the KV bucket of the lanes.
const Bucket = "tenaz_lanes"

// Lanes appends to and releases lanes.
type Lanes struct{ kv jetstream.KeyValue }

// Open binds the bucket of the installation of prefix (it must exist:
// streams.Apply).
func Open(ctx context.Context, js jetstream.JetStream, prefix string) (*Lanes, error) {
	bucket := names.NewSubjects(prefix).Bucket(Bucket)
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("lane: bucket %s: %w", bucket, err)
	}
	return &Lanes{kv: kv}, nil
}

// Recent is how many of a lane's last appends an Append recognises as
// its own again (a retried accept): one retried after more later events
// joined its lane would join it a second time.
const Recent = 16

type entry struct {
	Tail string `json:"tail"`
	Prev string `json:"prev,omitempty"` // the tail's predecessor, for a retried Append
	// Earlier are the appends before the tail's, newest first, up to
	// Recent-1 of them: an accept retried after later events joined (ingest
	// died between joining and creating the record, or two replicas took
	// the same submission) finds its predecessor here. Joining again would
	// put it after its own successor, each waiting for the other for ever.
	Earlier []link `json:"earlier,omitempty"`
}

// link is an append: id joined after prev.
type link struct {
	ID   string `json:"id"`
	Prev string `json:"prev,omitempty"`
}

// prevOf is id's predecessor when id is among the lane's recent appends.
func (e entry) prevOf(id string) (string, bool) {
	if e.Tail == id {
		return e.Prev, true
	}
	for _, l := range e.Earlier {
		if l.ID == id {
			return l.Prev, true
		}
	}
	return "", false
}

// after is the entry with id appended to it.
func (e entry) after(id string) entry {
	earlier := make([]link, 0, Recent-1)
	earlier = append(earlier, link{ID: e.Tail, Prev: e.Prev})
	earlier = append(earlier, e.Earlier[:min(len(e.Earlier), Recent-2)]...)
	return entry{Tail: id, Prev: e.Tail, Earlier: earlier}
}

// Key is the KV key of an account's lane for an ordering key.
func Key(account, orderingKey string) string {
	sum := sha256.Sum256([]byte(orderingKey))
	return account + "." + hex.EncodeToString(sum[:16])
}

// Append makes id the tail of the lane and returns its predecessor ("" if
// the lane was empty). Appending an id among the lane's Recent last
// appends again (a retried accept) returns the same predecessor and
// changes nothing.
func (l *Lanes) Append(ctx context.Context, account, orderingKey, id string) (string, error) {
	if err := names.ValidateAccount(account); err != nil {
		return "", err
	}
	key := Key(account, orderingKey)
	for range 64 {
		e, err := l.kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			b, _ := json.Marshal(entry{Tail: id})
			if _, err := l.kv.Create(ctx, key, b); err == nil {
				return "", nil
			} else if !store.IsKeyTaken(err) {
				return "", fmt.Errorf("lane: append %s: %w", key, err)
			}
			continue
		}
		if err != nil {
			return "", fmt.Errorf("lane: append %s: %w", key, err)
		}
		var cur entry
		_ = json.Unmarshal(e.Value(), &cur)
		if prev, ok := cur.prevOf(id); ok {
			return prev, nil
		}
		b, _ := json.Marshal(cur.after(id))
		if _, err := l.kv.Update(ctx, key, b, e.Revision()); err == nil {
			return cur.Tail, nil
		} else if !store.IsKeyTaken(err) {
			return "", fmt.Errorf("lane: append %s: %w", key, err)
		}
	}
	return "", fmt.Errorf("lane: append %s: too many conflicting writers", key)
}

// Release removes the lane if id is still its tail: the lane's last event
// has finished. A concurrent Append wins; then the appended event finds id
// finished and goes ahead.
func (l *Lanes) Release(ctx context.Context, account, orderingKey, id string) error {
	key := Key(account, orderingKey)
	e, err := l.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("lane: release %s: %w", key, err)
	}
	var cur entry
	_ = json.Unmarshal(e.Value(), &cur)
	if cur.Tail != id {
		return nil
	}
	if err := l.kv.Purge(ctx, key, jetstream.LastRevision(e.Revision())); err != nil && !store.IsWrongSequence(err) {
		return fmt.Errorf("lane: release %s: %w", key, err)
	}
	return nil
}

// Tail returns the lane's current tail ("" when the lane is empty).
func (l *Lanes) Tail(ctx context.Context, account, orderingKey string) (string, error) {
	e, err := l.kv.Get(ctx, Key(account, orderingKey))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	var cur entry
	_ = json.Unmarshal(e.Value(), &cur)
	return cur.Tail, nil
}
