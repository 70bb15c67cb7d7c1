package ingest

import (
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// maxQueuedBytes bounds the ordered submissions one ordered loop holds
// waiting, by their size. Past it, route waits for the loop, and with it
// the intake consumer's callback: the bound keeps an ingest's memory
// small whatever the payloads.
const maxQueuedBytes = 16 << 20

// heldPerAccount is how many of one account's ordered submissions an
// ordered queue holds unacked. Past it the account's newest held one
// becomes an anchor and the later ones are acked as they arrive (see
// orderedEntry), so that one account's flood, however long, holds a few
// of the ingest consumer's ack window (4,096) instead of all of it.
const heldPerAccount = 32

// queuedProgressEvery is how often the submissions waiting in an ordered
// queue tell the server they are in progress: well within the ingest
// consumer's AckWait (30s), so that a long queue is not redelivered
// behind the loop's back.
const queuedProgressEvery = 10 * time.Second

// orderedQueue holds the ordered submissions waiting for one ordered
// loop: each account's in the order they arrived, the accounts served in
// turn. One account's flood therefore neither holds up the intake
// consumer (route never waits for the loop unless the queue is full by
// bytes, and an account past heldPerAccount holds no more) nor the other
// accounts of its loop, which take their turns between its anchor's
// chunks.
type orderedQueue struct {
	mu       sync.Mutex
	cond     *sync.Cond // signalled on every push, pop and close
	accounts map[string][]*orderedEntry
	turn     []string // the accounts with entries, in the order they are served
	bytes    int
	closed   bool
	delegate bool                   // acks past heldPerAccount: only where INTAKE is trimmed, not a work queue whose ack deletes
	answered func(nats.Header) bool // replies.answered; nil: none is
}

// orderedEntry is one submission waiting for its loop. An anchor also
// stands for later submissions of its account, up to the INTAKE sequence
// through, which were acked as they arrived (delegated): the loop accepts
// the anchor, then reads those back from INTAKE in chunks and accepts
// them, and acks the anchor last. Unacked, the anchor holds INTAKE's trim
// floor below them, so none is trimmed before it is accepted. A message
// delivered again (maybe an anchor whose ingest died) reads everything of
// its account after it in INTAKE, since nothing else says how far it
// reached (drain).
type orderedEntry struct {
	m       jetstream.Msg
	account string
	seq     uint64 // m's INTAKE sequence; 0 when its metadata could not be read
	size    int    // what it counts against maxQueuedBytes
	ordered bool   // m may belong to an ordered lane; else it waits here behind its account's flood

	// redelivered: m was delivered before, so it drains its account to
	// INTAKE's end (only where anchors are made).
	redelivered bool

	through   uint64                    // an anchor's last delegated submission; 0 for a plain entry
	delegated map[uint64]struct{}       // the INTAKE sequences acked for the anchor
	accepted  bool                      // m itself is accepted (settled but for its ack)
	next      uint64                    // the INTAKE sequence an anchor's drain reads from next
	ahead     []*jetstream.RawStreamMsg // read back by the drain, not taken yet
	settle    func() error              // m's ack or termination, made once an anchor's drain is done

	// notBefore: the entry waits until then before it is taken again (a
	// refusal DEAD had no room for, or a read that failed); wait is how
	// long it waited last, doubled on each failure in a row.
	notBefore time.Time
	wait      time.Duration
}

// later has e wait before it is taken again, twice as long as the last
// time in a row, from a second up to 5 s: room an operator frees in DEAD
// is taken within seconds, at one try per waiting account.
func (e *orderedEntry) later() {
	e.wait = min(max(2*e.wait, time.Second), 5*time.Second)
	e.notBefore = time.Now().Add(e.wait)
}

// draining reports whether e is an anchor with submissions left to take.
// owes reports whether a submission delegated to anchor e, from INTAKE
// sequence seq on, is yet to be read back.
func (e *orderedEntry) owes(seq uint64) bool {
	for d := range e.delegated {
		if d >= seq && d <= e.through {
			return true
		}
	}
	return false
}

func (e *orderedEntry) draining() bool {
	return e.through > 0 && (e.next <= e.through || len(e.ahead) > 0)
}

// delegate makes e an anchor standing for seq as well. A redelivered
// entry may already drain (through set to INTAKE's end when it was
// accepted) with no delegated submission yet.
func (e *orderedEntry) delegate(seq uint64) {
	if e.through == 0 {
		e.next = e.seq + 1
	}
	if e.delegated == nil {
		e.delegated = map[uint64]struct{}{}
	}
	e.delegated[seq] = struct{}{}
	e.through = max(e.through, seq)
}

func newOrderedQueue(delegate bool, answered func(nats.Header) bool) *orderedQueue {
	q := &orderedQueue{accounts: map[string][]*orderedEntry{}, delegate: delegate, answered: answered}
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

// push queues account's ordered m, waiting while the queue holds
// maxQueuedBytes (a message larger than that still goes into an empty
// queue). It reports true when an anchor of the account now stands for
// m: the caller acks m.
func (q *orderedQueue) push(account string, m jetstream.Msg) (anchored bool) {
	return q.add(account, m, true, false)
}

// extend makes the account's newest waiting entry, when it is an anchor,
// stand for m as well, and reports whether it does: the caller acks m.
// An account flooding unordered submissions keeps them behind its anchor
// while it has one.
func (q *orderedQueue) extend(account string, m jetstream.Msg) bool {
	seq, redelivered := sequence(m)
	q.mu.Lock()
	defer q.mu.Unlock()
	held := q.accounts[account]
	if !q.delegable(m, seq, redelivered) || len(held) == 0 {
		return false
	}
	if last := held[len(held)-1]; last.through > 0 && last.seq < seq {
		last.delegate(seq)
		return true
	}
	return false
}

// hold queues account's unordered m, as an anchor for the account's next
// submissions: the account fills the batch loops, and the others'
// submissions behind it in INTAKE must not wait for them. Reports true
// when an anchor already waiting stands for m instead: the caller acks m.
func (q *orderedQueue) hold(account string, m jetstream.Msg) (anchored bool) {
	return q.add(account, m, false, true)
}

// add queues m, or delegates it to the account's newest entry: an ordered
// m once the account holds heldPerAccount, an unordered one (anchor set)
// whenever that entry is older.
func (q *orderedQueue) add(account string, m jetstream.Msg, ordered, anchor bool) (anchored bool) {
	seq, redelivered := sequence(m)
	n := queuedSize(m)
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.delegable(m, seq, redelivered) {
		if held := q.accounts[account]; len(held) >= heldPerAccount || anchor && len(held) > 0 {
			if last := held[len(held)-1]; last.seq > 0 && last.seq < seq {
				last.delegate(seq)
				return true
			}
		}
	}
	for q.bytes > 0 && q.bytes+n > maxQueuedBytes && !q.closed {
		q.cond.Wait()
	}
	if len(q.accounts[account]) == 0 {
		q.turn = append(q.turn, account)
	}
	e := &orderedEntry{m: m, account: account, seq: seq, size: n, ordered: ordered,
		redelivered: q.delegate && redelivered && seq > 0}
	if anchor && q.delegate && seq > 0 {
		e.through, e.next, e.delegated = seq, seq+1, map[uint64]struct{}{}
	}
	q.accounts[account] = append(q.accounts[account], e)
	q.bytes += n
	q.cond.Broadcast()
	return false
}

// delegable reports whether m, at INTAKE sequence seq, may be acked for
// an anchor: only where INTAKE is trimmed, and never one delivered again
// (it drains behind itself: maybe a dead ingest's anchor) nor one an HTTP
// handler may wait for (answered).
func (q *orderedQueue) delegable(m jetstream.Msg, seq uint64, redelivered bool) bool {
	return q.delegate && seq > 0 && !redelivered && (q.answered == nil || !q.answered(m.Headers()))
}

// sequence is m's INTAKE sequence (0 when its metadata cannot be read)
// and whether it was delivered before.
func sequence(m jetstream.Msg) (uint64, bool) {
	meta, err := m.Metadata()
	if err != nil {
		return 0, false
	}
	return meta.Sequence.Stream, meta.NumDelivered > 1
}

// pop takes the oldest entry of the account whose turn it is, passing
// over an account whose oldest entry waits (notBefore), and waits for
// one; false once the queue is closed and empty. A closed queue waits for
// no entry.
func (q *orderedQueue) pop() (*orderedEntry, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for {
		if len(q.turn) == 0 {
			if q.closed {
				return nil, false
			}
			q.cond.Wait()
			continue
		}
		now := time.Now()
		var soonest time.Time
		for i, account := range q.turn {
			held := q.accounts[account]
			e := held[0]
			if !q.closed && e.notBefore.After(now) {
				if soonest.IsZero() || e.notBefore.Before(soonest) {
					soonest = e.notBefore
				}
				continue
			}
			q.turn = slices.Delete(q.turn, i, i+1)
			held[0] = nil
			if held = held[1:]; len(held) > 0 {
				q.accounts[account] = held
				q.turn = append(q.turn, account)
			} else {
				delete(q.accounts, account)
			}
			q.bytes -= e.size
			q.cond.Broadcast()
			return e, true
		}
		wake := time.AfterFunc(soonest.Sub(now), func() {
			q.mu.Lock()
			q.cond.Broadcast()
			q.mu.Unlock()
		})
		q.cond.Wait()
		wake.Stop()
	}
}

// putBack returns an entry that is not done (an anchor with more to
// read, or one waiting until its notBefore) to the head of its account's
// entries; its account takes its next turn after the others.
func (q *orderedQueue) putBack(e *orderedEntry) {
	q.mu.Lock()
	defer q.mu.Unlock()
	held := q.accounts[e.account]
	if len(held) == 0 {
		q.turn = append(q.turn, e.account)
	}
	q.accounts[e.account] = append([]*orderedEntry{e}, held...)
	q.bytes += e.size
	q.cond.Broadcast()
}

// closing reports whether the queue is closed: the service stops.
func (q *orderedQueue) closing() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.closed
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
	var waiting []jetstream.Msg
	for _, held := range q.accounts {
		for _, e := range held {
			waiting = append(waiting, e.m)
		}
	}
	q.mu.Unlock()
	for _, m := range waiting {
		_ = m.InProgress()
	}
}
