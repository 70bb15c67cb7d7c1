package ingest

import (
	"context"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/tenaz/tenaz/pkg/lane"
	"github.com/tenaz/tenaz/pkg/queue"
	"github.com/tenaz/tenaz/pkg/state"
)

// deadlines purges the callback deadlines that applied webhooks made
// moot, and wakes the next event of an ordered lane, off the webhook's
// response path: the answer then costs the reads and the one
// compare-and-set any receiver must make, and no more. A purge lost to a
// crash costs nothing but a late timer, which finds the event done, is a
// recorded no-op and wakes the lane's next event if nobody had; that
// event's own parking schedule wakes it sooner if the deadline is far.
type deadlines struct {
	q     *queue.Queue
	order lane.Order
	log   zerolog.Logger

	mu     sync.Mutex
	closed bool
	ch     chan deadline
	wg     sync.WaitGroup
}

type deadline struct{ rec state.Record } // as the callback stored it

// deadlineWorkers purge at once: enough to keep up with webhooks answered
// by every HTTP worker, few enough to stay a small share of the server.
const deadlineWorkers = 4

func newDeadlines(q *queue.Queue, order lane.Order, log zerolog.Logger) *deadlines {
	d := &deadlines{q: q, order: order, log: log, ch: make(chan deadline, 4096)}
	for range deadlineWorkers {
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			for c := range d.ch {
				d.cancel(c)
			}
		}()
	}
	return d
}

// cancel wakes what waits behind one event in its lane and purges the
// event's deadline, now.
func (d *deadlines) cancel(c deadline) {
	ctx, stop := context.WithTimeout(context.Background(), 5*time.Second)
	defer stop()
	log := d.log.With().Str("event_id", c.rec.ID).Logger()
	if err := d.order.Advance(log.WithContext(ctx), c.rec); err != nil {
		log.Warn().Err(err).Msg("the next event of its lane not woken; its parking schedule wakes it")
	}
	if err := d.q.CancelSchedule(ctx, c.rec.Account, c.rec.ID); err != nil {
		log.Warn().Err(err).Msg("deadline not cancelled; it will find the event done")
	}
}

// add queues the purge of the deadline of rec, just completed; when the
// queue is full or closed, it purges in the caller, so that a backlog
// slows webhooks down rather than growing without bound.
func (d *deadlines) add(rec state.Record) {
	d.mu.Lock()
	if !d.closed {
		select {
		case d.ch <- deadline{rec}:
			d.mu.Unlock()
			return
		default:
		}
	}
	d.mu.Unlock()
	d.cancel(deadline{rec})
}

// close purges what is queued and stops the workers.
func (d *deadlines) close() {
	d.mu.Lock()
	if !d.closed {
		d.closed = true
		close(d.ch)
	}
	d.mu.Unlock()
	d.wg.Wait()
}
