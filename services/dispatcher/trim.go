package dispatcher

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenaz/tenaz/pkg/metrics"
	"github.com/tenaz/tenaz/pkg/queue"
)

// An account's messages leave EVENTS (pkg/queue, TrimTo) when its owner
// purges the account's dispatch subjects up to its tail's floor (below
// the lowest unsettled message): once its reader has taken trimBatch
// messages since the last trim, or took one more than streams.trim_after
// ago, and when an idle account is retired; never past a message not
// settled. A purge per batch, not per message: each is a write of the
// stream. Handing an account over or stopping does not trim: the next
// owner does, and 10,000 purges would slow a replica's stop.
//
// A new owner (after a handover, a restart, an idle account's next event)
// starts from the messages still in the stream: those settled since the
// last trim come again, and the claim drops them as stale copies.

// trimBatch is how many messages a reader takes before its account is
// trimmed; trimEvery how often the readers are looked at. While a
// reader's floor stays (a slow call in flight) it waits twice as long
// each time, up to trimWaitMax.
const (
	trimBatch   = 64
	trimEvery   = 500 * time.Millisecond
	trimWaitMax = 8 * time.Second
)

// trimmer is a reader's trimming state.
type trimmer struct {
	taken atomic.Uint64 // the highest stream sequence its reader took
	since atomic.Int64  // messages taken and not trimmed yet, about
	first atomic.Int64  // unix nanos of the first of those

	mu    sync.Mutex    // one trim of the account at a time
	floor atomic.Uint64 // the floor trimmed to; read without waiting for a trim under way
	wait  time.Duration
	next  time.Time
}

// took notes a message the reader took.
func (t *trimmer) took(seq uint64, now time.Time) {
	if t.since.Add(1) == 1 {
		t.first.Store(now.UnixNano())
	}
	for {
		had := t.taken.Load()
		if seq <= had || t.taken.CompareAndSwap(had, seq) {
			return
		}
	}
}

// due reports whether the reader took trimBatch messages since the last
// trim, or its first of them more than after ago, and its wait is over.
func (t *trimmer) due(now time.Time, after time.Duration) bool {
	n := t.since.Load()
	if n == 0 || n < trimBatch && now.Sub(time.Unix(0, t.first.Load())) < after {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.taken.Load() > t.floor.Load() && !now.Before(t.next)
}

// trimLoop trims the readers that are due, startsAtOnce at a time.
func (s *Service) trimLoop() {
	defer s.bg.Done()
	tick := time.NewTicker(trimEvery)
	defer tick.Stop()
	for {
		select {
		case <-s.runCtx.Done():
			return
		case <-tick.C:
		}
		now := time.Now()
		var due []*reader
		s.mu.Lock()
		for _, l := range s.readers {
			if l.trim.due(now, s.cfg.Streams.TrimAfter.D()) {
				due = append(due, l)
			}
		}
		s.mu.Unlock()
		s.trimAll(s.runCtx, due)
	}
}

// trimAll trims the accounts of readers, startsAtOnce at a time.
func (s *Service) trimAll(ctx context.Context, readers []*reader) {
	var wg sync.WaitGroup
	slots := make(chan struct{}, startsAtOnce)
	for _, l := range readers {
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			s.trimAccount(ctx, l)
		}()
	}
	wg.Wait()
}

// trimAccount purges l's account up to its tail's floor.
func (s *Service) trimAccount(ctx context.Context, l *reader) {
	st := s.streamOf(l.account)
	t := &l.trim
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.since.Load()
	f, err := queue.TrimTo(ctx, st, s.subj.EventsOf(l.account), l.tail.floor(), t.floor.Load())
	if err != nil && ctx.Err() == nil {
		s.o.Metrics.TrimFailed(metrics.TrimEvents)
		s.log.Debug().Err(err).Str("account", l.account).Msg("trimming the account's messages")
	}
	if f > t.floor.Load() {
		t.floor.Store(f)
		t.wait = trimEvery
	} else {
		t.wait = min(max(2*t.wait, trimEvery), trimWaitMax)
	}
	t.next = time.Now().Add(t.wait)
	if f >= t.taken.Load() {
		// Every message taken is trimmed; those taken meanwhile stay
		// counted. Otherwise some were in flight: due again after the wait.
		t.since.Add(-n)
	}
}
