package bench

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/natsd"
)

// Noisy measures one account's latency at a steady rate alone, then again
// while another account's target is down with a 10,000-event backlog, and
// reports the ratio of the p99s (goal ≤ 1.2).
func Noisy(ctx context.Context, sz Sizes, r Report, targetURL string) error {
	dir, err := os.MkdirTemp("", "tenaz-bench-noisy-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	srv, err := startServer(dir, false)
	if err != nil {
		return err
	}
	defer natsd.Shutdown(srv)
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "down", http.StatusServiceUnavailable)
	}))
	defer down.Close()
	y := fmt.Sprintf(`
nats: {url: %q}
http: {addr: "127.0.0.1:0"}
log: {level: error}
auth: {disabled: true}
accounts:
  "*": {concurrency: 16, breaker: {failures: 5, cooldown: 30s}}
  broken: {targets: {noop: {url: %q}}}
targets:
  noop: {url: %q, timeout: 5s}
kinds:
  order.create: {target: noop, attempts: 6, backoff: {initial: 30s}}
`, srv.ClientURL(), down.URL+"/api/{{.Kind}}", targetURL+"/api/{{.Kind}}")
	cfg, err := config.Parse([]byte(y), func(string) (string, bool) { return "", false })
	if err != nil {
		return err
	}
	tz, err := StartTenaz(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() { _ = tz.Stop(ctx) }()
	// Warm up the healthy account (its consumer, connections).
	if _, _, err := tz.LatencyOf(ctx, "healthy", "warm", sz.Rate, time.Second); err != nil {
		return err
	}
	_, alone, err := tz.LatencyOf(ctx, "healthy", "alone", sz.Rate, sz.NoisyFor)
	if err != nil {
		return err
	}
	// Measured once the backlog is accepted by ingest and waiting in the
	// broken account's consumer (its breaker open).
	if err := tz.backlog(ctx, "broken", "n-", sz.Backlog, 2*time.Minute); err != nil {
		return fmt.Errorf("noisy: %w", err)
	}
	_, noisy, err := tz.LatencyOf(ctx, "healthy", "noisy", sz.Rate, sz.NoisyFor)
	if err != nil {
		return err
	}
	r.Figure("noisy_neighbour_p99_alone_ms", alone, "ms")
	r.Figure("noisy_neighbour_p99_with_broken_ms", noisy, "ms")
	r.Figure("noisy_neighbour_p99_ratio", noisy/alone, "ratio")
	return nil
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
	dir, err := os.MkdirTemp("", "tenaz-bench-flooded-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	srv, err := startServer(dir, false)
	if err != nil {
		return err
	}
	defer natsd.Shutdown(srv)
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(floodLatency):
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer slow.Close()
	y := fmt.Sprintf(`
nats: {url: %q}
http: {addr: "127.0.0.1:0"}
log: {level: error}
auth: {disabled: true}
accounts:
  "*": {concurrency: 16, breaker: {failures: 1000}}
  flood: {targets: {noop: {url: %q}}}
targets:
  noop: {url: %q, timeout: 5s}
kinds:
  order.create: {target: noop, attempts: 6, backoff: {initial: 30s}}
`, srv.ClientURL(), slow.URL+"/api/{{.Kind}}", targetURL+"/api/{{.Kind}}")
	cfg, err := config.Parse([]byte(y), func(string) (string, bool) { return "", false })
	if err != nil {
		return err
	}
	tz, err := StartTenaz(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() { _ = tz.Stop(ctx) }()
	if _, _, err := tz.LatencyOf(ctx, "healthy", "warm", sz.Rate, time.Second); err != nil {
		return err
	}
	_, alone, err := tz.LatencyOf(ctx, "healthy", "alone", sz.Rate, sz.NoisyFor)
	if err != nil {
		return err
	}
	// Measured once the backlog is accepted and draining: the flooding
	// account's queue is then as deep as it gets.
	if err := tz.backlog(ctx, "flood", "f-", floodBacklog, 3*time.Minute); err != nil {
		return fmt.Errorf("flooded: %w", err)
	}
	_, flooded, err := tz.LatencyOf(ctx, "healthy", "flooded", sz.Rate, sz.NoisyFor)
	if err != nil {
		return err
	}
	r.Figure("noisy_flooded_p99_alone_ms", alone, "ms")
	r.Figure("noisy_flooded_p99_with_backlog_ms", flooded, "ms")
	r.Figure("noisy_flooded_p99_ratio", flooded/alone, "ratio")
	return nil
}

// backlog submits n events of account over NATS (keys keyPrefix<i>) and
// waits, within timeout, until ingest has accepted them all.
func (b *Tenaz) backlog(ctx context.Context, account, keyPrefix string, n int, timeout time.Duration) error {
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
