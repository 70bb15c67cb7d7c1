package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/directget"
)

// An account's messages are read by its owner, not delivered by a server
// consumer: a consumer costs the server ~33 KB of heap and three
// goroutines for as long as the account is live (docs/architecture.md,
// "Many accounts"), ~410 MB for 10,000 live accounts. The owner's tail
// reads the account's dispatch subjects from a cursor, in batches of
// direct gets, keeps at most limit messages unsettled, and does what the
// consumer did for each one it handed out:
//
//   - its lease stands in for the consumer's pin: only the owner reads;
//   - an unsettled message is handed out again after its AckWait (the
//     consumer's backoff) unless its handler reports progress, and after
//     a NAK's delay;
//   - it counts each message's deliveries (NumDelivered), and of them
//     those that lapsed (neither settled nor handed back before their
//     AckWait: their worker may have died), so a message that kills its
//     worker every time still ends in DEAD, and one handed back (NAK)
//     however often, its run not started, does not;
//   - its floor (the lowest unsettled sequence) is what the account is
//     trimmed to.
//
// It is woken by the partition's watch (watch.go) when its account has
// a message past its cursor. A new owner starts from the account's first
// message still in the stream; the record (the claim) decides what each
// still needs, as for a redelivery.

// tail reads one account's messages for its reader.
type tail struct {
	s       *Service
	account string
	stream  string // the EVENTS stream of the account's partition
	subject string // the account's dispatch subjects
	limit   int    // messages unsettled at once
	out     func(held) bool

	mu        sync.Mutex
	cursor    uint64 // the next sequence to read
	want      uint64 // the highest sequence the watch reported
	unsettled map[uint64]*tailEntry
	due       []*tailEntry // to hand out again
	caught    bool         // the last read found nothing past cursor
	relook    bool         // read even when caught (lookAgain)
	left      uint64       // the account's messages past the last read, as it found them
	news      int          // messages past the cursor the watch reported since the last read
	stopped   bool
	running   bool          // a loop goroutine is live (poke starts one)
	wake      chan struct{} // wakes a live loop
	quit      chan struct{}
	loops     sync.WaitGroup
	ctx       context.Context // ends at stop: a read under way returns at once
	cancel    context.CancelFunc
}

// tailEntry is one unsettled message: its deliveries and the timer that
// hands it out again.
type tailEntry struct {
	msg   *nats.Msg
	seq   uint64
	at    time.Time // stored at
	n     uint64    // deliveries
	lapse uint64    // of them, those that lapsed (see expire)
	back  bool      // the current delivery was handed back (again)
	cur   *tailMsg  // the current delivery
	timer *time.Timer
}

// tailBackoff spaces the deliveries of a message whose handler neither
// settles it nor reports progress, in AckWaits: a message that kills its
// worker is not handed out every AckWait.
var tailBackoff = []int64{1, 2, 4, 10}

func (s *Service) newTail(account string, limit int, out func(held) bool) *tail {
	t := &tail{
		s: s, account: account, stream: s.subj.EventsStream(account), subject: s.subj.EventsOf(account),
		limit: limit, out: out, cursor: 1, unsettled: map[uint64]*tailEntry{},
		wake: make(chan struct{}, 1), quit: make(chan struct{}),
	}
	t.ctx, t.cancel = context.WithCancel(s.runCtx)
	return t
}

// ackWait is how long the n-th delivery of a message waits for its
// settlement or progress before the next.
func (t *tail) ackWait(n uint64) time.Duration {
	w := t.s.cfg.Streams.AckWait.D()
	if w <= 0 {
		w = 30 * time.Second
	}
	return w * time.Duration(tailBackoff[min(int(max(n, 1)-1), len(tailBackoff)-1)])
}

// lookAgain makes the tail read past its cursor once more even though it
// has caught up and the watch reported nothing since: a backstop for a
// report that never came.
func (t *tail) lookAgain() {
	t.mu.Lock()
	t.relook = true
	t.mu.Unlock()
	t.poke()
}

// poke wakes the tail's loop, or starts it if it has ended: to hand out
// what is due, and to read when it may find something (read).
func (t *tail) poke() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	if !t.running {
		t.running = true
		t.loops.Add(1)
		go t.loop()
		return
	}
	// Sent under mu: a loop deciding to end (rest) sees it.
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// rest ends the loop when nothing has woken it meanwhile: a tail with
// nothing to do until a poke holds no goroutine, and no stack (4 KB each,
// 400 MB at 100,000 live accounts). It reports whether the loop ended;
// if not, it took the wake.
func (t *tail) rest() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	select {
	case <-t.wake:
		return false
	default:
	}
	t.running = false
	return true
}

