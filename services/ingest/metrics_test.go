package ingest_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tenaz/tenaz/pkg/accounts"
	"github.com/tenaz/tenaz/pkg/daemon"
	"github.com/tenaz/tenaz/pkg/metrics"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natsd"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/services/ingest"
)

// metricsHarness is an ingest service recording on its own metrics Set.
type metricsHarness struct {
	*harness
	set *metrics.Set
	reg *prometheus.Registry
}

// setupMetrics starts a server and an ingest service whose metrics go to a
// fresh registry (no dispatcher: accepted events stay in the backlog).
func setupMetrics(t *testing.T) *metricsHarness {
	t.Helper()
	h := &harness{t: t, Env: servicetest.Start(t, servicetest.Options{})}
	nc, _ := h.Srv.Conn(t)
	return startMetrics(h, nc)
}

// startMetrics starts, in h's world and on nc, an ingest service whose
// metrics go to a fresh registry.
func startMetrics(h *harness, nc *nats.Conn) *metricsHarness {
	t := h.t
	t.Helper()
	h.cfg = servicetest.Config(t, baseYAML, map[string]string{"TARGET": "http://127.0.0.1:1"})
	reg := prometheus.NewRegistry()
	set, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := ingest.New(ingest.Options{Conn: nc, Config: h.cfg, Metrics: set})
	if err != nil {
		t.Fatal(err)
	}
	servicetest.Run(t, h.Ctx(), svc)
	h.ing = svc
	mux := http.NewServeMux()
	svc.Routes(mux)
	h.api = httptest.NewServer(mux)
	t.Cleanup(h.api.Close)
	return &metricsHarness{harness: h, set: set, reg: reg}
}

