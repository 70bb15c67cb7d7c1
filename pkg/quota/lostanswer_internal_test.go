package quota

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/natstest"
)

// answerLost is a bucket whose next write is stored but answered with an
// error, as when the connection drops before the answer comes: lost is
// called then, before the error is returned.
type answerLost struct {
	jetstream.KeyValue
	mu   sync.Mutex
	lost func()
}

func (k *answerLost) lose(f func()) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.lost = f
}

func (k *answerLost) stored(rev uint64, err error) (uint64, error) {
	k.mu.Lock()
	f := k.lost
	k.lost = nil
	k.mu.Unlock()
	if err != nil || f == nil {
		return rev, err
	}
	f()
	return 0, errors.New("nats: timeout")
}

func (k *answerLost) Create(ctx context.Context, key string, v []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	return k.stored(k.KeyValue.Create(ctx, key, v, opts...))
}

func (k *answerLost) Update(ctx context.Context, key string, v []byte, last uint64) (uint64, error) {
	return k.stored(k.KeyValue.Update(ctx, key, v, last))
}

// openOn is Quotas with o on a connection of its own to srv, closed when
// the test ends.
func openOn(t *testing.T, srv *natstest.Server, o Options) *Quotas {
	t.Helper()
	_, js := srv.Conn(t)
	q, err := Open(context.Background(), js, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		q.Close(ctx)
	})
	return q
}

// A write that served a caller, stored but with its answer lost while
// the caller gave up, leaves the record holding a slot this replica does
// not: it is written again as this replica holds it, and the slot is
// free for the others. It was left there (nothing else to write) until
// this replica's next caller, and with one slot every other replica's
// callers waited meanwhile.
func TestASlotStoredWithItsAnswerLostIsWrittenBack(t *testing.T) {
	srv := natstest.Start(t)
	live := func() []string { return []string{"a", "b"} }
	a, b := openOn(t, srv, Options{Instance: "a", Live: live}), openOn(t, srv, Options{Instance: "b", Live: live})
	kv := &answerLost{KeyValue: a.kv}
	a.kv = kv
	lim, key := Limit{Concurrency: 1}, TargetKey("erp")
	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan error, 1)
	kv.lose(func() { // the caller gives up while the answer is lost
		cancel()
		if err := <-gone; !errors.Is(err, context.Canceled) {
			t.Errorf("a's caller: want it gone (cancelled), got %v", err)
		}
	})
	_, _, err := a.Acquire(ctx, key, lim)
	gone <- err
	bctx, bcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer bcancel()
	release, _, err := b.Acquire(bctx, key, lim)
	if err != nil {
		t.Fatalf("b's caller: want the one slot, held by no call, got %v", err)
	}
	release(Answer{OK: true})
}

// A token given back (a call not made) by a write stored but answered
// with an error is not given back again: at 1 a minute, two in the
// bucket, both taken and one given back, the next caller is served at
// once and the one after waits for the next token. Given back twice, the
// write's and again once the record was read, the target got one call
// past its rate.
func TestATokenGivenBackWithItsAnswerLostIsGivenOnce(t *testing.T) {
	q := openOn(t, natstest.Start(t), Options{Instance: "a"})
	kv := &answerLost{KeyValue: q.kv}
	q.kv = kv
	lim, key := Limit{Rate: 1.0 / 60, Burst: 2}, TargetKey("erp")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var releases []func(Answer)
	for range 2 {
		release, _, err := q.Acquire(ctx, key, lim)
		if err != nil {
			t.Fatal(err)
		}
		releases = append(releases, release)
	}
	rev := func() uint64 {
		e, err := kv.KeyValue.Get(ctx, key)
		if err != nil {
			return 0
		}
		return e.Revision()
	}
	before := rev()
	kv.lose(func() {})
	releases[1](Answer{NotMade: true})
	natstest.Eventually(t, 10*time.Second, func() bool { return rev() > before }, "want the give-back stored")
	served := 0
	for range 2 {
		actx, acancel := context.WithTimeout(ctx, 2*time.Second)
		release, _, err := q.Acquire(actx, key, lim)
		acancel()
		if err == nil {
			served++
			release(Answer{OK: true})
		}
	}
	releases[0](Answer{OK: true})
	if served != 1 {
		t.Fatalf("one token given back: want 1 caller served before the next token, got %d", served)
	}
}
