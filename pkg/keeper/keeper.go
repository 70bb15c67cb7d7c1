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
// is freed once. A stream that is not a work queue (a trimmed INTAKE,
// whose acks delete nothing) gets none: there they would be writes that
// keep nothing.
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

// Run publishes a keeper message to each work-queue stream (every
// partition's EVENTS, and INTAKE in a store from before trimming) every
// interval and purges older ones every 10 intervals, until ctx ends.
// Several replicas running it is harmless.
func Run(ctx context.Context, js jetstream.JetStream, s names.Subjects, every time.Duration) {
	var targets []struct{ stream, subject string }
	add := func(stream, subject string) {
		// A stream not there yet (or not readable) is kept, as before.
		if st, err := js.Stream(ctx, stream); err == nil && st.CachedInfo().Config.Retention != jetstream.WorkQueuePolicy {
			return
		}
		targets = append(targets, struct{ stream, subject string }{stream, subject})
	}
	add(s.Stream(names.StreamIntake), Subject(s, "intake"))
	for p := range s.Parts() {
		add(s.EventsStreamOf(p), s.KeepIn(p))
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for n := 0; ; n++ {
		for _, tg := range targets {
			_, _ = js.Publish(ctx, tg.subject, nil)
			if n%10 == 9 {
				if st, err := js.Stream(ctx, tg.stream); err == nil {
					_ = st.Purge(ctx, jetstream.WithPurgeSubject(tg.subject), jetstream.WithPurgeKeep(Keep))
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