// notify is the watch's news that the account has message seq; 0: a
// message published now, which the server may not have stored yet when
// the tail reads (it looks again soon if it finds none).
func (t *tail) notify(seq uint64) {
	t.mu.Lock()
	if seq == 0 {
		seq = t.cursor
	}
	if seq > t.want {
		t.want = seq
	}
	late := seq >= t.cursor
	if late {
		t.news++
	}
	t.mu.Unlock()
	if late {
		t.poke()
	}
}

// start runs the loop for the first read; from then on a poke runs it
// whenever it has ended.
func (t *tail) start() { t.poke() }

// stop ends the loop; what was handed out is still settled through it.
func (t *tail) stop() {
	t.mu.Lock()
	if !t.stopped {
		t.stopped = true
		close(t.quit)
		t.cancel()
		for _, e := range t.unsettled {
			if e.timer != nil { // nil: read, not handed out yet
				e.timer.Stop()
			}
		}
	}
	t.mu.Unlock()
	t.loops.Wait() // no loop starts once stopped is set
}

// floor is the highest sequence below which every message of the account
// this tail read is settled.
func (t *tail) floor() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	f := t.cursor - 1
	for seq := range t.unsettled {
		f = min(f, seq-1)
	}
	return f
}

// readAllBelow reports whether the tail has caught up, holds nothing, and
// read nothing above floor: then any message of its account in the stream
// is one it has not read.
func (t *tail) readAllBelow(floor uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.quietLocked() && len(t.unsettled) == 0 && t.cursor-1 <= floor
}

// idle reports whether the tail holds nothing and found nothing to read.
func (t *tail) idle() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.quietLocked() && len(t.unsettled) == 0
}

// quietLocked reports whether the tail has caught up and the watch has
// reported nothing past its cursor since. Callers hold t.mu.
func (t *tail) quietLocked() bool { return t.caught && t.want < t.cursor }

// loop hands out the messages due again and reads new ones while there is
// room, the account is not paused and this replica holds its lease.
func (t *tail) loop() {
	defer t.loops.Done()
	backoff := 10 * time.Millisecond
	misses := 0 // reads in a row that missed what the watch reported
	for {
		wait := time.Duration(-1) // until woken
		switch until := t.s.pausedUntil(t.account); {
		case !until.IsZero():
			wait = time.Until(until)
		case !t.s.owners.Current():
			wait = 100 * time.Millisecond // the lease may have moved: until the next heartbeat gets through
		case !t.s.owners.Holds(t.account):
			// Handed over: the owners' change reconciles this reader.
		default:
			if !t.redeliver() {
				return
			}
			r, err := t.read()
			switch {
			case err != nil:
				if t.ctx.Err() == nil {
					t.s.log.Debug().Err(err).Str("account", t.account).Msg("reading the account's messages")
				}
				wait, backoff = backoff, min(2*backoff, 2*time.Second)
			case r == readMore:
				backoff, misses = 10*time.Millisecond, 0
				continue
			case r == readAll:
				backoff = 10 * time.Millisecond
				if t.missed() {
					// The watch saw a message this read did not find: a
					// replica behind its leader answered. Look again
					// soon, for a second; then the sweep's poke will.
					if misses++; misses < 50 {
						wait = 20 * time.Millisecond
					} else {
						t.forgetWant()
						misses = 0
					}
				} else {
					misses = 0
				}
			}
		}
		if !t.pause(wait) {
			return
		}
	}
}

// pause ends the loop's round: it waits until woken, or for wait when it
// is not negative; a loop that would wait without a timer ends instead
// (rest), and one woken meanwhile goes round at once (rest took the
// wake). false: the loop ends.
func (t *tail) pause(wait time.Duration) bool {
	if wait < 0 {
		return !t.rest()
	}
	return t.sleep(wait)
}

// What a read found.
const (
	readFull = iota // no room: nothing read
	readAll         // read everything there was
	readMore        // the account has more past what it read
)

// missed reports whether the watch reported a message past the cursor.
func (t *tail) missed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.want >= t.cursor
}

func (t *tail) forgetWant() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.want = 0
}

// sleep waits until woken, or for wait when it is not negative; false when
// the tail stops.
func (t *tail) sleep(wait time.Duration) bool {
	var timer <-chan time.Time
	if wait >= 0 {
		tm := time.NewTimer(wait)
		defer tm.Stop()
		timer = tm.C
	}
	select {
	case <-t.quit:
		return false
	case <-t.s.runCtx.Done():
		return false
	case <-t.wake:
	case <-timer:
	}
	return true
}

// redeliver hands out again the messages due; false when stopped.
func (t *tail) redeliver() bool {
	t.mu.Lock()
	due := t.due
	t.due = nil
	t.mu.Unlock()
	for _, e := range due {
		if !t.handOut(e) {
			return false
		}
	}
	return true
}

