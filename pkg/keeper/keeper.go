// Package keeper keeps the work-queue streams (INTAKE, EVENTS) from
// re-creating their last block file on nearly every ack.
//
// Measured with nats-server 2.15: when an ack empties a file-store message
// block, the server deletes the block file, and if it was the last block
// it opens a new one and writes a tombstone. A work queue that is kept
// near empty — tenaz's normal state, since every stage keeps up — does that
// on almost every ack: in `make bench` it was ~30% of all CPU (openat and
// unlinkat). A keeper message published once a second on a subject no
// consumer reads (<p>.keep.intake, <p>.keep.events) keeps the current last
// block non-empty, so acks become cheap in-place deletes; older keeper
// messages are purged (keeping the last few) so the rest of each old block
// is freed once. A stream that is not a work queue (a trimmed INTAKE or
// EVENTS, whose acks delete nothing: a new store's) gets none: there they
// would be writes that keep nothing.
//
//	go keeper.Run(ctx, js, names.NewSubjects(prefix), time.Second)
package keeper

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/names"
)

// Keep is how many recent keeper messages survive a purge.
const Keep = 4

// Subject is the keeper subject of a stream ("intake" or "events").
func Subject(s names.Subjects, stream string) string { return s.Prefix + ".keep." + stream }

// Target is a work-queue stream the keeper writes to, and its keeper
// subject.
type Target struct{ Stream, Subject string }

// Targets are the work queues of a store: INTAKE and every partition's
// EVENTS in a store from before trimming (a new store has none: both are
// trimmed). A stream not there yet (or not readable) is kept, as before.
func Targets(ctx context.Context, js jetstream.JetStream, s names.Subjects) []Target {
	var out []Target
	add := func(stream, subject string) {
		if st, err := js.Stream(ctx, stream); err == nil && st.CachedInfo().Config.Retention != jetstream.WorkQueuePolicy {
			return
		}
		out = append(out, Target{stream, subject})
	}
	add(s.Stream(names.StreamIntake), Subject(s, "intake"))
	for p := range s.Parts() {
		add(s.EventsStreamOf(p), s.KeepIn(p))
	}
	return out
}

// Run publishes a keeper message to each of the store's Targets every
// interval and purges older ones every 10 intervals, until ctx ends; with
// no target it returns at once. Several replicas running it is harmless.
func Run(ctx context.Context, js jetstream.JetStream, s names.Subjects, every time.Duration) {
	targets := Targets(ctx, js, s)
	if len(targets) == 0 {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for n := 0; ; n++ {
		for _, tg := range targets {
			_, _ = js.Publish(ctx, tg.Subject, nil)
			if n%10 == 9 {
				if st, err := js.Stream(ctx, tg.Stream); err == nil {
					_ = st.Purge(ctx, jetstream.WithPurgeSubject(tg.Subject), jetstream.WithPurgeKeep(Keep))
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
