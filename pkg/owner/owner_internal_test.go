package owner

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/streams"
)

// joinAlone joins d1 alone to a server of its own, with o's other
// options. Its heartbeat is of an hour: no tick comes during a test,
// which sets a stall's or a lapse's marks by hand.
func joinAlone(t *testing.T, o Options) (*Group, context.Context) {
	t.Helper()
	srv := natstest.Start(t)
	_, js := srv.Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	if _, err := streams.Apply(ctx, js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	o.Instance, o.Heartbeat = "d1", time.Hour
	g, err := Join(ctx, js, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Leave(context.Background()) })
	return g, ctx
}

// A replica that stalled (SIGSTOP, a paused VM) longer than the others'
// Expiry + Linger has heard nobody meanwhile: until it is current again
// and has heard from them since, it counts every replica it knows of, so
// that a shared limit's record it writes on waking does not drop the
// others' slots (pkg/quota prunes the replicas not Counted), which a
// third replica would then fill beside their calls. Only a failed
// heartbeat (cut) used to make it count everyone.
func TestAStalledReplicaCountsEveryoneItKnows(t *testing.T) {
	t.Parallel()
	g, _ := joinAlone(t, Options{Linger: func() time.Duration { return 10 * time.Second }})
	long := g.o.Expiry + 20*time.Second
	counted := func() []string {
		t.Helper()
		return g.Counted()
	}

	g.mu.Lock()
	now := time.Now()
	g.seen["d2"] = heard{at: now.Add(-2 * long), rev: 1}
	g.sent = now.Add(-long) // stalled: its last heartbeat went long ago
	g.mu.Unlock()
	if got := counted(); !slices.Equal(got, []string{"d1", "d2"}) {
		t.Fatalf("stalled: want every replica it knows counted, got %v", got)
	}

	// Current again (the tick after the stall marks since): d2 is taken
	// as heard then, its heartbeats on their way through the watch.
	g.mu.Lock()
	g.sent, g.since = time.Now(), time.Now()
	g.mu.Unlock()
	if got := counted(); !slices.Equal(got, []string{"d1", "d2"}) {
		t.Fatalf("current again, d2 not heard yet: want d2 counted, got %v", got)
	}

	// Current all along, d2 unheard for longer than Expiry + Linger: dead.
	g.mu.Lock()
	g.since = time.Time{}
	g.mu.Unlock()
	if got := counted(); !slices.Equal(got, []string{"d1"}) {
		t.Fatalf("current, d2 long unheard: want d2 no longer counted, got %v", got)
	}
}

// After a lapse a replica is Current again only once its watch has
// applied the bucket up to its first heartbeat that got through: until
// then, a lease another replica took meanwhile may not have reached it,
// and Holds answers from before the lapse. It used to be Current as soon
// as that heartbeat got through, and its tails read and called for an
// account beside the replica that had taken it over.
func TestCurrentWaitsForTheWatchAfterALapse(t *testing.T) {
	t.Parallel()
	g, ctx := joinAlone(t, Options{})
	natstest.Eventually(t, 10*time.Second, g.Current, "want d1 current once joined")

	// d2 takes acme while d1 is taken for dead; d1's first heartbeat
	// after the lapse is written after it (the fence), and d1's watch has
	// applied neither yet.
	if _, err := g.kv.Put(ctx, leasePrefix+"acme", []byte("d1")); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 10*time.Second, func() bool { return g.Holds("acme") }, "want d1 to hold acme")
	lapses := g.Lapses()
	g.mu.Lock()
	if _, err := g.kv.Put(ctx, leasePrefix+"acme", []byte("d2")); err != nil {
		g.mu.Unlock()
		t.Fatal(err)
	}
	rev, err := g.beat(ctx)
	if err != nil {
		g.mu.Unlock()
		t.Fatal(err)
	}
	g.lapses++ // as the heartbeat loop marks a lapse
	g.fence = rev
	g.sent = time.Now()
	g.mu.Unlock()
	// From here the watch catches up: at no moment is d1 current while it
	// still takes itself for acme's holder.
	natstest.Eventually(t, 10*time.Second, func() bool {
		current := g.Current()
		if current && g.Holds("acme") {
			t.Fatal("current again before its watch caught up: d1 still takes itself for acme's holder")
		}
		return current
	}, "want d1 current once its watch reached its heartbeat")
	if g.Holds("acme") {
		t.Fatal("current again: want d1 to know that d2 took acme")
	}
	if g.CurrentSince(lapses) || !g.CurrentSince(lapses+1) {
		t.Fatal("CurrentSince: want work begun before the lapse refused, and after it allowed")
	}
}

// A takeover whose write was stored but whose answer was lost (a leader
// change) is found done by the next Acquire, which says the takeover's
// since all the same: the new holder paces its first call after the last
// holder's calls. It said nothing (the lease already this replica's),
// and the account's first call went out at once, seconds after the last
// holder's.
func TestATakeoverWhoseAnswerWasLostSaysSince(t *testing.T) {
	t.Parallel()
	g, ctx := joinAlone(t, Options{})
	if _, err := g.kv.Put(ctx, leasePrefix+"acme", []byte("d2")); err != nil {
		t.Fatal(err)
	}
	if err := g.kv.Delete(ctx, leasePrefix+"acme"); err != nil { // d2 gave it back
		t.Fatal(err)
	}
	m, err := g.kvs.GetLastMsgForSubject(ctx, g.leaseSubject(leasePrefix+"acme"))
	if err != nil {
		t.Fatal(err)
	}
	gaveBack := m.Time

	// d1's takeover is stored; its answer never comes.
	g.mu.Lock()
	g.taking["acme"] = gaveBack
	g.mu.Unlock()
	if _, err := g.kv.Update(ctx, leasePrefix+"acme", []byte("d1"), m.Sequence); err != nil {
		t.Fatal(err)
	}
	ok, since, err := g.Acquire(ctx, "acme")
	if err != nil || !ok || !since.Equal(gaveBack) {
		t.Fatalf("Acquire after a takeover whose answer was lost: want ok with since %s, got %v %s %v", gaveBack, ok, since, err)
	}
	if ok, since, err := g.Acquire(ctx, "acme"); err != nil || !ok || !since.IsZero() {
		t.Fatalf("Acquire again, the lease held: want ok with no since, got %v %s %v", ok, since, err)
	}
}
