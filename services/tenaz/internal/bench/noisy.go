package bench

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Noisy measures one account's latency at a steady rate alone, then again
// while another account's target is down with a 10,000-event backlog, and
// reports the ratio of the p99s (goal ≤ 1.2).
func Noisy(ctx context.Context, sz Sizes, r Report, targetURL string) error {
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "down", http.StatusServiceUnavailable)
	}))
	defer down.Close()
	// Measured once the backlog is accepted by ingest and waiting in
	// EVENTS for the broken account (its breaker open).
	return neighbour{
		name: "noisy", figure: "noisy_neighbour", with: "with_broken",
		account: "broken", keyPrefix: "n-", backlog: sz.Backlog, timeout: 2 * time.Minute,
		breaker: "{failures: 5, cooldown: 30s}", target: down.URL,
	}.run(ctx, sz, r, targetURL)
}

// floodBacklog is the flooding account's backlog in Flooded.
const floodBacklog = 100000

// floodLatency is the flooding account's target's latency: a working but
// slow provider, so that its backlog drains for minutes at its account's
// concurrency, the queue deep all along.
const floodLatency = 20 * time.Millisecond

// Flooded measures one account's latency at a steady rate alone, then
// again while another account drains a 100,000-event backlog to a slow
// (working) target, and reports the ratio of the p99s
// (noisy_flooded_p99_ratio, goal ≤ 1.2).
func Flooded(ctx context.Context, sz Sizes, r Report, targetURL string) error {
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(floodLatency):
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer slow.Close()
	// Measured once the backlog is accepted and draining: the flooding
	// account's queue is then as deep as it gets.
	return neighbour{
		name: "flooded", figure: "noisy_flooded", with: "with_backlog",
		account: "flood", keyPrefix: "f-", backlog: floodBacklog, timeout: 3 * time.Minute,
		breaker: "{failures: 1000}", target: slow.URL,
	}.run(ctx, sz, r, targetURL)
}

// neighbour is a run of the healthy account's latency alone, then beside
// account's backlog sent to its own target.
type neighbour struct {
	name               string // the run's latency tag and error prefix
	figure, with       string // <figure>_p99_alone_ms, <figure>_p99_<with>_ms, <figure>_p99_ratio
	account, keyPrefix string
	backlog            int
	timeout            time.Duration // for the backlog to be accepted
	breaker            string        // every account's breaker config
	target             string        // account's target
}

// run starts nats-server and tenaz each in its own process, as they are
// deployed: in one process with the load, the Go scheduler's run queue
// is shared too, and what one account's work costs another shows as much
// in goroutine wake-ups as in the server's or the services' work.
func (nb neighbour) run(ctx context.Context, sz Sizes, r Report, targetURL string) error {
	dir, srv, cleanup, err := startNATSChild(nb.name, 30*time.Second) // its store is thrown away
	if err != nil {
		return err
	}
	defer cleanup()
	tzc, err := startTenazChild(dir, configYAML(srv.ready, `
accounts:
  "*": {concurrency: 16, breaker: %s}
  %s: {targets: {noop: {url: %q}}}
targets:
  noop: {url: %q, timeout: 5s}
kinds:
  order.create: {target: noop, attempts: 6, backoff: {initial: 30s}}
`, nb.breaker, nb.account, nb.target+"/api/{{.Kind}}", targetURL+"/api/{{.Kind}}"))
	if err != nil {
		return err
	}
	defer func() { _, _ = tzc.stop(2 * time.Minute) }()
	nc, err := nats.Connect(srv.ready)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	tz := &Instance{nc: nc, js: js} // the load's handle: tenaz runs in tzc
	// Warm up the healthy account (its consumer, connections).
	if _, _, err := tz.LatencyOf(ctx, "healthy", "warm", sz.Rate, time.Second); err != nil {
		return err
	}
	h0 := hostCPU()
	_, alone, err := tz.LatencyOf(ctx, "healthy", "alone", sz.Rate, sz.NoisyFor)
	if err != nil {
		return err
	}
	h1 := hostCPU()
	if err := tz.backlog(ctx, nb.account, nb.keyPrefix, nb.backlog, nb.timeout); err != nil {
		return fmt.Errorf("%s: %w", nb.name, err)
	}
	h2 := hostCPU()
	_, beside, err := tz.LatencyOf(ctx, "healthy", nb.name, sz.Rate, sz.NoisyFor)
	if err != nil {
		return err
	}
	h3 := hostCPU()
	r.Figure(nb.figure+"_p99_alone_ms", alone, "ms")
	r.Figure(nb.figure+"_p99_"+nb.with+"_ms", beside, "ms")
	r.Figure(nb.figure+"_p99_ratio", beside/alone, "ratio")
	// How busy the host was in each window: a neighbour that leaves the
	// host no idle CPU slows the other account's every step, whatever
	// tenaz isolates.
	if b, ok := h0.busyPct(h1); ok {
		r.Figure(nb.figure+"_host_cpu_alone_pct", b, "%")
	}
	if b, ok := h2.busyPct(h3); ok {
		r.Figure(nb.figure+"_host_cpu_"+nb.with+"_pct", b, "%")
	}
	return nil
}

// backlog submits n events of account over NATS (keys keyPrefix<i>) and
// waits, within timeout, until ingest has accepted them all.
func (b *Instance) backlog(ctx context.Context, account, keyPrefix string, n int, timeout time.Duration) error {
	for i := range n {
		m := nats.NewMsg("tenaz.intake." + account + ".order.create")
		m.Data = []byte(`{"order_id":"o","total":1}`)
		m.Header.Set("Idempotency-Key", keyPrefix+strconv.Itoa(i))
		if _, err := b.js.PublishMsgAsync(m); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(timeout)
	select {
	case <-b.js.PublishAsyncComplete():
	case <-time.After(timeout):
		return fmt.Errorf("the backlog's publish did not complete within %s", timeout)
	}
	for {
		ci, err := b.js.Consumer(ctx, "INTAKE", "ingest")
		if err != nil {
			return err
		}
		if info := ci.CachedInfo(); info.NumPending == 0 && info.NumAckPending == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("backlog not accepted within %s", timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
