package queue_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/queue"
)

// A timer set again under the id of one that has fired is set: the
// server takes the second publish for a duplicate of the first (within
// its duplicate window) though the first's schedule is gone, and the
// event waited with no timer. (A repoll whose record write failed reused
// its timer's id at the next poll; two copies of one timer put off to the
// same second did too, once the other copy's firing had purged the
// first's schedule: events stuck polling in the crash suite.) The same
// holds for a dispatch schedule.
func TestScheduleSetAgainUnderAFiredOnesID(t *testing.T) {
	t.Parallel()
	ctx, js, q := start(t)
	subj := names.NewSubjects("")
	for i, set := range map[string]func(env event.Envelope, at time.Time, id string) error{
		"timer": func(env event.Envelope, at time.Time, id string) error {
			return q.Timer(ctx, env, at, queue.TimerPoll, id)
		},
		"schedule": func(env event.Envelope, at time.Time, id string) error { return q.ScheduleAt(ctx, env, at, id) },
	} {
		env, err := event.New(event.Fields{Account: "acme", Kind: "order.create", IdempotencyKey: i}, []byte(`{}`), "", "", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		has := func() bool {
			ok, err := q.HasSchedule(ctx, env.Account, env.ID)
			if err != nil {
				t.Fatal(err)
			}
			return ok
		}
		id := fmt.Sprintf("%s/poll/3/1", env.ID)
		if err := set(env, time.Now(), id); err != nil {
			t.Fatal(err)
		}
		natstest.Eventually(t, 5*time.Second, func() bool { return !has() }, "%s: want the first to fire", i)
		hour := time.Now().Add(time.Hour)
		if err := set(env, hour, id); err != nil {
			t.Fatal(err)
		}
		if !has() {
			t.Fatalf("%s: set again under the fired one's id, it was dropped: nothing waits", i)
		}
		// A duplicate while the first still waits changes nothing.
		if err := set(env, time.Now().Add(2*time.Hour), id); err != nil {
			t.Fatal(err)
		}
		stream, err := js.Stream(ctx, subj.EventsStream(env.Account))
		if err != nil {
			t.Fatal(err)
		}
		m, err := stream.GetLastMsgForSubject(ctx, subj.Schedule(env.Account, env.ID))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := m.Header.Get("Nats-Schedule"), "@at "+queue.DueTime(hour).Format(time.RFC3339); got != want {
			t.Fatalf("%s: a duplicate of a waiting schedule replaced it: %q, want %q", i, got, want)
		}
	}
}
