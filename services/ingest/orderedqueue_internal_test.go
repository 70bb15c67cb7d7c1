package ingest

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/natstest"
)

// Messages waiting in an ordered queue longer than their consumer's
// AckWait are not redelivered while the queue keeps them in progress, and
// come out in the order they went in.
func TestOrderedQueueKeepsWaitingMessagesInProgress(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	nc, js := srv.Conn(t)
	next := natstest.Inbox(t, js, "QUEUED", time.Second, -1)
	for i := range 3 {
		if err := nc.Publish(fmt.Sprintf("queued.%d", i), nil); err != nil {
			t.Fatal(err)
		}
	}
	q := newOrderedQueue()
	for range 3 {
		m := next(5 * time.Second)
		if m == nil {
			t.Fatal("want the message published")
		}
		q.push(m)
	}
	// Three AckWaits, with progress sent as the loop's ticker would (at a
	// scaled-down period), and a pull waiting all along for a redelivery.
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
		q.progress()
		if m := next(300 * time.Millisecond); m != nil {
			t.Fatalf("want nothing redelivered while queued, got %s again", m.Subject())
		}
	}
	for i := range 3 {
		m, ok := q.pop()
		if !ok || m.Subject() != fmt.Sprintf("queued.%d", i) {
			t.Fatalf("pop %d: want queued.%d, got %v", i, i, m)
		}
	}
	q.close()
	if _, ok := q.pop(); ok {
		t.Fatal("want a closed, empty queue to report its end")
	}
}

// bigMsg is a message value of a given size, to fill a queue by bytes.
type bigMsg struct {
	jetstream.Msg
	data []byte
}

func (m bigMsg) Data() []byte         { return m.data }
func (m bigMsg) Subject() string      { return "big" }
func (m bigMsg) Headers() nats.Header { return nil }

// A queue holding maxQueuedBytes makes the next push wait for a pop; a
// message larger than the bound still goes into an empty queue.
func TestOrderedQueueBoundsItsBytes(t *testing.T) {
	t.Parallel()
	q := newOrderedQueue()
	half := bigMsg{data: make([]byte, maxQueuedBytes/2-8)} // with its subject, two fit
	q.push(half)
	q.push(half)
	pushed := make(chan struct{})
	go func() { q.push(half); close(pushed) }()
	select {
	case <-pushed:
		t.Fatal("want a push past maxQueuedBytes to wait")
	case <-time.After(200 * time.Millisecond): // no push may happen in this time; not a wait for an outcome
	}
	if _, ok := q.pop(); !ok {
		t.Fatal("want a message")
	}
	select {
	case <-pushed:
	case <-time.After(10 * time.Second):
		t.Fatal("want the push to go on once a message left")
	}
	for range 2 {
		q.pop()
	}
	done := make(chan struct{})
	go func() { q.push(bigMsg{data: make([]byte, 2*maxQueuedBytes)}); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("want a message over the bound to go into an empty queue")
	}
}
