package ingest

import (
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// maxQueuedBytes bounds the ordered submissions one ordered loop holds
// waiting, by their size. Past it, route waits for the loop, and with it
// the intake consumer's callback: the bound keeps an ingest's memory
// small whatever the payloads.
const maxQueuedBytes = 16 << 20

// queuedProgressEvery is how often the submissions waiting in an ordered
// queue tell the server they are in progress: well within the ingest
// consumer's AckWait (30s), so that a long queue is not redelivered
// behind the loop's back.
const queuedProgressEvery = 10 * time.Second

// orderedQueue holds the ordered submissions waiting for one ordered
// loop, in the order they arrived. It replaces a channel of a few dozen:
// one that filled up made route wait, and so held up every account's
// intake on this replica behind one account flooding ordered submissions.
// The queue takes what the consumer's ack window lets this replica have,
// up to maxQueuedBytes, so other accounts' submissions keep flowing past
// a flood that fits in it.
type orderedQueue struct {
	mu     sync.Mutex
	cond   *sync.Cond // signalled on every push, pop and close
	msgs   []queued
	bytes  int
	closed bool
}

// queued is a waiting message and what it counts against maxQueuedBytes.
type queued struct {
	m    jetstream.Msg
	size int
}

func newOrderedQueue() *orderedQueue {
	q := &orderedQueue{}
	q.cond = sync.NewCond(&q.mu)
	return q
}

// queuedSize is what a message counts against maxQueuedBytes.
func queuedSize(m jetstream.Msg) int {
	n := len(m.Data()) + len(m.Subject())
	for k, vs := range m.Headers() {
		n += len(k)
		for _, v := range vs {
			n += len(v)
		}
	}
	return n
}

// push queues m, waiting while the queue holds maxQueuedBytes (a message
// larger than that still goes into an empty queue).
func (q *orderedQueue) push(m jetstream.Msg) {
	n := queuedSize(m)
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.bytes > 0 && q.bytes+n > maxQueuedBytes && !q.closed {
		q.cond.Wait()
	}
	q.msgs = append(q.msgs, queued{m, n})
	q.bytes += n
	q.cond.Broadcast()
}

// pop takes the oldest message, waiting for one; false once the queue is
// closed and empty.
func (q *orderedQueue) pop() (jetstream.Msg, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.msgs) == 0 && !q.closed {
		q.cond.Wait()
	}
	if len(q.msgs) == 0 {
		return nil, false
	}
	w := q.msgs[0]
	q.msgs[0] = queued{}
	q.msgs = q.msgs[1:]
	q.bytes -= w.size
	q.cond.Broadcast()
	return w.m, true
}

// close lets pop drain what is queued and then report the end.
func (q *orderedQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.cond.Broadcast()
	q.mu.Unlock()
}

// progress tells the server that every queued message is in progress.
func (q *orderedQueue) progress() {
	q.mu.Lock()
	waiting := append([]queued(nil), q.msgs...)
	q.mu.Unlock()
	for _, w := range waiting {
		_ = w.m.InProgress()
	}
}
