package breaker

import (
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// drainTimeout bounds how long Stop waits for the watcher's channel to close
// after unsubscribing.
const drainTimeout = 5 * time.Second

// watch applies every value of the bucket (and every value this replica
// wrote) to the local breakers and reports transitions to OnChange. It never
// writes to the bucket.
func (r *Registry) watch(ready chan<- struct{}) {
	defer close(r.done)
	defer r.cancel()
	defer r.drain()
	if r.status != nil {
		defer r.nc.RemoveStatusListener(r.status)
	}
	updates := r.w.Updates()
	for {
		select {
		case <-r.stop:
			return
		case ow := <-r.own:
			r.report(ow.b, ow.rec, ow.rev)
		case <-r.status:
			// Reconnected: the server may have lost the watch's consumer
			// (a restart). Watch again: the new watch delivers every
			// current value, and values already seen are not reported
			// twice (revisions).
			w, err := r.kv.WatchAll(r.wctx)
			if err != nil {
				r.log.Warn().Err(err).Msg("breaker: watching again after a reconnect failed; the old watch recovers on its own")
				continue
			}
			old := r.w
			r.w, updates = w, w.Updates()
			go drainWatcher(old, r.log)
		case e, ok := <-updates:
			if !ok {
				r.log.Warn().Msg("breaker watcher closed (connection closed?)")
				return
			}
			if e == nil {
				if ready != nil {
					close(ready)
					ready = nil
				}
				continue
			}
			r.apply(e)
		}
	}
}

// drain unsubscribes and empties the watcher's channel until the client
// closes it, so the subscription's delivery goroutine is never left blocked
// on a full channel.
func (r *Registry) drain() { drainWatcher(r.w, r.log) }

func drainWatcher(w jetstream.KeyWatcher, log zerolog.Logger) {
	_ = w.Stop()
	t := time.NewTimer(drainTimeout)
	defer t.Stop()
	for {
		select {
		case _, ok := <-w.Updates():
			if !ok {
				return
			}
		case <-t.C:
			log.Warn().Msg("breaker watcher did not close")
			return
		}
	}
}

func (r *Registry) apply(e jetstream.KeyValueEntry) {
	account, target, ok := strings.Cut(e.Key(), ".")
	if !ok || validToken(account) != nil || validToken(target) != nil {
		r.log.Warn().Str("key", e.Key()).Msg("breaker: ignoring a key that is not <account>.<target>")
		return
	}
	rec := record{State: Closed, Reason: "deleted", UpdatedAt: e.Created()}
	if e.Operation() == jetstream.KeyValuePut {
		var err error
		if rec, err = decode(e.Value()); err != nil {
			r.log.Warn().Err(err).Str("key", e.Key()).Uint64("revision", e.Revision()).Msg("breaker: ignoring a value")
			return
		}
	}
	r.report(r.breaker(account, target), rec, e.Revision())
}

// report adopts a value, sets the breaker's gauge (tenaz_breaker_state) and
// calls OnChange if it is a transition not reported yet. Only the watcher
// goroutine calls it, so OnChange runs on one goroutine, in revision order
// per breaker.
func (r *Registry) report(b *Breaker, rec record, rev uint64) {
	c, changed := b.seen(rec, rev)
	if c.State != "" { // "": an older revision than one already seen
		r.metrics.BreakerState(b.account, b.target, string(c.State))
	}
	if changed && r.onChange != nil {
		r.onChange(c)
	}
}

// ownWrite is a value this replica wrote, handed to the watcher directly.
type ownWrite struct {
	b   *Breaker
	rec record
	rev uint64
}

// wrote hands a value this replica has just written to the watcher, so
// that its transition is reported even if the bucket replaces the value
// before the watch delivers it. It never blocks (OnChange may itself lead
// to a write); if the queue is full the watch still delivers the value.
func (r *Registry) wrote(b *Breaker, rec record, rev uint64) {
	select {
	case r.own <- ownWrite{b, rec, rev}:
	default:
	}
}