// read reads up to the room left from the cursor and hands the messages
// out. A tail that has caught up reads again only once the watch reports
// a message past its cursor (or lookAgain): a read from inside the stream
// with the account's wildcard filter costs the server a walk of every
// message stored after the cursor, most of them other accounts', and a
// read after every settlement made that quadratic in the backlog
// (docs/performance.md, "Many accounts").
func (t *tail) read() (int, error) {
	t.mu.Lock()
	room := t.limit - len(t.unsettled)
	from := t.cursor
	uptodate := t.quietLocked() && !t.relook
	n := t.batchLocked(room)
	if room > 0 && !uptodate {
		t.relook, t.news = false, 0
	}
	t.mu.Unlock()
	if room <= 0 {
		return readFull, nil // a settlement pokes
	}
	if uptodate {
		return readAll, nil
	}
	ctx, cancel := context.WithTimeout(t.ctx, 5*time.Second)
	defer cancel()
	msgs, pending, err := t.s.getBatch(ctx, t.stream, t.subject, from, n)
	if err != nil {
		return readAll, err
	}
	t.mu.Lock()
	t.caught, t.left = pending == 0, pending
	entries := make([]*tailEntry, 0, len(msgs))
	for _, m := range msgs {
		subject, seq, at, err := directget.Meta(m)
		if err != nil || seq < t.cursor {
			continue
		}
		m.Subject = subject // it came on the request's inbox
		t.cursor = seq + 1
		e := &tailEntry{msg: m, seq: seq, at: at}
		t.unsettled[seq] = e
		entries = append(entries, e)
	}
	if t.want < t.cursor {
		t.news = 0 // reports that came during the read, of what it read
	}
	t.mu.Unlock()
	for _, e := range entries {
		if !t.handOut(e) {
			return readAll, nil
		}
	}
	if pending > 0 && len(msgs) > 0 {
		return readMore, nil
	}
	return readAll, nil
}

// batchLocked is how many messages the next read asks for, at most room:
// as many as the last read left or the watch reported since, else one
// (a first read, a look again). The server looks for a batch's next
// message until it finds one, so a batch larger than what there is makes
// it walk every message stored after the account's last, most of them
// other accounts'. Callers hold t.mu.
func (t *tail) batchLocked(room int) int {
	switch {
	case t.left > 0:
		return int(min(t.left, uint64(max(room, 1))))
	case t.news > 0:
		return min(t.news, max(room, 1))
	}
	return 1
}

// handOut delivers e once more; false when the tail stopped.
func (t *tail) handOut(e *tailEntry) bool {
	t.mu.Lock()
	if t.stopped {
		t.mu.Unlock()
		return false
	}
	if t.unsettled[e.seq] != e {
		t.mu.Unlock()
		return true // settled meanwhile
	}
	e.n++
	e.back = false
	d := &tailMsg{t: t, e: e, lapsed: e.lapse, meta: jetstream.MsgMetadata{
		Sequence:     jetstream.SequencePair{Stream: e.seq, Consumer: e.n},
		NumDelivered: e.n, Stream: t.stream, Consumer: "tail", Timestamp: e.at,
	}}
	e.cur = d
	if e.timer != nil {
		e.timer.Stop()
	}
	e.timer = time.AfterFunc(t.ackWait(e.n), func() { t.expire(d) })
	t.mu.Unlock()
	return t.out(held{m: d, meta: &d.meta, stop: t.s.keepAlive(d)})
}

// expire queues d's message to be handed out again, if d is still its
// current delivery and unsettled.
func (t *tail) expire(d *tailMsg) {
	t.mu.Lock()
	e := d.e
	if t.stopped || e.cur != d || t.unsettled[e.seq] != e {
		t.mu.Unlock()
		return
	}
	e.cur = nil // a late settlement of d still settles; its progress no longer counts
	if !e.back {
		e.lapse++ // its AckWait ran out: the worker may have died on it
	}
	t.due = append(t.due, e)
	t.mu.Unlock()
	t.poke()
}

// settle forgets e's message: acked or terminated.
func (t *tail) settle(e *tailEntry) {
	t.mu.Lock()
	if t.unsettled[e.seq] != e {
		t.mu.Unlock()
		return
	}
	delete(t.unsettled, e.seq)
	e.timer.Stop()
	t.mu.Unlock()
	t.poke()
}

// again hands d's message out again after delay (a NAK).
func (t *tail) again(d *tailMsg, delay time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := d.e
	if t.stopped || e.cur != d || t.unsettled[e.seq] != e {
		return
	}
	e.timer.Stop()
	e.back = true
	e.timer = time.AfterFunc(max(delay, 0), func() { t.expire(d) })
}

