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

// FiredParking tells the safety net of a parking schedule (the server's
// copy of it, fired at its time) from the copy a wake publishes: only the
// first counts as a lost wake (the dispatcher logs it; make chaos counts
// it).
func TestFiredParkingTellsTheSafetyNetFromAWake(t *testing.T) {
	t.Parallel()
	ctx, js, q := start(t)
	subj := names.NewSubjects("")
	park := func(key string, at time.Time) event.Envelope {
		t.Helper()
		env, err := event.New(event.Fields{Account: "acme", Kind: "order.create", IdempotencyKey: key}, []byte(`{}`), "", "", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Park(ctx, env, at); err != nil {
			t.Fatal(err)
		}
		return env
	}
	woken := park("woken", time.Now().Add(time.Hour))
	if scheduled, err := q.Wake(ctx, woken.Account, woken.ID); err != nil || !scheduled {
		t.Fatalf("Wake = %v, %v; want it fired", scheduled, err)
	}
	fired := park("fired", time.Now()) // due at once: the server fires it within a second or two

	stream, err := js.Stream(ctx, subj.EventsStream("acme"))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	c, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subj.EventsOf("acme")}})
	if err != nil {
		t.Fatal(err)
	}
	for len(got) < 2 {
		m, err := c.Next(jetstream.FetchMaxWait(10 * time.Second)) // the schedule fires within a second or two
		if err != nil {
			t.Fatalf("reading the dispatch messages: %v (got %v)", err, got)
		}
		env, err := event.Unmarshal(m.Data())
		if err != nil {
			t.Fatal(err)
		}
		got[env.ID] = queue.FiredParking(m.Headers())
	}
	if !got[fired.ID] || got[woken.ID] {
		t.Fatalf("FiredParking: want true for the schedule the server fired, false for the wake's copy; got fired %v, woken %v", got[fired.ID], got[woken.ID])
	}
}
