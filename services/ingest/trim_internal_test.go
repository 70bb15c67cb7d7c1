package ingest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/queue"
	"github.com/tenaz/tenaz/streams"
)

// A trimmer purges INTAKE up to the ingest consumer's ack floor and not
// past it: a submission still unsettled, and every one after it, stays.
func TestTrimPurgesOnlyToTheAckFloor(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	_, js := srv.Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := streams.Apply(ctx, js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, streams.StreamIntake)
	if err != nil {
		t.Fatal(err)
	}
	if !queue.Trims(st) {
		t.Fatalf("a new store's INTAKE: want limits retention (trimmed), got %v", st.CachedInfo().Config.Retention)
	}
	cons, err := js.Consumer(ctx, streams.StreamIntake, "ingest")
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := js.Publish(ctx, "tenaz.intake.acme.order.create", []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	batch, err := cons.Fetch(3, jetstream.FetchMaxWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var msgs []jetstream.Msg
	for m := range batch.Messages() {
		msgs = append(msgs, m)
	}
	if len(msgs) != 3 {
		t.Fatalf("want 3 submissions fetched, got %d (%v)", len(msgs), batch.Error())
	}
	for _, i := range []int{0, 2} { // the second stays unsettled
		if err := msgs[i].DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
	}
	tr := &queue.Trimmer{Stream: st, Consumer: cons}
	if err := tr.Trim(ctx); err != nil {
		t.Fatal(err)
	}
	kept := func(seq uint64) bool {
		_, err := st.GetMsg(ctx, seq)
		if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			t.Fatal(err)
		}
		return err == nil
	}
	if kept(1) || !kept(2) || !kept(3) || tr.Floor() != 1 {
		t.Fatalf("one unsettled submission (seq 2): want seq 1 purged, 2 and 3 kept, floor 1; got kept %v %v %v, floor %d",
			kept(1), kept(2), kept(3), tr.Floor())
	}
	if err := msgs[1].DoubleAck(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tr.Trim(ctx); err != nil {
		t.Fatal(err)
	}
	if kept(2) || kept(3) || tr.Floor() != 3 {
		t.Fatalf("all settled: want every submission purged, floor 3; got kept %v %v, floor %d", kept(2), kept(3), tr.Floor())
	}
}
