package store

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/streams"
)

// ErrNoStore is Bind's error when the layout is not applied yet and the
// service was told not to apply it.
var ErrNoStore = errors.New("no tenaz streams on this NATS yet: run `tenaz streams apply`, or let a service apply them")

// LayoutOptions is cfg's JetStream layout (streams.*, deadletter.retention
// and max_bytes), as streams.Apply takes it.
func LayoutOptions(cfg *config.Config) streams.Options {
	return streams.Options{Prefix: cfg.Prefix, Replicas: cfg.Streams.Replicas,
		Placement:  streams.Place(cfg.Streams.Cluster, cfg.Streams.Tags),
		DeadMaxAge: cfg.Deadletter.Retention.D(), DeadMaxBytes: cfg.Deadletter.MaxBytes,
		AuditMaxAge: cfg.Audit.Retention.D(),
		AckWait:     cfg.Streams.AckWait.D(), Partitions: cfg.Streams.Partitions}
}

// Bind is every service's first step: it applies cfg's layout (unless
// skip: it then reads the store's layout) and opens the store.
// subj is the subjects of cfg's prefix over the store's partitions.
func Bind(ctx context.Context, js jetstream.JetStream, cfg *config.Config, skip bool, now func() time.Time) (subj names.Subjects, st *Store, err error) {
	var l streams.Layout
	if skip {
		if l, err = streams.StoreLayout(ctx, js, cfg.Prefix); err == nil && l.Partitions == 0 {
			err = ErrNoStore
		}
	} else {
		l, err = streams.Apply(ctx, js, LayoutOptions(cfg))
	}
	if err != nil {
		return names.Subjects{}, nil, err
	}
	subj = names.NewSubjects(cfg.Prefix).WithLayout(l)
	st, err = Open(ctx, js, Options{Retention: cfg.Streams.Retention.D(), Now: now, Layout: l, Prefix: cfg.Prefix})
	if err != nil {
		return names.Subjects{}, nil, err
	}
	return subj, st, nil
}

// Partitions is the store's partition count.
func (s *Store) Partitions() int { return len(s.parts) }
