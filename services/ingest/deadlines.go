package ingest

import (
	"context"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/tenaz/tenaz/pkg/queue"
)

// deadlines purges the callback deadlines that applied webhooks made
// moot, off the webhook's response path: the answer then costs the reads
// and the one compare-and-set any receiver must make, and no more. A purge
// lost to a crash costs nothing but a late timer, which finds the event
// done and is a recorded no-op.
type deadlines struct {
	q   *queue.Queue
	log zerolog.Logger

	mu     sync.Mutex
	closed bool
	ch     chan deadline
	wg     sync.WaitGroup
}

type deadline struct{ account, id string }

// deadlineWorkers purge at once: enough to keep up with webhooks answered
// by every HTTP worker, few enough to stay a small share of the server.
const deadlineWorkers = 4

func newDeadlines(q *queue.Queue, log zerolog.Logger) *deadlines {
	d := &deadlines{q: q, log: log, ch: make(chan deadline, 4096)}
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

// cancel purges one event's deadline now.
func (d *deadlines) cancel(c deadline) {
	ctx, stop := context.WithTimeout(context.Background(), 5*time.Second)
	defer stop()
	if err := d.q.CancelSchedule(ctx, c.account, c.id); err != nil {
		d.log.Warn().Err(err).Str("event_id", c.id).Msg("deadline not cancelled; it will find the event done")
	}
}

// add queues the purge of an event's deadline; when the queue is full or
// closed, it purges in the caller, so that a backlog slows webhooks down
// rather than growing without bound.
func (d *deadlines) add(account, id string) {
	d.mu.Lock()
	if !d.closed {
		select {
		case d.ch <- deadline{account, id}:
			d.mu.Unlock()
			return
		default:
		}
	}
	d.mu.Unlock()
	d.cancel(deadline{account, id})
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
