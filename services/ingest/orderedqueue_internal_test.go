package ingest

import (
	"fmt"
	"strings"
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
	q := newOrderedQueue(false, nil)
	for range 3 {
		m := next(5 * time.Second)
		if m == nil {
			t.Fatal("want the message published")
		}
		q.push("acme", m)
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
		e, ok := q.pop()
		if !ok || e.m.Subject() != fmt.Sprintf("queued.%d", i) {
			t.Fatalf("pop %d: want queued.%d, got %v", i, i, e)
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
func (m bigMsg) Metadata() (*jetstream.MsgMetadata, error) {
	return &jetstream.MsgMetadata{Sequence: jetstream.SequencePair{Stream: 1}}, nil
}

// A queue holding maxQueuedBytes makes the next push wait for a pop; a
// message larger than the bound still goes into an empty queue.
func TestOrderedQueueBoundsItsBytes(t *testing.T) {
	t.Parallel()
	q := newOrderedQueue(false, nil)
	half := bigMsg{data: make([]byte, maxQueuedBytes/2-8)} // with its subject, two fit
	q.push("acme", half)
	q.push("acme", half)
	pushed := make(chan struct{})
	go func() { q.push("acme", half); close(pushed) }()
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
	go func() { q.push("acme", bigMsg{data: make([]byte, 2*maxQueuedBytes)}); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("want a message over the bound to go into an empty queue")
	}
}

// seqMsg is a message value at an INTAKE sequence.
type seqMsg struct {
	jetstream.Msg
	seq uint64
}

func (m seqMsg) Data() []byte         { return nil }
func (m seqMsg) Subject() string      { return fmt.Sprint(m.seq) }
func (m seqMsg) Headers() nats.Header { return nil }
func (m seqMsg) Metadata() (*jetstream.MsgMetadata, error) {
	return &jetstream.MsgMetadata{Sequence: jetstream.SequencePair{Stream: m.seq}, NumDelivered: 1}, nil
}

// An account holds heldPerAccount submissions in a queue; its newest held
// one then anchors the later ones, which the queue does not hold (push
// tells route to ack them). Accounts take turns, and an anchor put back
// keeps its place at the head of its account's. A queue of a work-queue
// INTAKE (whose acks delete) holds everything.
func TestOrderedQueueAnchorsAFloodAndServesAccountsInTurn(t *testing.T) {
	t.Parallel()
	q := newOrderedQueue(true, nil)
	seq := uint64(0)
	push := func(account string) bool { seq++; return q.push(account, seqMsg{seq: seq}) }
	for i := range heldPerAccount {
		if push("flood") {
			t.Fatalf("submission %d: want it held, got it anchored", i+1)
		}
	}
	for range 100 {
		if !push("flood") {
			t.Fatalf("submission %d: want it anchored past %d held, got it held", seq, heldPerAccount)
		}
	}
	for range 2 {
		if push("calm") {
			t.Fatal("want another account's submissions held")
		}
	}
	var got []string
	var anchor *orderedEntry
	for range 4 {
		e, ok := q.pop()
		if !ok {
			t.Fatal("want an entry")
		}
		got = append(got, e.account+":"+e.m.Subject())
		if e.through != 0 {
			anchor = e
		}
	}
	if want := "flood:1 calm:133 flood:2 calm:134"; strings.Join(got, " ") != want {
		t.Fatalf("want the accounts served in turn, %s; got %s", want, strings.Join(got, " "))
	}
	for range heldPerAccount - 3 {
		q.pop()
	}
	e, _ := q.pop()
	if e.seq != heldPerAccount || e.through != heldPerAccount+100 || e.next != heldPerAccount+1 || anchor != nil {
		t.Fatalf("want the newest held submission anchoring %d..%d, got seq %d through %d next %d",
			heldPerAccount+1, heldPerAccount+100, e.seq, e.through, e.next)
	}
	if push("flood") {
		t.Fatal("want a submission held while its account's anchor is out of the queue")
	}
	q.putBack(e)
	if e2, _ := q.pop(); e2 != e {
		t.Fatalf("want the anchor put back before its account's later submission, got %s", e2.m.Subject())
	}

	work := newOrderedQueue(false, nil)
	for i := range heldPerAccount + 10 {
		if work.push("flood", seqMsg{seq: uint64(i + 1)}) {
			t.Fatal("want nothing anchored on a work queue")
		}
	}
}

// An entry that waits (notBefore) is passed over for the other accounts'
// entries, and taken once its time comes; a closed queue waits for none.
func TestOrderedQueuePassesOverAWaitingEntry(t *testing.T) {
	t.Parallel()
	q := newOrderedQueue(true, nil)
	q.push("full", seqMsg{seq: 1})
	waiting, _ := q.pop()
	waiting.notBefore = time.Now().Add(300 * time.Millisecond)
	q.putBack(waiting)
	q.push("calm", seqMsg{seq: 2})
	if e, _ := q.pop(); e.account != "calm" {
		t.Fatalf("want calm's entry while full's waits, got %s's", e.account)
	}
	e, _ := q.pop() // waits for full's entry's time
	if e != waiting || time.Now().Before(waiting.notBefore) {
		t.Fatalf("want full's entry once its time came, got %s's at %s (not before %s)", e.account, time.Now(), waiting.notBefore)
	}
	waiting.notBefore = time.Now().Add(time.Hour)
	q.putBack(waiting)
	q.close()
	if e, ok := q.pop(); !ok || e != waiting {
		t.Fatal("want a closed queue to give a waiting entry at once")
	}
}

// againMsg is a seqMsg delivered a second time.
type againMsg struct{ seqMsg }

func (m againMsg) Metadata() (*jetstream.MsgMetadata, error) {
	return &jetstream.MsgMetadata{Sequence: jetstream.SequencePair{Stream: m.seq}, NumDelivered: 2}, nil
}

// A redelivered ordered entry, accepted and draining its account to INTAKE's end
// (the loop sets its through), then put back, takes a later submission
// of its account as an anchor does. It had no delegated set, and the
// crash suite's ingest panicked on it (assignment to entry in nil map).
func TestOrderedQueueRedeliveredAnchorTakesALaterSubmission(t *testing.T) {
	t.Parallel()
	q := newOrderedQueue(true, nil)
	if q.push("flood", againMsg{seqMsg{seq: 10}}) {
		t.Fatal("want the redelivered submission held")
	}
	e, _ := q.pop()
	e.accepted, e.next, e.through = true, e.seq+1, 20 // as the loop does for a redelivered entry
	q.putBack(e)
	if !q.extend("flood", seqMsg{seq: 21}) {
		t.Fatal("want the draining entry to stand for the later submission")
	}
	if _, ok := e.delegated[21]; !ok || e.through != 21 {
		t.Fatalf("want submission 21 delegated and the drain through it, got %v through %d", e.delegated, e.through)
	}
}
