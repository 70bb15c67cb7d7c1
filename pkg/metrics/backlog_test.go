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

// TestWatchBacklog reads real consumers of EVENTS on an embedded server:
// per-account pending and in-flight counts, paused, the cache, a failed
// read, and stop.
func TestWatchBacklog(t *testing.T) {
	srv := natstest.Start(t)
	_, js := srv.Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	consumer := func(name, account string) jetstream.Consumer {
		c, err := js.CreateOrUpdateConsumer(ctx, names.StreamEvents, jetstream.ConsumerConfig{
			Durable: name, FilterSubject: "tenaz.events." + account + ".>", AckPolicy: jetstream.AckExplicitPolicy,
		})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	publish := func(account string, n int) {
		for range n {
			if _, err := js.Publish(ctx, "tenaz.events."+account+".order.create", []byte("{}")); err != nil {
				t.Fatal(err)
			}
		}
	}
	acme := consumer(names.ConsumerName("acme"), "acme")
	beta := consumer(names.ConsumerName("beta"), "beta")
	consumer("someone_else", "gamma") // not a dispatch consumer: ignored
	publish("acme", 3)
	publish("beta", 2)
	publish("gamma", 4)
	// A consumer counts a new message when its own goroutine has seen it:
	// on a loaded machine its info can lag the publish for a moment.
	pendingIs := func(c jetstream.Consumer, want uint64) func() bool {
		return func() bool {
			info, err := c.Info(ctx)
			return err == nil && info.NumPending == want
		}
	}
	natstest.Eventually(t, 10*time.Second, pendingIs(acme, 3), "acme's consumer to count its 3 messages")
	natstest.Eventually(t, 10*time.Second, pendingIs(beta, 2), "beta's consumer to count its 2 messages")

	s, reg := setup(t)
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	stop := s.WatchBacklog(js, metrics.BacklogOptions{Now: clock.Now})
	defer stop()

	nameList := []string{metrics.NamePending, metrics.NameAckPending, metrics.NamePaused, metrics.NameBacklogUp}
	compare(t, reg, `
		tenaz_consumer_pending_messages{account="acme"} 3
		tenaz_consumer_pending_messages{account="beta"} 2
		tenaz_consumer_ack_pending_messages{account="acme"} 0
		tenaz_consumer_ack_pending_messages{account="beta"} 0
		tenaz_consumer_paused{account="acme"} 0
		tenaz_consumer_paused{account="beta"} 0
		tenaz_consumer_backlog_up 1
	`, nameList...)

	// One message of beta in flight, two more for acme, acme paused. The
	// cached read still answers until the TTL has passed.
	msgs, err := beta.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for range msgs.Messages() {
		n++ // not acked: in flight
	}
	if n != 1 {
		t.Fatalf("fetched %d messages, want 1", n)
	}
	publish("acme", 2)
	natstest.Eventually(t, 10*time.Second, pendingIs(acme, 5), "acme's consumer to count its 5 messages")
	if _, err := js.PauseConsumer(ctx, names.StreamEvents, names.ConsumerName("acme"), time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	clock.Add(metrics.DefaultBacklogTTL - time.Millisecond)
	compare(t, reg, `
		tenaz_consumer_pending_messages{account="acme"} 3
		tenaz_consumer_pending_messages{account="beta"} 2
		tenaz_consumer_ack_pending_messages{account="acme"} 0
		tenaz_consumer_ack_pending_messages{account="beta"} 0
		tenaz_consumer_paused{account="acme"} 0
		tenaz_consumer_paused{account="beta"} 0
		tenaz_consumer_backlog_up 1
	`, nameList...)
	clock.Add(time.Millisecond)
	compare(t, reg, `
		tenaz_consumer_pending_messages{account="acme"} 5
		tenaz_consumer_pending_messages{account="beta"} 1
		tenaz_consumer_ack_pending_messages{account="acme"} 0
		tenaz_consumer_ack_pending_messages{account="beta"} 1
		tenaz_consumer_paused{account="acme"} 1
		tenaz_consumer_paused{account="beta"} 0
		tenaz_consumer_backlog_up 1
	`, nameList...)
	if snap := s.Snapshot(); snap.Pending != 6 || snap.AckPending != 1 {
		t.Errorf("Snapshot: pending %d, ack pending %d; want 6, 1", snap.Pending, snap.AckPending)
	}

	// A consumer that goes away leaves the metrics at the next read.
	if err := js.DeleteConsumer(ctx, names.StreamEvents, names.ConsumerName("beta")); err != nil {
		t.Fatal(err)
	}
	clock.Add(metrics.DefaultBacklogTTL)
	compare(t, reg, `
		tenaz_consumer_pending_messages{account="acme"} 5
		tenaz_consumer_ack_pending_messages{account="acme"} 0
		tenaz_consumer_paused{account="acme"} 1
		tenaz_consumer_backlog_up 1
	`, nameList...)

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
	if _, err := js.CreateOrUpdateConsumer(ctx, names.StreamEvents, jetstream.ConsumerConfig{
		Durable: names.ConsumerName("acme"), FilterSubject: "tenaz.events.acme.>", AckPolicy: jetstream.AckExplicitPolicy,
	}); err != nil {
		t.Fatal(err)
	}
	s, reg := setup(t)
	stop1 := s.WatchBacklog(js, metrics.BacklogOptions{})
	stop2 := s.WatchBacklog(js, metrics.BacklogOptions{})
	defer stop2()
	stop1()
	compare(t, reg, `
		tenaz_consumer_pending_messages{account="acme"} 0
		tenaz_consumer_ack_pending_messages{account="acme"} 0
		tenaz_consumer_paused{account="acme"} 0
		tenaz_consumer_backlog_up 1
	`, metrics.NamePending, metrics.NameAckPending, metrics.NamePaused, metrics.NameBacklogUp)
}