// progress restarts d's wait (InProgress).
func (t *tail) progress(d *tailMsg) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := d.e
	if t.stopped || e.cur != d || t.unsettled[e.seq] != e {
		return
	}
	e.timer.Reset(t.ackWait(e.n))
}

// tailMsg is one delivery of a tail's message, settled through the tail
// as a consumer's message is through the server.
type tailMsg struct {
	t      *tail
	e      *tailEntry
	meta   jetstream.MsgMetadata
	lapsed uint64 // the message's deliveries before this one that lapsed
}

// lapsed is how many of m's deliveries before this one lapsed (their
// worker may have died on them): a tail's count, else (a consumer's
// message) all of them.
func lapsed(m jetstream.Msg, meta *jetstream.MsgMetadata) uint64 {
	if d, ok := m.(*tailMsg); ok {
		return d.lapsed
	}
	return meta.NumDelivered - 1
}

var _ jetstream.Msg = (*tailMsg)(nil)

func (d *tailMsg) Metadata() (*jetstream.MsgMetadata, error) { m := d.meta; return &m, nil }
func (d *tailMsg) Data() []byte                              { return d.e.msg.Data }
func (d *tailMsg) Headers() nats.Header                      { return d.e.msg.Header }
func (d *tailMsg) Subject() string                           { return d.e.msg.Subject }
func (d *tailMsg) Reply() string                             { return "" }
func (d *tailMsg) Ack() error                                { d.t.settle(d.e); return nil }
func (d *tailMsg) DoubleAck(context.Context) error           { d.t.settle(d.e); return nil }
func (d *tailMsg) Term() error                               { d.t.settle(d.e); return nil }
func (d *tailMsg) TermWithReason(string) error               { d.t.settle(d.e); return nil }
func (d *tailMsg) Nak() error                                { d.t.again(d, 0); return nil }
func (d *tailMsg) NakWithDelay(delay time.Duration) error    { d.t.again(d, delay); return nil }
func (d *tailMsg) InProgress() error                         { d.t.progress(d); return nil }

// getBatch reads up to n of stream's messages on subject from sequence
// from, by one batched direct get, and the number of the subject's
// messages left past them.
func (s *Service) getBatch(ctx context.Context, stream, subject string, from uint64, n int) ([]*nats.Msg, uint64, error) {
	msgs, pending, err := s.gets.Get(ctx, stream, directget.Request{Seq: from, NextFor: subject, Batch: n})
	if errors.Is(err, directget.ErrNoDirect) {
		// The stream was applied by a version that did not allow direct
		// gets (a rolling upgrade). One message at a time from the
		// stream's leader meanwhile.
		return s.getOne(ctx, stream, subject, from)
	}
	return msgs, pending, err
}

// getOne reads stream's first message on subject from sequence from,
// through the stream's leader ($JS.API.STREAM.MSG.GET), as a direct get's
// answer would have it; pending is 1 when one was found (there may be
// more).
func (s *Service) getOne(ctx context.Context, stream, subject string, from uint64) ([]*nats.Msg, uint64, error) {
	req, err := json.Marshal(directget.Request{Seq: from, NextFor: subject})
	if err != nil {
		return nil, 0, err
	}
	resp, err := s.nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+stream, req)
	if err != nil {
		return nil, 0, fmt.Errorf("get from %s: %w", stream, err)
	}
	var r struct {
		Message *struct {
			Subject string    `json:"subject"`
			Seq     uint64    `json:"seq"`
			Header  []byte    `json:"hdrs"`
			Data    []byte    `json:"data"`
			Time    time.Time `json:"time"`
		} `json:"message"`
		Error *struct {
			Code        int    `json:"code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return nil, 0, fmt.Errorf("get from %s: %w", stream, err)
	}
	switch {
	case r.Error != nil && r.Error.Code == 404:
		return nil, 0, nil
	case r.Error != nil:
		return nil, 0, fmt.Errorf("get from %s: %d %s", stream, r.Error.Code, r.Error.Description)
	case r.Message == nil:
		return nil, 0, fmt.Errorf("get from %s: no message in the answer", stream)
	}
	m := &nats.Msg{Subject: r.Message.Subject, Data: r.Message.Data, Header: nats.Header{}}
	if len(r.Message.Header) > 0 {
		if m.Header, err = nats.DecodeHeadersMsg(r.Message.Header); err != nil {
			return nil, 0, fmt.Errorf("get from %s: %w", stream, err)
		}
	}
	m.Header.Add(jetstream.SubjectHeader, r.Message.Subject)
	m.Header.Add(jetstream.SequenceHeader, strconv.FormatUint(r.Message.Seq, 10))
	m.Header.Add(jetstream.TimeStampHeaer, r.Message.Time.Format(time.RFC3339Nano))
	return []*nats.Msg{m}, 1, nil
}
