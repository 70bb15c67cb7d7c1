package dispatcher

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/servicetest"
)

// wake fires a parking schedule early, and only a parking one: a retry
// schedule on the same subject keeps its time. (Purging the subject lost a
// retry schedule that replaced a fired parking one: events stuck retrying.)
func TestWakeLeavesRetryScheduleAlone(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	nc, _ := srv.Conn(t)
	cfg := servicetest.Config(t, `
targets: {erp: {url: "http://127.0.0.1:1/x"}}
kinds: {order.create: {target: erp}}
`, nil)
	s, err := New(Options{Conn: nc, Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	servicetest.Run(t, ctx, s)
	env, err := event.New(event.Fields{Account: "acme", Kind: "order.create", IdempotencyKey: "k"}, []byte(`{}`), "", "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	stream := s.streamOf(env.Account)
	events := func() uint64 {
		info, err := stream.Info(ctx, jetstream.WithSubjectFilter(s.subj.EventsOf(env.Account)))
		if err != nil {
			t.Fatal(err)
		}
		var n uint64
		for _, c := range info.State.Subjects {
			n += c
		}
		return n
	}

	if err := s.q.ScheduleAt(ctx, env, time.Now().Add(time.Hour), ""); err != nil {
		t.Fatal(err)
	}
	s.wake(ctx, env.Account, env.ID)
	if _, err := stream.GetLastMsgForSubject(ctx, s.subj.Schedule(env.Account, env.ID)); err != nil {
		t.Fatalf("a retry schedule must survive wake, got %v", err)
	}
	if n := events(); n != 0 {
		t.Fatalf("wake must not fire a retry schedule early, got %d event messages", n)
	}

	if err := s.q.Park(ctx, env, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	s.wake(ctx, env.Account, env.ID)
	if _, err := stream.GetLastMsgForSubject(ctx, s.subj.Schedule(env.Account, env.ID)); err == nil {
		t.Fatal("a fired parking schedule must be removed")
	}
	if n := events(); n != 1 {
		t.Fatalf("wake must publish the parked event once, got %d event messages", n)
	}
}
