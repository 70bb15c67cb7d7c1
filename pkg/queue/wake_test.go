package queue_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/queue"
	"github.com/tenaz/tenaz/streams"
)

// Wake fires a parking schedule early, and only a parking one: a retry
// schedule on the same subject keeps its time. (Purging the subject lost a
// retry schedule that replaced a fired parking one: events stuck retrying.)
func TestWakeLeavesRetryScheduleAlone(t *testing.T) {
	t.Parallel()
	ctx, js, q := start(t)
	subj := names.NewSubjects("")
	env, err := event.New(event.Fields{Account: "acme", Kind: "order.create", IdempotencyKey: "k"}, []byte(`{}`), "", "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(ctx, subj.EventsStream(env.Account))
	if err != nil {
		t.Fatal(err)
	}
	events := func() uint64 {
		info, err := stream.Info(ctx, jetstream.WithSubjectFilter(subj.EventsOf(env.Account)))
		if err != nil {
			t.Fatal(err)
		}
		var n uint64
		for _, c := range info.State.Subjects {
			n += c
		}
		return n
	}
	wake := func(want bool) {
		t.Helper()
		if scheduled, err := q.Wake(ctx, env.Account, env.ID); err != nil || scheduled != want {
			t.Fatalf("Wake = %v, %v; want scheduled %v", scheduled, err, want)
		}
	}

	wake(false) // nothing parked, nothing scheduled
	if err := q.ScheduleAt(ctx, env, time.Now().Add(time.Hour), ""); err != nil {
		t.Fatal(err)
	}
	wake(true)
	if _, err := stream.GetLastMsgForSubject(ctx, subj.Schedule(env.Account, env.ID)); err != nil {
		t.Fatalf("a retry schedule must survive Wake, got %v", err)
	}
	if n := events(); n != 0 {
		t.Fatalf("Wake must not fire a retry schedule early, got %d event messages", n)
	}

	if err := q.Park(ctx, env, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	wake(true)
	if _, err := stream.GetLastMsgForSubject(ctx, subj.Schedule(env.Account, env.ID)); err == nil {
		t.Fatal("a fired parking schedule must be removed")
	}
	if n := events(); n != 1 {
		t.Fatalf("Wake must publish the parked event once, got %d event messages", n)
	}
}

// start runs a nats-server with tenaz's streams, and a Queue on it; ctx
// ends with the test, 30 s at most.
func start(t *testing.T) (context.Context, jetstream.JetStream, *queue.Queue) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	_, js := natstest.Start(t).Conn(t)
	if _, err := streams.Apply(ctx, js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	return ctx, js, queue.New(js, names.NewSubjects(""))
}
