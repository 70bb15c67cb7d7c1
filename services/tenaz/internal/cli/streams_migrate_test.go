package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
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
	ids, running := fill(ctx, t, js, st, 200, 20)

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
		if _, ok := running[id]; ok {
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

// A store of 4 partitions from before records were placed by event (its
// records in their accounts' partitions) is moved to records by event by
// a migration to the same count: each record ends in its event id's
// partition, once, the run of a claimed one still naming its message
// (which did not move), and the store's layout says records by event, in
// the migration's epoch. A second run moves nothing.
func TestMigrationPlacesRecordsByEventAtTheSameCount(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	_, js := srv.Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	events, err := js.Stream(ctx, names.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	c := events.CachedInfo().Config
	delete(c.Metadata, streams.MetaRecords)
	if _, err := js.UpdateStream(ctx, c); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(ctx, js, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if l := st.Layout(); l.RecordsByEvent || l.Partitions != 4 {
		t.Fatalf("want a store of 4 partitions with records by account, got %+v", l)
	}
	accounts, running := fill(ctx, t, js, st, 120, 12)
	moving := map[[2]int]int{} // (from, to) -> records
	for id, a := range accounts {
		if from, to := streams.PartitionOf(a, 4), streams.PartitionOf(id, 4); from != to {
			moving[[2]int{from, to}]++
		}
	}

	m := &migration{js: js, prefix: names.DefaultPrefix, to: 4, log: io.Discard, now: time.Now}
	rep, err := m.run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[[2]int]int{}
	for _, mv := range rep.Moves {
		if mv.Messages+mv.Schedules != 0 {
			t.Errorf("same count: want no message moved, got %+v", mv)
		}
		got[[2]int{mv.From, mv.To}] = mv.Records
	}
	if fmt.Sprint(got) != fmt.Sprint(moving) {
		t.Fatalf("records moved by partitions: want %v, got %v", moving, got)
	}
	l, err := streams.StoreLayout(ctx, js, "")
	if err != nil || !l.RecordsByEvent || l.Partitions != 4 || l.Epoch == "" {
		t.Fatalf("after: want 4 partitions, records by event, an epoch; got %+v, %v", l, err)
	}
	byEvent, err := store.Open(ctx, js, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for p := range 4 {
		kv, err := js.KeyValue(ctx, streams.StateBucket("", p))
		if err != nil {
			t.Fatal(err)
		}
		keys, err := kv.ListKeys(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for id := range keys.Keys() {
			if streams.PartitionOf(id, 4) != p {
				t.Errorf("record %s in partition %d, not its event's %d", id, p, streams.PartitionOf(id, 4))
			}
			seen[id]++
		}
	}
	for id, a := range accounts {
		if seen[id] != 1 {
			t.Errorf("record %s: want it once, got %d", id, seen[id])
		}
		rec, _, err := byEvent.Get(ctx, "", id)
		if err != nil || rec.Account != a {
			t.Errorf("record %s by its id: %v", id, err)
			continue
		}
		if seq, ok := running[id]; ok && (rec.Status != state.Running || rec.RunSeq != seq) {
			t.Errorf("running event %s: want run_seq %d (its message did not move), got %d (%s)", id, seq, rec.RunSeq, rec.Status)
		}
	}
	if again, err := (&migration{js: js, prefix: names.DefaultPrefix, to: 4, log: io.Discard, now: time.Now}).run(ctx); err != nil || len(again.Moves) != 0 {
		t.Fatalf("a second run: want nothing moved, got %+v, %v", again, err)
	}
}

// A store at its count with the consumers per account a version before
// left (acct_<account>, on every partition, whatever the account's
// partition) is cleaned by a migration to the same count: every one is
// deleted and reported, and the other consumers stay.
func TestMigrationDeletesLeftoverAccountConsumersAtTheSameCount(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	_, js := srv.Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := streams.Partitions(ctx, js, "")
	if err != nil || n < 2 {
		t.Fatalf("want a store of several partitions, got %d, %v", n, err)
	}
	var want []string
	for p := range n {
		name := streams.EventsStream("", p)
		for _, a := range []string{fmt.Sprintf("acct%d", p), fmt.Sprintf("other%d", p)} {
			if _, err := js.CreateOrUpdateConsumer(ctx, name, jetstream.ConsumerConfig{
				Durable: names.ConsumerName(a), FilterSubject: streams.Root(names.DefaultPrefix, p) + ".events." + a + ".>",
				AckPolicy: jetstream.AckExplicitPolicy, MemoryStorage: true,
			}); err != nil {
				t.Fatal(err)
			}
			want = append(want, name+"/"+names.ConsumerName(a))
		}
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, names.StreamEvents, jetstream.ConsumerConfig{
		Durable: "mine", FilterSubject: "tenaz.events.mine.>", AckPolicy: jetstream.AckExplicitPolicy,
	}); err != nil {
		t.Fatal(err)
	}

	rep, err := (&migration{js: js, prefix: names.DefaultPrefix, to: n, log: io.Discard, now: time.Now}).run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(want)
	slices.Sort(rep.Consumers)
	if len(rep.Moves) != 0 || !slices.Equal(rep.Consumers, want) {
		t.Fatalf("same count: want nothing moved and %v deleted, got %+v", want, rep)
	}
	for p := range n {
		st, err := js.Stream(ctx, streams.EventsStream("", p))
		if err != nil {
			t.Fatal(err)
		}
		l := st.ConsumerNames(ctx)
		var left []string
		for name := range l.Name() {
			left = append(left, name)
		}
		if err := l.Err(); err != nil {
			t.Fatal(err)
		}
		for _, name := range left {
			if _, ok := names.AccountOfConsumer(name); ok {
				t.Errorf("%s: want %s deleted", streams.EventsStream("", p), name)
			}
		}
		if !slices.Contains(left, names.ConsumerPoller) {
			t.Errorf("%s: want the poller's consumer kept, got %v", streams.EventsStream("", p), left)
		}
		if p == 0 && !slices.Contains(left, "mine") {
			t.Errorf("%s: want a client's own consumer kept, got %v", names.StreamEvents, left)
		}
	}
}

// fill makes n fresh events over accounts acct0, acct1, …: each record
// created and its message enqueued, and every tenth claimed by its
// message, a run lost with its dispatcher (the message still waits to be
// redelivered). It returns each event's account and, of the claimed ones,
// their message's sequence.
func fill(ctx context.Context, t *testing.T, js jetstream.JetStream, st *store.Store, n, accounts int) (ids map[string]string, running map[string]uint64) {
	t.Helper()
	q := queue.New(js, names.NewSubjects("").WithPartitions(st.Partitions()))
	ids, running = map[string]string{}, map[string]uint64{}
	for i := range n {
		a, key := fmt.Sprintf("acct%d", i%accounts), fmt.Sprintf("k%d", i)
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
		ids[env.ID] = a
		if i%10 == 0 {
			if _, _, _, err := st.Transition(ctx, a, env.ID, state.Action{Name: state.Claim, Seq: ack.Sequence, Actor: "test"}); err != nil {
				t.Fatal(err)
			}
			running[env.ID] = ack.Sequence
		}
	}
	return ids, running
}
