package queue_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/queue"
)

// A trimmer purges what its consumer has acknowledged, and tells Failed of
// each trim that fails: here, once its consumer is gone, nothing is
// purged and every trim counts.
func TestTrimmerTellsOfFailedTrims(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	_, js := srv.Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "TRIMMED", Subjects: []string{"trimmed.>"}})
	if err != nil {
		t.Fatal(err)
	}
	cons, err := st.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := js.Publish(ctx, "trimmed.x", nil); err != nil {
			t.Fatal(err)
		}
	}
	b, err := cons.Fetch(2)
	if err != nil {
		t.Fatal(err)
	}
	for m := range b.Messages() {
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var failed atomic.Int64
	tr := &queue.Trimmer{Stream: st, Consumer: cons, Failed: func() { failed.Add(1) }}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); tr.Run(runCtx, 20*time.Millisecond, zerolog.Nop()) }()
	defer func() { stop(); <-done }()
	natstest.Eventually(t, 10*time.Second, func() bool {
		info, err := st.Info(ctx)
		return err == nil && info.State.Msgs == 1
	}, "the two acknowledged messages trimmed")
	if n := failed.Load(); n != 0 {
		t.Fatalf("trims that succeeded: want no failure told, got %d", n)
	}
	if err := st.DeleteConsumer(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 10*time.Second, func() bool { return failed.Load() >= 2 }, "failed trims told")
	if info, err := st.Info(ctx); err != nil || info.State.Msgs != 1 {
		t.Fatalf("failed trims: want the unacknowledged message kept, got %v (%v)", info.State.Msgs, err)
	}
}
