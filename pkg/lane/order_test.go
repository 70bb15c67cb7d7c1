package lane_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/lane"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/queue"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/store"
	"github.com/tenaz/tenaz/streams"
)

// A lane of three, the first running, the second cancelled while it
// waited, the third parked behind it: the third waits for the first (a
// cancelled event holds nobody, and the first still runs); advancing past
// the cancelled one wakes nobody, the first's finisher does, passing over
// it; the last to finish releases the lane.
func TestOrderPassesOverCancelledEvents(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, js := natstest.Start(t).Conn(t)
	if _, err := streams.Apply(ctx, js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(ctx, js, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	lanes, err := lane.Open(ctx, js, "")
	if err != nil {
		t.Fatal(err)
	}
	subj := names.NewSubjects("").WithPartitions(st.Partitions())
	q := queue.New(js, subj)
	o := lane.Order{Lanes: lanes, Records: st, Queue: q}

	var envs [3]event.Envelope
	var recs [3]state.Record
	for i := range envs {
		envs[i], err = event.New(event.Fields{Account: "acme", Kind: "order.update", OrderingKey: "order-7",
			IdempotencyKey: fmt.Sprint("k", i)}, []byte(`{}`), "", "", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		recs[i] = queue.Initial(envs[i])
		if recs[i].After, err = lanes.Append(ctx, "acme", "order-7", envs[i].ID); err != nil {
			t.Fatal(err)
		}
	}
	recs[0].Next, recs[1].Next = recs[1].ID, recs[2].ID
	first, mid, last := &recs[0], &recs[1], &recs[2]
	apply := func(r *state.Record, a state.Action) {
		t.Helper()
		n, _, err := state.Apply(*r, a, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		*r = n
	}
	apply(first, state.Action{Name: state.Claim, Seq: 1})
	apply(mid, state.Action{Name: state.Cancel, Detail: "cancelled by caller"})
	revs := map[string]uint64{}
	for _, r := range recs {
		if revs[r.ID], err = st.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Park(ctx, envs[2], time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(ctx, subj.EventsStream("acme"))
	if err != nil {
		t.Fatal(err)
	}
	parked := func() bool {
		_, err := stream.GetLastMsgForSubject(ctx, subj.Schedule("acme", last.ID))
		return err == nil
	}
	dispatched := func() bool {
		target, _ := subj.Event("acme", "order.update")
		_, err := stream.GetLastMsgForSubject(ctx, target)
		return err == nil
	}

	if b, err := o.Blocker(ctx, *last); err != nil || b != first.ID {
		t.Fatalf("Blocker(last) = %q, %v; want the running first %s, past the cancelled one", b, err, first.ID)
	}
	if err := o.Advance(ctx, *mid); err != nil {
		t.Fatal(err)
	}
	if !parked() || dispatched() {
		t.Fatal("advancing past a cancelled event while the one before it runs woke the last")
	}

	apply(first, state.Action{Name: state.Succeed})
	if _, err := st.Write(ctx, *first, revs[first.ID]); err != nil {
		t.Fatal(err)
	}
	if err := o.Advance(ctx, *first); err != nil {
		t.Fatal(err)
	}
	if parked() || !dispatched() {
		t.Fatalf("the first's finisher did not wake the last, past the cancelled one (parked %v, dispatched %v)", parked(), dispatched())
	}
	if b, err := o.Blocker(ctx, *last); err != nil || b != "" {
		t.Fatalf("Blocker(last) = %q, %v; want none once the first is done", b, err)
	}

	apply(last, state.Action{Name: state.Claim, Seq: 2})
	apply(last, state.Action{Name: state.Succeed})
	if err := o.Advance(ctx, *last); err != nil {
		t.Fatal(err)
	}
	if tail, err := lanes.Tail(ctx, "acme", "order-7"); err != nil || tail != "" {
		t.Fatalf("Tail = %q, %v; want the lane released by its last event", tail, err)
	}
}
