package keeper_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/keeper"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/streams"
)

// The keeper writes to the work queues only. A new store has none (INTAKE
// and EVENTS are trimmed: their acks delete nothing, so a keeper message
// would be a write that keeps nothing). A store made before EVENTS was
// trimmed has work-queue EVENTS, and one made before INTAKE was trimmed
// also a work-queue INTAKE: the server cannot change either.
func TestKeeperWritesOnlyToWorkQueues(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name               string
		intakeWQ, eventsWQ bool
	}{
		{"new store", false, false},
		{"work-queue EVENTS", false, true},
		{"work-queue INTAKE and EVENTS", true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := natstest.Start(t)
			_, js := srv.Conn(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			n, err := streams.Partitions(ctx, js, "")
			if err != nil {
				t.Fatal(err)
			}
			s := names.NewSubjects("").WithPartitions(n)
			if c.intakeWQ {
				workQueue(ctx, t, js, names.StreamIntake)
			}
			if c.eventsWQ {
				for p := range s.Parts() {
					workQueue(ctx, t, js, s.EventsStreamOf(p))
				}
			}
			if !c.intakeWQ && !c.eventsWQ {
				if got := keeper.Targets(ctx, js, s); len(got) != 0 {
					t.Fatalf("a new store: want no keeper target, got %v", got)
				}
				return
			}
			run, stop := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { defer close(done); keeper.Run(run, js, s, 10*time.Millisecond) }()
			defer func() { stop(); <-done }()

			// INTAKE comes first in every round: once each partition's
			// EVENTS has a keeper message, INTAKE has had its chance.
			for p := range s.Parts() {
				natstest.Eventually(t, 10*time.Second, func() bool { return kept(ctx, t, js, s.EventsStreamOf(p), s.KeepIn(p)) > 0 },
					"a keeper message in %s", s.EventsStreamOf(p))
			}
			got := kept(ctx, t, js, s.Stream(names.StreamIntake), keeper.Subject(s, "intake"))
			if c.intakeWQ && got == 0 {
				t.Fatal("a work-queue INTAKE: want keeper messages, got none")
			}
			if !c.intakeWQ && got != 0 {
				t.Fatalf("a trimmed INTAKE: want no keeper message, got %d", got)
			}
		})
	}
}

// workQueue makes the stream named name a work queue, as in a store from
// before.
func workQueue(ctx context.Context, t *testing.T, js jetstream.JetStream, name string) {
	t.Helper()
	st, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	c := st.CachedInfo().Config
	if err := js.DeleteStream(ctx, name); err != nil {
		t.Fatal(err)
	}
	c.Retention = jetstream.WorkQueuePolicy
	if _, err := js.CreateStream(ctx, c); err != nil {
		t.Fatal(err)
	}
}

// kept is how many messages stream holds on subject.
func kept(ctx context.Context, t *testing.T, js jetstream.JetStream, stream, subject string) uint64 {
	t.Helper()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects[subject]
}
