package poller

import (
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/event"
)

// A poller replica's workers serve every account's polls and deadlines,
// fed by one consumer per partition. Fed straight to the workers, one
// account whose provider answers polls slowly would hold them all, and
// the timers of the accounts behind it would wait (20 s for a 1 s
// interval in TestSlowAccountsPollsLeaveTheOthersTheirs). So the timers
// fired for an account wait in that account's own line, and a free
// worker takes the first timer of the next account in turn:
//   - An account runs at most share timers at once. The rest of the
//     workers (a quarter, at least one) are left to the others, however
//     slow its polls; alone, it still has the share.
//   - An account holds at most hold timers on a replica, waiting or
//     running. Beyond that its timers are put off (set again for later
//     and acked): unacked, they would fill the consumer's ack window
//     (max_ack_pending), which every account of the partition shares.
//     At most hold of them come back in one poll interval (backAt), so
//     that a crowd costs a write per hold timers an interval, not one
//     per timer beyond the hold.
//   - A timer held, waiting in its line or running, is kept alive
//     (InProgress) so that it is not redelivered, nor counted as one
//     more delivery, however long it waits; the consumer's ack wait can
//     then be short, and a killed replica's timers come back soon.
//
// Turns cost no write: only a timer put off for its account's hold
// writes (its timer again), and only while the account has more timers
// due than its workers can take.

// errStopping: the replica stops and takes no more timers.
var errStopping = errors.New("poller stopping")

// errCrowded: the timer's account holds all the timers it may here.
var errCrowded = errors.New("the account holds as many timers as it may here")

// turns is the accounts' lines of fired timers, shared by the workers.
type turns struct {
	share, hold int

	mu     sync.Mutex
	more   *sync.Cond // a line became ready, or turns closed
	lines  map[string]*line
	ready  []string // accounts with a timer waiting and a worker to spare, in turn order
	closed bool
}

// line is one account's timers on this replica.
type line struct {
	waiting []fired
	running []fired
	ready   bool // in turns.ready

	// The account's timers put off for its crowd come back from back
	// on; backs of them come back in the interval that starts there
	// (none before its own earliest).
	back  time.Time
	backs int
}

// fired is a timer the consumer delivered, with its decoded envelope.
type fired struct {
	m    jetstream.Msg
	env  event.Envelope
	kept time.Time // when it arrived or was last kept alive
}

// newTurns shares workers between accounts as said above.
func newTurns(workers int) *turns {
	t := &turns{share: max(1, workers-max(1, workers/4)), hold: holdPerWorker * workers, lines: map[string]*line{}}
	t.more = sync.NewCond(&t.mu)
	return t
}

// holdPerWorker sets hold: at the default 32 workers an account holds at
// most 256 timers on a replica, 1/16 of a partition's ack window.
const holdPerWorker = 8

// add puts f in its account's line: errStopping once closed,
// errCrowded when the account holds hold timers already.
func (t *turns) add(f fired) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return errStopping
	}
	l, ok := t.lines[f.env.Account]
	if !ok {
		l = &line{}
		t.lines[f.env.Account] = l
	}
	if len(l.waiting)+len(l.running) >= t.hold {
		return errCrowded
	}
	l.waiting = append(l.waiting, f)
	t.readyLocked(f.env.Account, l)
	return nil
}

// next waits for the next account's turn and returns its first timer,
// counted running until done; false once closed.
func (t *turns) next() (fired, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for len(t.ready) == 0 && !t.closed {
		t.more.Wait()
	}
	if t.closed {
		return fired{}, false
	}
	account := t.ready[0]
	t.ready = t.ready[1:]
	l := t.lines[account]
	l.ready = false
	f := l.waiting[0]
	l.waiting[0] = fired{}
	l.waiting = l.waiting[1:]
	l.running = append(l.running, f)
	t.readyLocked(account, l) // to the back of the turn order
	return f, true
}

// done takes f, one of its account's running timers, out of turns.
func (t *turns) done(f fired) {
	t.mu.Lock()
	defer t.mu.Unlock()
	account := f.env.Account
	l := t.lines[account]
	if i := slices.IndexFunc(l.running, func(r fired) bool { return r.m == f.m }); i >= 0 {
		l.running = slices.Delete(l.running, i, i+1)
	}
	if len(l.running) == 0 && len(l.waiting) == 0 {
		delete(t.lines, account)
		return
	}
	t.readyLocked(account, l)
}

// backAt is when a timer of account put off for its crowd comes back:
// at earliest, or in a later interval (every) if hold of its timers come
// back in earliest's already. Each put-off timer goes to the end of the
// account's crowd, which comes back at hold an interval, whatever its
// size.
func (t *turns) backAt(account string, earliest time.Time, every time.Duration) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	l, ok := t.lines[account]
	if !ok { // the crowd went meanwhile
		return earliest
	}
	switch {
	case earliest.Sub(l.back) >= every: // the crowd's last interval is past
		l.back, l.backs = earliest, 0
	case l.backs >= t.hold:
		l.back, l.backs = l.back.Add(every), 0
	}
	l.backs++
	if l.back.Before(earliest) {
		return earliest
	}
	return l.back
}

// readyLocked gives account a turn if it has a timer waiting and a
// worker to spare.
func (t *turns) readyLocked(account string, l *line) {
	if l.ready || len(l.waiting) == 0 || len(l.running) >= t.share {
		return
	}
	l.ready = true
	t.ready = append(t.ready, account)
	t.more.Signal()
}

// stale returns the timers held (waiting or running) and last kept
// alive before before, marked kept now.
func (t *turns) stale(before time.Time) []jetstream.Msg {
	t.mu.Lock()
	defer t.mu.Unlock()
	var ms []jetstream.Msg
	now := time.Now()
	for _, l := range t.lines {
		for _, held := range [][]fired{l.waiting, l.running} {
			for i := range held {
				if held[i].kept.Before(before) {
					held[i].kept = now
					ms = append(ms, held[i].m)
				}
			}
		}
	}
	return ms
}

// close takes no more timers, ends the workers' waits and returns the
// timers that were waiting (running ones finish).
func (t *turns) close() []jetstream.Msg {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	var ms []jetstream.Msg
	for _, l := range t.lines {
		for _, f := range l.waiting {
			ms = append(ms, f.m)
		}
		l.waiting = nil
	}
	t.ready = nil
	t.more.Broadcast()
	return ms
}
