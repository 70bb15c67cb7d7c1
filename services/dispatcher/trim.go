package dispatcher

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenaz/tenaz/pkg/queue"
)

// An account's messages leave a trimmed EVENTS (pkg/queue, Trim) when its
// owner purges the account's dispatch subjects up to its consumer's ack
// floor: a few times a second while its reader takes messages, when the
// reader stops (a handover, an idle account's retirement, the replica
// stopping), never below a message not settled. On a work-queue EVENTS (a
// store from before) the acks delete and nothing is trimmed.
//
// A consumer made again (after a server restart, or an idle account's next
// event) starts from the messages still in the stream: those acked since
// the last trim come again, and the claim drops them as stale copies.

// trimEvery is how often a reader that took messages is trimmed; while
// its floor stays (a slow call in flight) it waits twice as long each
// time, up to trimWaitMax.
const (
	trimEvery   = 500 * time.Millisecond
	trimWaitMax = 8 * time.Second
)

// trimmer is a reader's trimming state.
type trimmer struct {
	taken atomic.Uint64 // the highest stream sequence its reader took

	mu    sync.Mutex // one trim of the account at a time
	floor uint64     // the ack floor trimmed to
	wait  time.Duration
	next  time.Time
}

// took notes a message the reader took.
func (t *trimmer) took(seq uint64) {
	for {
		had := t.taken.Load()
		if seq <= had || t.taken.CompareAndSwap(had, seq) {
			return
		}
	}
}

// behind reports whether the reader took a message beyond the floor.
func (t *trimmer) behind() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.taken.Load() > t.floor
}

// due reports whether the reader took a message beyond the floor and its
// wait is over.
func (t *trimmer) due(now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.taken.Load() > t.floor && !now.Before(t.next)
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
			if l.trim.due(now) {
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

// trimAccount purges l's account up to its consumer's ack floor, if its
// partition's EVENTS is trimmed.
func (s *Service) trimAccount(ctx context.Context, l *reader) {
	st := s.streamOf(l.account)
	if !queue.Trims(st) {
		return
	}
	t := &l.trim
	t.mu.Lock()
	defer t.mu.Unlock()
	f, err := queue.Trim(ctx, st, l.cons, s.subj.EventsOf(l.account), t.floor)
	if err != nil && ctx.Err() == nil {
		s.log.Debug().Err(err).Str("account", l.account).Msg("trimming the account's messages")
	}
	if f > t.floor {
		t.floor, t.wait = f, trimEvery
	} else {
		t.wait = min(max(2*t.wait, trimEvery), trimWaitMax)
	}
	t.next = time.Now().Add(t.wait)
}
