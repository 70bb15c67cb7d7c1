package natsconn_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/natsconn"
	"github.com/tenaz/tenaz/pkg/natstest"
)

// An asynchronous publish that is never answered (as when a cluster's
// stream leader goes away before answering) fails after PublishAckWait
// instead of holding its caller's batch for good. Here a plain subscriber
// takes the publish and never answers, as a leader that died would not.
func TestUnansweredAsyncPublishFailsAfterPublishAckWait(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	nc, _ := srv.Conn(t)
	sub, err := nc.SubscribeSync("held.>")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	js, err := natsconn.JetStream(nc)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	f, err := js.PublishAsync("held.x", []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sub.NextMsg(5 * time.Second); err != nil {
		t.Fatalf("the publish never reached the silent subscriber: %v", err)
	}
	select {
	case <-f.Ok():
		t.Fatal("acknowledged, though nothing answered")
	case err := <-f.Err():
		if !errors.Is(err, jetstream.ErrAsyncPublishTimeout) {
			t.Fatalf("failed with %v, want ErrAsyncPublishTimeout", err)
		}
		if took := time.Since(start); took < natsconn.PublishAckWait-time.Second {
			t.Fatalf("gave up after %s, before PublishAckWait (%s)", took, natsconn.PublishAckWait)
		}
	case <-time.After(natsconn.PublishAckWait + 10*time.Second):
		t.Fatalf("still waiting %s after the publish: it would wait for good", natsconn.PublishAckWait+10*time.Second)
	}
}
