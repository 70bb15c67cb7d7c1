package store_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/store"
	"github.com/tenaz/tenaz/streams"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// setup starts an embedded server with tenaz's streams and opens a store
// on it.
func setup(t *testing.T, o store.Options) (*store.Store, jetstream.JetStream) {
	t.Helper()
	s := natstest.Start(t)
	_, js := s.Conn(t)
	st, err := store.Open(ctx(t), js, o)
	if err != nil {
		t.Fatalf("store.Open: %v", err)
	}
	return st, js
}

func ctx(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

var idSeq atomic.Int64

// record returns a fresh pending record with a unique id.
func record(t *testing.T) state.Record {
	t.Helper()
	id := event.ID("acme", fmt.Sprintf("key-%d", idSeq.Add(1)))
	r, _, err := state.New(state.Record{ID: id, IdempotencyKey: "k", Account: "acme", Kind: "order.create"},
		state.Action{Name: state.Accept}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func create(t *testing.T, st *store.Store, r state.Record) uint64 {
	t.Helper()
	rev, err := st.Create(ctx(t), r)
	if err != nil {
		t.Fatalf("Create %s: %v", r.ID, err)
	}
	return rev
}

func TestCreateGet(t *testing.T) {
	t.Parallel()
	st, _ := setup(t, store.Options{})
	r := record(t)
	rev := create(t, st, r)
	if rev == 0 {
		t.Errorf("want a non-zero revision, got 0")
	}
	got, grev, err := st.Get(ctx(t), "", r.ID)
	if err != nil || grev != rev {
		t.Fatalf("Get: want revision %d, got %d (%v)", rev, grev, err)
	}
	if got.ID != r.ID || got.Status != state.Pending || len(got.History) != 1 || !got.CreatedAt.Equal(r.CreatedAt) {
		t.Errorf("Get: want the created record back, got %+v", got)
	}
	if _, err := st.Create(ctx(t), r); !errors.Is(err, store.ErrExists) {
		t.Errorf("second Create: want ErrExists, got %v", err)
	}
	if _, grev, _ := st.Get(ctx(t), "", r.ID); grev != rev {
		t.Errorf("a refused Create changed the revision: %d -> %d", rev, grev)
	}
}

func TestGetNotFound(t *testing.T) {
	t.Parallel()
	st, _ := setup(t, store.Options{})
	for _, id := range []string{event.ID("acme", "never-created"), "not-an-id", "ev_*", "", "ev_0123456789abcdefghijklmn.>"} {
		if _, _, err := st.Get(ctx(t), "", id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Get(%q): want ErrNotFound, got %v", id, err)
		}
	}
}

func TestWriteCompareAndSet(t *testing.T) {
	t.Parallel()
	st, _ := setup(t, store.Options{})
	r := record(t)
	rev1 := create(t, st, r)
	claimed, _, err := state.Apply(r, state.Action{Name: state.Claim, Seq: 1}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	rev2, err := st.Write(ctx(t), claimed, rev1)
	if err != nil || rev2 <= rev1 {
		t.Fatalf("Write at the current revision: want a newer revision than %d, got %d (%v)", rev1, rev2, err)
	}
	if _, err := st.Write(ctx(t), claimed, rev1); !errors.Is(err, store.ErrConflict) {
		t.Errorf("Write at a stale revision: want ErrConflict, got %v", err)
	}
	if _, err := st.Write(ctx(t), claimed, rev2+100); !errors.Is(err, store.ErrConflict) {
		t.Errorf("Write at a future revision: want ErrConflict, got %v", err)
	}
	got, rev, err := st.Get(ctx(t), "", r.ID)
	if err != nil || rev != rev2 || got.Status != state.Running || got.Attempts != 1 {
		t.Errorf("want the first write kept (running, attempt 1, rev %d), got %s, %d, rev %d (%v)", rev2, got.Status, got.Attempts, rev, err)
	}
	// Writing a record that was never created at a non-zero revision is a conflict too.
	if _, err := st.Write(ctx(t), record(t), 5); !errors.Is(err, store.ErrConflict) {
		t.Errorf("Write of an unknown record: want ErrConflict, got %v", err)
	}
}

func TestWriteAsync(t *testing.T) {
	t.Parallel()
	st, _ := setup(t, store.Options{})
	r := record(t)
	rev1 := create(t, st, r)
	next, _, err := state.Apply(r, state.Action{Name: state.Claim, Seq: 1}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	p, err := st.WriteAsync(next, rev1)
	if err != nil {
		t.Fatal(err)
	}
	stale, err := st.WriteAsync(next, rev1) // pipelined behind the first: rev1 is stale by then
	if err != nil {
		t.Fatal(err)
	}
	rev2, err := p.Wait(ctx(t))
	if err != nil || rev2 <= rev1 {
		t.Fatalf("Wait: want a revision after %d, got %d (%v)", rev1, rev2, err)
	}
	if _, err := stale.Wait(ctx(t)); !errors.Is(err, store.ErrConflict) {
		t.Errorf("Wait on a stale write: want ErrConflict, got %v", err)
	}
	if _, rev, _ := st.Get(ctx(t), "", r.ID); rev != rev2 {
		t.Errorf("want the stored revision %d, got %d", rev2, rev)
	}
	// Many pipelined writes, each at the revision the previous one made, all land.
	cur, rev := next, rev2
	for i := range 20 {
		cur, _, err = state.Apply(cur, state.Action{Name: state.Note, Detail: fmt.Sprint(i)}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		p, err := st.WriteAsync(cur, rev)
		if err != nil {
			t.Fatal(err)
		}
		if rev, err = p.Wait(ctx(t)); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	got, grev, err := st.Get(ctx(t), "", r.ID)
	if err != nil || grev != rev || len(got.History) != len(cur.History) {
		t.Errorf("want revision %d with %d history entries, got %d with %d (%v)", rev, len(cur.History), grev, len(got.History), err)
	}
}

// eventually waits for cond with a deadline.
func eventually(t *testing.T, cond func() bool, what string) {
	t.Helper()
	natstest.Eventually(t, 10*time.Second, cond, "waiting for %s", what)
}

func TestCreateAsync(t *testing.T) {
	t.Parallel()
	st, _ := setup(t, store.Options{})
	r := record(t)
	first, err := st.CreateAsync(r)
	if err != nil {
		t.Fatal(err)
	}
	dup, err := st.CreateAsync(r) // pipelined behind the first
	if err != nil {
		t.Fatal(err)
	}
	rev, err := first.Wait(ctx(t))
	if err != nil || rev == 0 {
		t.Fatalf("first CreateAsync: want a revision, got %d (%v)", rev, err)
	}
	if _, err := dup.Wait(ctx(t)); !errors.Is(err, store.ErrExists) {
		t.Errorf("second CreateAsync of one id: want ErrExists, got %v", err)
	}
	if _, grev, err := st.Get(ctx(t), "", r.ID); err != nil || grev != rev {
		t.Errorf("want the first create stored at rev %d, got %d (%v)", rev, grev, err)
	}
}

func TestTransitionClaimRace(t *testing.T) {
	t.Parallel()
	for workers := 2; workers <= 8; workers++ {
		t.Run(fmt.Sprintf("%d workers", workers), func(t *testing.T) {
			t.Parallel()
			st, _ := setup(t, store.Options{})
			r := record(t)
			create(t, st, r)
			var (
				wg          sync.WaitGroup
				start       = make(chan struct{})
				wins, loses atomic.Int32
				errs        = make(chan error, workers)
			)
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					rec, _, effects, err := st.Transition(context.Background(), "", r.ID, state.Action{Name: state.Claim, Seq: uint64(w + 1), Actor: fmt.Sprint("w", w)})
					switch {
					case err == nil:
						wins.Add(1)
						if want := state.Table[state.Claim].Effects; rec.Status != state.Running || !slices.Equal(effects, want) {
							errs <- fmt.Errorf("winner: want running with effects %v, got %s %v", want, rec.Status, effects)
						}
					case errors.Is(err, state.ErrInvalidTransition):
						loses.Add(1)
						if rec.Status != state.Running {
							errs <- fmt.Errorf("loser: want the current (running) record back, got %s", rec.Status)
						}
					default:
						errs <- fmt.Errorf("worker %d: want nil or ErrInvalidTransition, got %v", w, err)
					}
				}()
			}
			close(start)
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			if wins.Load() != 1 || loses.Load() != int32(workers-1) {
				t.Fatalf("want exactly 1 claim to win and %d to lose, got %d and %d", workers-1, wins.Load(), loses.Load())
			}
			got, _, err := st.Get(ctx(t), "", r.ID)
			if err != nil || got.Attempts != 1 || len(got.History) != 2 {
				t.Errorf("want one claim recorded (attempt 1, 2 history entries), got attempts %d, %d entries (%v)", got.Attempts, len(got.History), err)
			}
		})
	}
}

func TestTransitionIllegal(t *testing.T) {
	t.Parallel()
	st, _ := setup(t, store.Options{})
	r := record(t)
	rev := create(t, st, r)
	got, grev, _, err := st.Transition(ctx(t), "", r.ID, state.Action{Name: state.Succeed})
	if !errors.Is(err, state.ErrInvalidTransition) || got.Status != state.Pending || grev != rev {
		t.Errorf("succeed from pending: want ErrInvalidTransition and the record at rev %d, got %s rev %d (%v)", rev, got.Status, grev, err)
	}
	if _, rev2, _ := st.Get(ctx(t), "", r.ID); rev2 != rev {
		t.Errorf("an illegal transition wrote: revision %d -> %d", rev, rev2)
	}
	if _, _, _, err := st.Transition(ctx(t), "", event.ID("acme", "missing"), state.Action{Name: state.Claim}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Transition of a missing record: want ErrNotFound, got %v", err)
	}
}

func TestUpdateUnderContention(t *testing.T) {
	t.Parallel()
	const workers, each = 8, 20
	// The subject is that compare-and-set loses no increment, so the retry
	// bound is lifted: with 8 writers on one key an unlucky writer could in
	// principle lose more rounds in a row than the default 32
	// (TestUpdateGivesUpAfterMaxConflicts covers the bound).
	st, _ := setup(t, store.Options{MaxConflicts: workers * each})
	r := record(t)
	create(t, st, r)
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	start := make(chan struct{})
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for range each {
				_, _, err := st.Update(context.Background(), "", r.ID, func(cur state.Record) (state.Record, error) {
					cur.Attempts++
					return cur, nil
				})
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("Update: %v", err)
	}
	got, _, err := st.Get(ctx(t), "", r.ID)
	if err != nil || got.Attempts != workers*each {
		t.Errorf("want attempts %d after %d×%d increments, got %d (%v)", workers*each, workers, each, got.Attempts, err)
	}
}

func TestUpdateGivesUpAfterMaxConflicts(t *testing.T) {
	t.Parallel()
	st, _ := setup(t, store.Options{MaxConflicts: 2})
	r := record(t)
	create(t, st, r)
	calls := 0
	// fn writes behind Update's back each time, so every write conflicts.
	_, _, err := st.Update(ctx(t), "", r.ID, func(cur state.Record) (state.Record, error) {
		calls++
		_, rev, err := st.Get(ctx(t), "", cur.ID)
		if err != nil {
			return cur, err
		}
		if _, err := st.Write(ctx(t), cur, rev); err != nil {
			return cur, err
		}
		return cur, nil
	})
	if !errors.Is(err, store.ErrConflict) || calls != 3 {
		t.Errorf("want ErrConflict after 1 try and 2 retries (3 calls), got %v after %d calls", err, calls)
	}
}

func TestUpdateFnErrorWritesNothing(t *testing.T) {
	t.Parallel()
	st, _ := setup(t, store.Options{})
	r := record(t)
	rev := create(t, st, r)
	boom := errors.New("boom")
	got, grev, err := st.Update(ctx(t), "", r.ID, func(cur state.Record) (state.Record, error) {
		cur.Attempts = 99
		return cur, boom
	})
	if !errors.Is(err, boom) || grev != rev || got.Attempts != 0 {
		t.Errorf("want boom and the unchanged record at rev %d, got %v, rev %d, attempts %d", rev, err, grev, got.Attempts)
	}
	if _, rev2, _ := st.Get(ctx(t), "", r.ID); rev2 != rev {
		t.Errorf("a failed fn wrote: revision %d -> %d", rev, rev2)
	}
}

// lastMsg is the stored message of a record.
func lastMsg(t *testing.T, js jetstream.JetStream, st *store.Store, r state.Record) *jetstream.RawStreamMsg {
	t.Helper()
	bucket, id := st.Bucket(r.Account, r.ID), r.ID
	s, err := js.Stream(ctx(t), "KV_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(ctx(t), "$KV."+bucket+"."+id)
	if err != nil {
		t.Fatalf("GetLastMsgForSubject %s: %v", id, err)
	}
	return m
}

func TestTerminalWriteCarriesTTL(t *testing.T) {
	t.Parallel()
	const retention = 36 * time.Hour
	st, js := setup(t, store.Options{Retention: retention})
	r := record(t)
	create(t, st, r)
	if ttl := lastMsg(t, js, st, r).Header.Get("Nats-TTL"); ttl != "" {
		t.Errorf("pending record: want no Nats-TTL, got %q", ttl)
	}
	if _, _, _, err := st.Transition(ctx(t), "", r.ID, state.Action{Name: state.Claim, Seq: 1}); err != nil {
		t.Fatal(err)
	}
	if ttl := lastMsg(t, js, st, r).Header.Get("Nats-TTL"); ttl != "" {
		t.Errorf("running record: want no Nats-TTL, got %q", ttl)
	}
	if _, _, _, err := st.Transition(ctx(t), "", r.ID, state.Action{Name: state.Succeed}); err != nil {
		t.Fatal(err)
	}
	ttl := lastMsg(t, js, st, r).Header.Get("Nats-TTL")
	if d, err := time.ParseDuration(ttl); err != nil || d != retention {
		t.Errorf("done record: want Nats-TTL %s, got %q", retention, ttl)
	}
	// Parked is not terminal: a dead record stays until an operator acts.
	d := record(t)
	create(t, st, d)
	for _, a := range []state.ActionName{state.Claim, state.Fail} {
		if _, _, _, err := st.Transition(ctx(t), "", d.ID, state.Action{Name: a}); err != nil {
			t.Fatal(err)
		}
	}
	if ttl := lastMsg(t, js, st, d).Header.Get("Nats-TTL"); ttl != "" {
		t.Errorf("dead record: want no Nats-TTL, got %q", ttl)
	}
	// Cancelled is terminal too.
	c := record(t)
	create(t, st, c)
	if _, _, _, err := st.Transition(ctx(t), "", c.ID, state.Action{Name: state.Cancel}); err != nil {
		t.Fatal(err)
	}
	if ttl := lastMsg(t, js, st, c).Header.Get("Nats-TTL"); ttl == "" {
		t.Errorf("cancelled record: want a Nats-TTL, got none")
	}
}

func TestTerminalRecordExpires(t *testing.T) {
	t.Parallel()
	st, _ := setup(t, store.Options{Retention: time.Second})
	r := record(t)
	create(t, st, r)
	if _, _, _, err := st.Transition(ctx(t), "", r.ID, state.Action{Name: state.Cancel}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.Get(ctx(t), "", r.ID); err != nil {
		t.Fatalf("right after the write: want the record, got %v", err)
	}
	eventually(t, func() bool {
		_, _, err := st.Get(ctx(t), "", r.ID)
		return errors.Is(err, store.ErrNotFound)
	}, "the cancelled record to expire after its 1s TTL")
}

// Retention: done records (and their history, which lives in them)
// expire; dead and manual_review records stay until an operator acts.
func TestRetentionExpiresDoneKeepsParked(t *testing.T) {
	t.Parallel()
	st, _ := setup(t, store.Options{Retention: time.Second})
	move := func(id string, as ...state.ActionName) {
		for _, a := range as {
			if _, _, _, err := st.Transition(ctx(t), "", id, state.Action{Name: a, Seq: 1}); err != nil {
				t.Fatalf("%s: %v", a, err)
			}
		}
	}
	done, deadR, review := record(t), record(t), record(t)
	for _, r := range []state.Record{done, deadR, review} {
		create(t, st, r)
	}
	move(deadR.ID, state.Claim, state.Fail)
	move(review.ID, state.Claim, state.AwaitCallback, state.Escalate)
	move(done.ID, state.Claim, state.Succeed)
	eventually(t, func() bool {
		_, _, err := st.Get(ctx(t), "", done.ID)
		return errors.Is(err, store.ErrNotFound)
	}, "the done record to expire after its 1s TTL")
	for _, id := range []string{deadR.ID, review.ID} {
		r, _, err := st.Get(ctx(t), "", id)
		if err != nil {
			t.Fatalf("parked record %s: want it kept, got %v", id, err)
		}
		if len(r.History) < 3 {
			t.Errorf("parked record %s: want its history kept, got %d entries", id, len(r.History))
		}
	}
}

func TestOpenWithoutBucket(t *testing.T) {
	t.Parallel()
	s := natstest.Start(t)
	_, js := s.Conn(t)
	if err := js.DeleteKeyValue(ctx(t), names.BucketState); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Open(ctx(t), js, store.Options{}); err == nil {
		t.Error("Open without the tenaz_state bucket: want an error, got nil")
	}
}

// In a new store each record is in its event id's partition, so one
// account's records are spread over every bucket and each is found by its
// id alone; a store from before keeps each in its account's partition.
func TestRecordsPlacedByEvent(t *testing.T) {
	t.Parallel()
	st, js := setup(t, store.Options{})
	l := st.Layout()
	if !l.RecordsByEvent || l.Partitions < 2 {
		t.Fatalf("a new store: want records by event over several partitions, got %+v", l)
	}
	buckets := map[string]int{}
	for range 40 {
		r := record(t)
		create(t, st, r)
		b := st.Bucket(r.Account, r.ID)
		if want := names.NewSubjects("").StateBucketOf(streams.PartitionOf(r.ID, l.Partitions)); b != want {
			t.Fatalf("record %s: in %s, want its event's %s", r.ID, b, want)
		}
		kv, err := js.KeyValue(ctx(t), b)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Get(ctx(t), r.ID); err != nil {
			t.Fatalf("record %s: not in %s: %v", r.ID, b, err)
		}
		if got, _, err := st.Get(ctx(t), "", r.ID); err != nil || got.ID != r.ID {
			t.Fatalf("Get by id alone: %v", err)
		}
		buckets[b]++
	}
	if len(buckets) != l.Partitions {
		t.Fatalf("one account's 40 records: want them in all %d buckets, got %v", l.Partitions, buckets)
	}

	old, err := store.Open(ctx(t), js, store.Options{Layout: streams.Layout{Partitions: l.Partitions}})
	if err != nil {
		t.Fatal(err)
	}
	r := record(t)
	if _, err := old.Create(ctx(t), r); err != nil {
		t.Fatal(err)
	}
	if want := names.NewSubjects("").StateBucketOf(streams.PartitionOf(r.Account, l.Partitions)); old.Bucket(r.Account, r.ID) != want {
		t.Fatalf("by account: record in %s, want the account's %s", old.Bucket(r.Account, r.ID), want)
	}
	if got, _, err := old.Get(ctx(t), "", r.ID); err != nil || got.ID != r.ID {
		t.Fatalf("by account, Get by id alone (every partition): %v", err)
	}
}

// A message deleted twice (two movers, a mover and a purge) is gone for
// the second deleter: IsGone says so of the server's refusal, which
// nats.go gives as text, not as ErrMsgNotFound. Any other error is not.
func TestIsGone(t *testing.T) {
	t.Parallel()
	s := natstest.Start(t)
	_, js := s.Conn(t)
	st, err := js.CreateStream(ctx(t), jetstream.StreamConfig{Name: "GONE", Subjects: []string{"gone.>"}})
	if err != nil {
		t.Fatal(err)
	}
	ack, err := js.Publish(ctx(t), "gone.x", []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteMsg(ctx(t), ack.Sequence); err != nil {
		t.Fatal(err)
	}
	err = st.DeleteMsg(ctx(t), ack.Sequence)
	if err == nil || !store.IsGone(err) {
		t.Fatalf("a second delete: want an error IsGone takes, got %v", err)
	}
	if store.IsGone(errors.New("nats: timeout")) || store.IsGone(nil) {
		t.Fatal("want IsGone false for other errors and nil")
	}
}