// TestBacklogWithoutThePauses: an ingest whose NATS user may not watch the
// operators' pauses (a user from before they were ingest's) starts within
// the pauses' wait, accepts events, and reports every account's messages
// as runnable, with no paused series.
func TestBacklogWithoutThePauses(t *testing.T) {
	t.Parallel()
	h := &harness{t: t, Env: servicetest.Start(t, servicetest.Options{Server: []natstest.Option{func(o *natsd.Options) {
		o.Configure = func(so *server.Options) {
			so.Users = []*server.User{{Username: "admin", Password: "a"}, {Username: "ingest", Password: "i", Permissions: &server.Permissions{
				Publish: &server.SubjectPermission{Allow: []string{">"}, Deny: []string{"$JS.API.CONSUMER.CREATE.KV_tenaz_ops.>"}},
			}}}
			so.NoAuthUser = "admin"
		}
	}}})}
	nc, err := nats.Connect(h.Srv.ClientURL(), nats.UserInfo("ingest", "i"), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	m := startMetrics(h, nc)

	if r := m.do(http.MethodPost, "/v1/events", `{"account":"acme","kind":"order.create","payload":{"order_id":"o-1"}}`, "Idempotency-Key", "k1"); r.Status != http.StatusAccepted {
		t.Fatalf("POST: want 202, got %d %s", r.Status, r.Body)
	}
	natstest.Eventually(t, servicetest.WaitFor, func() bool {
		return m.value(metrics.NamePending, "account", "acme") == 1 && m.value(metrics.NameRunnable) == 1
	}, "backlog without the pauses: want acme 1, runnable 1")
	if n := testutil.CollectAndCount(m.reg, metrics.NamePaused); n != 0 {
		t.Errorf("%d paused series while the pauses cannot be read, want 0", n)
	}
}

// value is the series of name with exactly labels (alternating name,
// value); NaN if there is none.
func (m *metricsHarness) value(name string, labels ...string) float64 {
	m.t.Helper()
	return servicetest.Metric(m.t, m.reg, name, labels...)
}

// TestMetricsOfSubmissions: accepted counts new events once (not
// duplicates), rejected counts each refusal by its code on every path
// (HTTP, micro, NATS intake), the backlog shows the accounts' waiting
// events, and the micro stats carry the same numbers.
func TestMetricsOfSubmissions(t *testing.T) {
	t.Parallel()
	h := setupMetrics(t)
	post := func(body string, key string, want int) {
		t.Helper()
		r := h.do(http.MethodPost, "/v1/events", body, "Idempotency-Key", key)
		if r.Status != want {
			t.Fatalf("POST %s: want %d, got %d %s", key, want, r.Status, r.Body)
		}
	}
	for i := range 3 {
		post(fmt.Sprintf(`{"account":"acme","kind":"order.create","payload":{"order_id":"o-%d"}}`, i), fmt.Sprint("k", i), http.StatusAccepted)
	}
	post(`{"account":"acme","kind":"order.create","payload":{"order_id":"o-0"}}`, "k0", http.StatusOK) // duplicate
	post(`{"account":"acme","kind":"nope","payload":{}}`, "bad-kind", http.StatusUnprocessableEntity)
	post(`{"account":"acme","kind":"order.create","payload":{"order_id":"`+strings.Repeat("x", 5000)+`"}}`, "big", http.StatusRequestEntityTooLarge)
	post(`{"account":`, "malformed", http.StatusBadRequest)

	// NATS: one accepted, one refused (kept in DEAD).
	h.publishIntake("tenaz.intake.beta.order.create", []byte(`{"order_id":"b-1"}`), "Nats-Msg-Id", "beta:b-1")
	h.publishIntake("tenaz.intake.beta.nope", []byte(`{}`), "Nats-Msg-Id", "beta:b-2")
	// micro: a malformed request.
	if _, err := h.NC.Request("tenaz.api.ingest.submit", []byte(`{"account":"acme"}`), 5*time.Second); err != nil {
		t.Fatalf("micro submit: %v", err)
	}

	natstest.Eventually(t, servicetest.WaitFor, func() bool {
		return h.value(metrics.NameAccepted, "account", "beta", "kind", "order.create") == 1 &&
			h.value(metrics.NameRejected, "reason", "unknown_kind") == 2
	}, "the NATS submissions were not counted")
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{metrics.NameAccepted, []string{"account", "acme", "kind", "order.create"}, 3},
		{metrics.NameAccepted, []string{"account", "beta", "kind", "order.create"}, 1},
		{metrics.NameRejected, []string{"reason", "unknown_kind"}, 2},
		{metrics.NameRejected, []string{"reason", "too_large"}, 1},
		{metrics.NameRejected, []string{"reason", "malformed"}, 2},
	} {
		if got := h.value(c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if n := testutil.CollectAndCount(h.reg, metrics.NameAccepted, metrics.NameRejected); n != 5 {
		t.Errorf("%d accepted/rejected series, want 5 (no other label sets)", n)
	}

	// No dispatcher runs: the accepted events wait in EVENTS, counted by
	// account (the read is cached for 5s, so this may take a moment).
	natstest.Eventually(t, servicetest.WaitFor, func() bool {
		return h.value(metrics.NamePending, "account", "acme") == 3 && h.value(metrics.NamePending, "account", "beta") == 1 &&
			h.value(metrics.NameBacklogUp) == 1
	}, "backlog: want acme 3, beta 1, up 1; got %v, %v, %v", natstest.Lazy(func() any {
		return fmt.Sprint(h.value(metrics.NamePending, "account", "acme"))
	}), natstest.Lazy(func() any { return h.value(metrics.NamePending, "account", "beta") }),
		natstest.Lazy(func() any { return h.value(metrics.NameBacklogUp) }))
	if got := h.value(metrics.NameRunnable); got != 4 {
		t.Errorf("runnable backlog with no pause: %v, want 4", got)
	}

	// An operator pauses beta: its message leaves the runnable backlog
	// (what the dispatchers' autoscaler reads), and stays in its own.
	pauses, err := accounts.OpenPauses(h.Ctx(), h.JS, names.NewSubjects(""))
	if err != nil {
		t.Fatal(err)
	}
	if err := pauses.Set(h.Ctx(), accounts.Pause{Account: "beta", Actor: "operator:alice", Reason: "erp migration", At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, servicetest.WaitFor, func() bool {
		return h.value(metrics.NamePaused, "account", "beta") == 1 && h.value(metrics.NamePaused, "account", "acme") == 0 &&
			h.value(metrics.NameRunnable) == 3 && h.value(metrics.NamePending, "account", "beta") == 1
	}, "beta paused: want paused beta 1, acme 0, runnable 3; got %v", natstest.Lazy(func() any {
		return fmt.Sprint(h.value(metrics.NamePaused, "account", "beta"), h.value(metrics.NamePaused, "account", "acme"), h.value(metrics.NameRunnable))
	}))
	if err := pauses.Clear(h.Ctx(), "beta", 0); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, servicetest.WaitFor, func() bool {
		return h.value(metrics.NamePaused, "account", "beta") == 0 && h.value(metrics.NameRunnable) == 4
	}, "beta resumed: want paused 0, runnable 4")

	// $SRV.STATS.tenaz-ingest: every endpoint's data is the snapshot.
	m, err := h.NC.Request("$SRV.STATS.tenaz-ingest", nil, 5*time.Second)
	if err != nil {
		t.Fatalf("$SRV.STATS.tenaz-ingest: %v", err)
	}
	var stats struct {
		Endpoints []struct {
			Name string           `json:"name"`
			Data metrics.Snapshot `json:"data"`
		} `json:"endpoints"`
	}
	if err := json.Unmarshal(m.Data, &stats); err != nil || len(stats.Endpoints) == 0 {
		t.Fatalf("stats: want endpoints with data, got %s (%v)", m.Data, err)
	}
	for _, ep := range stats.Endpoints {
		d := ep.Data
		if d.Accepted != 4 || d.Rejected != 5 || d.Pending != 4 {
			t.Errorf("stats of endpoint %s: accepted %d, rejected %d, pending %d; want 4, 5, 4 (%s)", ep.Name, d.Accepted, d.Rejected, d.Pending, m.Data)
		}
	}
}

// TestMetricsServedByDaemonMux: an ingest service built as its binary
// builds it (no Metrics option) records on the registry that daemon.Mux
// serves on /metrics. Not parallel: it reads the process-wide registry.
func TestMetricsServedByDaemonMux(t *testing.T) {
	h := setup(t, baseYAML)
	srv := httptest.NewServer(daemon.Mux(h.ing))
	t.Cleanup(srv.Close)
	const account = "served_by_mux"
	r := h.do(http.MethodPost, "/v1/events", `{"account":"`+account+`","kind":"order.create","payload":{"order_id":"m-1"}}`, "Idempotency-Key", "mux-1")
	if r.Status != http.StatusAccepted {
		t.Fatalf("POST: want 202, got %d %s", r.Status, r.Body)
	}
	scrape := func() string {
		resp, err := srv.Client().Get(srv.URL + "/metrics")
		if err != nil {
			t.Fatalf("GET /metrics: %v", err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	want := []string{
		metrics.NameAccepted + `{account="` + account + `",kind="order.create"} 1`,
		metrics.NamePending + `{account="` + account + `"} 1`,
		metrics.NameBacklogUp + " 1",
	}
	var body string
	natstest.Eventually(t, servicetest.WaitFor, func() bool {
		body = scrape()
		for _, w := range want {
			if !strings.Contains(body, w) {
				return false
			}
		}
		return true
	}, "/metrics lacks %q", want)
}
