package metrics_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tenaz/tenaz/pkg/metrics"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
)

// fakeClock is the cache's clock, moved by the test.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestWatchBacklog reads the accounts' messages in a real EVENTS on an
// embedded server: per-account counts (the schedules are not an
// account's backlog), the cache, a trim, a failed read, and stop.
func TestWatchBacklog(t *testing.T) {
	srv := natstest.Start(t)
	_, js := srv.Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	publish := func(subject string, n int) {
		for range n {
			if _, err := js.Publish(ctx, subject, []byte("{}")); err != nil {
				t.Fatal(err)
			}
		}
	}
	publish("tenaz.events.acme.order.create", 2)
	publish("tenaz.events.acme.order.cancel", 1)
	publish("tenaz.events.beta.order.create", 2)
	publish("tenaz.sched.ev_1", 1) // a schedule, no account's backlog

	s, reg := setup(t)
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	stop := s.WatchBacklog(js, metrics.BacklogOptions{Now: clock.Now})
	defer stop()

	nameList := []string{metrics.NamePending, metrics.NameAckPending, metrics.NamePaused, metrics.NameBacklogUp, metrics.NameRunnable}
	// The pauses are not known: no paused series, every message runnable.
	compare(t, reg, `
		tenaz_consumer_pending_messages{account="acme"} 3
		tenaz_consumer_pending_messages{account="beta"} 2
		tenaz_consumer_ack_pending_messages{account="acme"} 0
		tenaz_consumer_ack_pending_messages{account="beta"} 0
		tenaz_consumer_backlog_up 1
		tenaz_backlog_runnable_messages 5
	`, nameList...)

	// Two more for acme, beta's trimmed by its owner. The cached read
	// still answers until the TTL has passed.
	publish("tenaz.events.acme.order.create", 2)
	events, err := js.Stream(ctx, names.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	if err := events.Purge(ctx, jetstream.WithPurgeSubject("tenaz.events.beta.>")); err != nil {
		t.Fatal(err)
	}
	clock.Add(metrics.DefaultBacklogTTL - time.Millisecond)
	compare(t, reg, `
		tenaz_consumer_pending_messages{account="acme"} 3
		tenaz_consumer_pending_messages{account="beta"} 2
		tenaz_consumer_ack_pending_messages{account="acme"} 0
		tenaz_consumer_ack_pending_messages{account="beta"} 0
		tenaz_consumer_backlog_up 1
		tenaz_backlog_runnable_messages 5
	`, nameList...)
	clock.Add(time.Millisecond)
	compare(t, reg, `
		tenaz_consumer_pending_messages{account="acme"} 5
		tenaz_consumer_ack_pending_messages{account="acme"} 0
		tenaz_consumer_backlog_up 1
		tenaz_backlog_runnable_messages 5
	`, nameList...)
	if snap := s.Snapshot(); snap.Pending != 5 || snap.AckPending != 0 {
		t.Errorf("Snapshot: pending %d, ack pending %d; want 5, 0", snap.Pending, snap.AckPending)
	}

	// The server is gone: up 0 and no backlog series, not stale numbers;
	// the scrape ends within the timeout.
	srv.Stop()
	clock.Add(metrics.DefaultBacklogTTL)
	start := time.Now()
	compare(t, reg, `tenaz_consumer_backlog_up 0`, nameList...)
	if d := time.Since(start); d > metrics.DefaultBacklogTimeout+2*time.Second {
		t.Errorf("a scrape with the server down took %s, want it bounded by the %s timeout", d, metrics.DefaultBacklogTimeout)
	}

	// stop drops everything, up included.
	stop()
	if n := testutil.CollectAndCount(reg, nameList...); n != 0 {
		t.Errorf("after stop: %d backlog series, want 0", n)
	}
}

// A second watch replaces the first; the first one's stop then changes
// nothing.
func TestWatchBacklogReplaced(t *testing.T) {
	srv := natstest.Start(t)
	_, js := srv.Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := js.Publish(ctx, "tenaz.events.acme.order.create", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	s, reg := setup(t)
	stop1 := s.WatchBacklog(js, metrics.BacklogOptions{})
	stop2 := s.WatchBacklog(js, metrics.BacklogOptions{})
	defer stop2()
	stop1()
	compare(t, reg, `
		tenaz_consumer_pending_messages{account="acme"} 1
		tenaz_consumer_ack_pending_messages{account="acme"} 0
		tenaz_consumer_backlog_up 1
	`, metrics.NamePending, metrics.NameAckPending, metrics.NamePaused, metrics.NameBacklogUp)
}

// The account of a dispatch subject, in every partition read; other
// subjects (timers, keeper messages) have none. Accounts without their own
// series add up under "other", and no paused series is reported: the
// pauses are not in EVENTS.
func TestBacklogCountsDispatchSubjectsOnly(t *testing.T) {
	srv := natstest.Start(t)
	_, js := srv.Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	subj := names.NewSubjects(names.DefaultPrefix)
	for _, s := range []string{
		"tenaz.events.acme.k", "tenaz.timers.acme.k", "tenaz.keep.events",
		"tenaz.p1.events.acme.k", "tenaz.p1.events.beta.k", "tenaz.p1.events.beta.j", "tenaz.p1.sched.ev_1",
		"tenaz.p2.events.gamma.k", "tenaz.p3.events.delta.k", // partitions not read
	} {
		if _, err := js.Publish(ctx, s, []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	s, reg := setup(t)
	if err := s.Configure(metrics.Options{Accounts: metrics.AccountOptions{Top: 0, Allow: []string{"acme"}}}); err != nil {
		t.Fatal(err)
	}
	stop := s.WatchBacklog(js, metrics.BacklogOptions{Streams: []string{subj.EventsStreamOf(0), subj.EventsStreamOf(1)}})
	defer stop()
	compare(t, reg, `
		tenaz_consumer_pending_messages{account="acme"} 2
		tenaz_consumer_pending_messages{account="other"} 2
		tenaz_consumer_ack_pending_messages{account="acme"} 0
		tenaz_consumer_ack_pending_messages{account="other"} 0
		tenaz_consumer_backlog_up 1
	`, metrics.NamePending, metrics.NameAckPending, metrics.NamePaused, metrics.NameBacklogUp)
}

// With the pauses known, every account reported says whether an operator
// paused it, a paused account without messages is reported too, and the
// runnable backlog leaves the paused accounts out, also those folded into
// "other". A pause that has ended is no pause.
func TestWatchBacklogKnowsPauses(t *testing.T) {
	srv := natstest.Start(t)
	_, js := srv.Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for subject, n := range map[string]int{
		"tenaz.events.acme.k": 3, "tenaz.events.beta.k": 2, "tenaz.events.gamma.k": 4, "tenaz.events.delta.k": 1,
	} {
		for range n {
			if _, err := js.Publish(ctx, subject, []byte("{}")); err != nil {
				t.Fatal(err)
			}
		}
	}
	s, reg := setup(t)
	if err := s.Configure(metrics.Options{Accounts: metrics.AccountOptions{Top: 0, Allow: []string{"acme", "beta", "idle"}}}); err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	pauseEnds := clock.Now().Add(time.Minute)
	paused := func(now time.Time) []string {
		out := []string{"beta", "gamma", "idle"} // gamma is folded into "other"
		if now.Before(pauseEnds) {
			out = append(out, "acme")
		}
		return out
	}
	stop := s.WatchBacklog(js, metrics.BacklogOptions{Now: clock.Now, Paused: paused})
	defer stop()
	nameList := []string{metrics.NamePending, metrics.NamePaused, metrics.NameRunnable, metrics.NameBacklogUp}
	compare(t, reg, `
		tenaz_consumer_pending_messages{account="acme"} 3
		tenaz_consumer_pending_messages{account="beta"} 2
		tenaz_consumer_pending_messages{account="idle"} 0
		tenaz_consumer_pending_messages{account="other"} 5
		tenaz_consumer_paused{account="acme"} 1
		tenaz_consumer_paused{account="beta"} 1
		tenaz_consumer_paused{account="idle"} 1
		tenaz_consumer_paused{account="other"} 1
		tenaz_backlog_runnable_messages 1
		tenaz_consumer_backlog_up 1
	`, nameList...)

	// acme's pause ends: its 3 messages can be worked off.
	clock.Add(time.Minute)
	compare(t, reg, `
		tenaz_consumer_pending_messages{account="acme"} 3
		tenaz_consumer_pending_messages{account="beta"} 2
		tenaz_consumer_pending_messages{account="idle"} 0
		tenaz_consumer_pending_messages{account="other"} 5
		tenaz_consumer_paused{account="acme"} 0
		tenaz_consumer_paused{account="beta"} 1
		tenaz_consumer_paused{account="idle"} 1
		tenaz_consumer_paused{account="other"} 1
		tenaz_backlog_runnable_messages 4
		tenaz_consumer_backlog_up 1
	`, nameList...)

	// The server is gone: no runnable figure either, not a stale one.
	srv.Stop()
	clock.Add(metrics.DefaultBacklogTTL)
	compare(t, reg, `tenaz_consumer_backlog_up 0`, nameList...)
}
