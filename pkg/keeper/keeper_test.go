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

// The keeper writes to the work queues only: every partition's EVENTS,
// and INTAKE only in a store from before trimming, where it is one. A
// trimmed INTAKE's acks delete nothing, so a keeper message there would
// be a write that keeps nothing.
func TestKeeperWritesOnlyToWorkQueues(t *testing.T) {
	t.Parallel()
	for _, workQueue := range []bool{false, true} {
		name := "trimmed INTAKE"
		if workQueue {
			name = "work-queue INTAKE"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := natstest.Start(t)
			_, js := srv.Conn(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if workQueue {
				intakeWorkQueue(ctx, t, js)
			}
			n, err := streams.Partitions(ctx, js, "")
			if err != nil {
				t.Fatal(err)
			}
			s := names.NewSubjects("").WithPartitions(n)
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
			if workQueue && got == 0 {
				t.Fatal("a work-queue INTAKE: want keeper messages, got none")
			}
			if !workQueue && got != 0 {
				t.Fatalf("a trimmed INTAKE: want no keeper message, got %d", got)
			}
		})
	}
}

// intakeWorkQueue makes INTAKE a work queue, as in a store from before.
func intakeWorkQueue(ctx context.Context, t *testing.T, js jetstream.JetStream) {
	t.Helper()
	ss, err := streams.Streams(streams.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range ss {
		if c.Name != streams.StreamIntake {
			continue
		}
		if err := js.DeleteStream(ctx, c.Name); err != nil {
			t.Fatal(err)
		}
		c.Retention = jetstream.WorkQueuePolicy
		if _, err := js.CreateStream(ctx, c); err != nil {
			t.Fatal(err)
		}
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
