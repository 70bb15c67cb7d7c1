package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/queue"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/store"
	"github.com/tenaz/tenaz/streams"
)

// A run stopped between a message's copy and the delete of its original
// (the one place where a crash leaves an item in both partitions) is
// finished by the next run without a second copy, here moving a store of
// 4 partitions to 1: the copy carries the migration's mark. The emptied
// partitions are dropped.
func TestMigrationStoppedAfterACopyResumesWithoutDuplicates(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	_, js := srv.Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := store.Open(ctx, js, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	four := names.NewSubjects("").WithPartitions(st.Partitions())
	q := queue.New(js, four)
	const n = 200
	ids, running := map[string]bool{}, map[string]bool{}
	for i := range n {
		a, key := fmt.Sprintf("acct%d", i%20), fmt.Sprintf("k%d", i)
		env := event.Envelope{ID: event.ID(a, key), Account: a, Kind: "order.create", IdempotencyKey: key,
			Payload: []byte(`{}`), CreatedAt: time.Now().UTC()}
		rev, err := st.Create(ctx, queue.Initial(env))
		if err != nil {
			t.Fatal(err)
		}
		ack, err := q.EnqueueFresh(ctx, env, rev, env.ID)
		if err != nil {
			t.Fatal(err)
		}
		ids[env.ID] = true
		if i%10 == 0 {
			// A run lost with its dispatcher: claimed by this message,
			// which is still waiting to be redelivered.
			if _, _, _, err := st.Transition(ctx, a, env.ID, state.Action{Name: state.Claim, Seq: ack.Sequence, Actor: "test"}); err != nil {
				t.Fatal(err)
			}
			running[env.ID] = true
		}
	}

	crash := errors.New("crashed after a copy")
	copies := 0
	m := &migration{js: js, prefix: names.DefaultPrefix, to: 1, log: io.Discard, now: time.Now, afterCopy: func() error {
		if copies++; copies == 50 {
			return crash
		}
		return nil
	}}
	if _, err := m.run(ctx); !errors.Is(err, crash) {
		t.Fatalf("first run: want it stopped by the hook, got %v", err)
	}
	if _, err := streams.Partitions(ctx, js, ""); !errors.Is(err, streams.ErrMigrating) {
		t.Fatalf("a half-moved store: want streams.ErrMigrating for the services, got %v", err)
	}

	m = &migration{js: js, prefix: names.DefaultPrefix, to: 1, log: io.Discard, now: time.Now}
	rep, err := m.run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Resumed || rep.From != 4 || rep.To != 1 || len(rep.Dropped) != 6 {
		t.Fatalf("second run: want the migration from 4 to 1 resumed and 3 streams and 3 buckets dropped, got %+v", rep)
	}
	if got, err := streams.Partitions(ctx, js, ""); got != 1 || err != nil {
		t.Fatalf("after the migration: want 1 partition, got %d, %v", got, err)
	}
	events, err := js.Stream(ctx, names.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	st1, err := store.Open(ctx, js, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for seq := uint64(1); ; {
		msg, err := events.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(four.EventsIn(0)))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		seq = msg.Sequence + 1
		id := msg.Header.Get(names.HeaderEventID)
		seen[id]++
		if running[id] {
			// Its redelivery takes the run over only if the record names
			// this message (process.go: Reclaim when RunSeq is its seq).
			rec, _, err := st1.Get(ctx, "", id)
			if err != nil || rec.Status != state.Running || rec.RunSeq != msg.Sequence {
				t.Errorf("running event %s: want its run_seq to be its message's %d in EVENTS, got %d (%s, %v)", id, msg.Sequence, rec.RunSeq, rec.Status, err)
			}
		}
	}
	for id := range ids {
		if seen[id] != 1 {
			t.Errorf("event %s: want its message once in EVENTS, got %d", id, seen[id])
		}
	}
	if _, err := js.Stream(ctx, streams.EventsStream("", 1)); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("EVENTS_1 after moving to 1 partition: want it dropped, got %v", err)
	}
}
