package owner

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/names"
)

// DefaultExpiry is how long a replica with the default heartbeat may go
// unheard before the others take it for dead.
const DefaultExpiry = expiryBeats * DefaultHeartbeat

// Held returns the accounts whose lease this replica holds, sorted: the
// accounts it owns, from before its first pull until its last call
// returned.
func (g *Group) Held() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []string
	for a, l := range g.leases {
		if l.holder == g.self {
			out = append(out, a)
		}
	}
	slices.Sort(out)
	return out
}

// Replica is one replica's heartbeat as read from the bucket.
type Replica struct {
	// Name is the replica's name in the bucket (its Instance).
	Name string
	// Heard is when its last heartbeat was stored (the server's clock).
	Heard time.Time
	// Live says the heartbeat is younger than the expiry Read was given.
	Live bool
}

// View is the bucket as one read saw it: every replica that heartbeats (a
// dead one stays listed, not live, for a while), every account lease, and
// the concurrency each "auto" account's owner last learned.
type View struct {
	// Replicas, sorted by name.
	Replicas []Replica
	// Leases maps an account to the replica holding its lease: its owner.
	Leases map[string]string
	// Learned maps an account with concurrency "auto" to the limit its
	// owner last stored (l.<account>: at most every few seconds, and when
	// it hands the account over).
	Learned map[string]int
}

// learnedPrefix is the key prefix of a learned concurrency (written by
// the dispatcher).
const learnedPrefix = "l."

// Read reads the owners bucket of the installation of prefix once,
// without joining: for a screen or a tool that shows who owns what. A
// replica is live when its last heartbeat is younger than expiry
// (DefaultExpiry when zero), the rule the replicas themselves apply. The
// bucket must exist (streams.Apply creates it).
func Read(ctx context.Context, js jetstream.JetStream, prefix string, expiry time.Duration) (View, error) {
	if expiry <= 0 {
		expiry = DefaultExpiry
	}
	kv, err := js.KeyValue(ctx, names.NewSubjects(prefix).Bucket(names.BucketOwners))
	if err != nil {
		return View{}, fmt.Errorf("owner: %w", err)
	}
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return View{}, fmt.Errorf("owner: watch: %w", err)
	}
	defer func() { _ = w.Stop() }()
	v := View{Leases: map[string]string{}, Learned: map[string]int{}}
	now := time.Now()
	for {
		var e jetstream.KeyValueEntry
		select {
		case <-ctx.Done():
			return View{}, fmt.Errorf("owner: reading the bucket: %w", context.Cause(ctx))
		case e = <-w.Updates():
		}
		if e == nil {
			break // the initial values are all in
		}
		switch k := e.Key(); {
		case strings.HasPrefix(k, memberPrefix):
			at := e.Created()
			v.Replicas = append(v.Replicas, Replica{Name: strings.TrimPrefix(k, memberPrefix), Heard: at, Live: now.Sub(at) < expiry})
		case strings.HasPrefix(k, leasePrefix):
			v.Leases[strings.TrimPrefix(k, leasePrefix)] = string(e.Value())
		case strings.HasPrefix(k, learnedPrefix):
			if n, err := strconv.Atoi(string(e.Value())); err == nil && n > 0 {
				v.Learned[strings.TrimPrefix(k, learnedPrefix)] = n
			}
		}
	}
	slices.SortFunc(v.Replicas, func(a, b Replica) int { return strings.Compare(a.Name, b.Name) })
	return v, nil
}
