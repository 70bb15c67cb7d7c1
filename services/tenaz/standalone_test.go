package tenaz_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/services/tenaz"
)

// testConfig is a standalone config on an embedded server in dir, with the
// erp target at targetURL.
func testConfig(dir, targetURL, extra string) string {
	return fmt.Sprintf(`
nats:
  embedded: {store_dir: %q, sync: always, listen: "127.0.0.1:-1"}
http: {addr: "127.0.0.1:0"}
log: {level: warn}
streams: {ack_wait: 2s}
auth: {disabled: true}
accounts:
  "*": {concurrency: 8, breaker: {failures: 100}}
targets:
  erp: {url: %q, timeout: 5s}
kinds:
  order.create: {target: erp, attempts: 3, backoff: {initial: 1s, max: 2s, jitter: 0}, entity: order_id}
%s`, dir, targetURL+"/api/{{.Kind}}", extra)
}

// start starts a standalone tenaz on yaml; it stops when the test ends.
func start(t *testing.T, yaml string) *tenaz.System {
	t.Helper()
	return startWith(t, yaml, tenaz.Options{})
}

// startWith is start with options o (o.Config is yaml's).
func startWith(t *testing.T, yaml string, o tenaz.Options) *tenaz.System {
	t.Helper()
	o.Config = servicetest.Config(t, yaml, nil)
	return run(t, o)
}

// run starts a standalone tenaz with o; it stops when the test ends.
func run(t *testing.T, o tenaz.Options) *tenaz.System {
	t.Helper()
	tz, err := tenaz.New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := tz.Start(ctx); err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := tz.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return tz
}

// running starts a standalone tenaz on testConfig, delivering to an
// idempotent provider, and returns the provider, tenaz and its HTTP base
// URL.
func running(t *testing.T) (*provider.Provider, *tenaz.System, string) {
	t.Helper()
	p, targetURL := idempotentTarget(t)
	tz := start(t, testConfig(t.TempDir(), targetURL, ""))
	return p, tz, "http://" + tz.HTTPAddr()
}

// refused is the error of starting a standalone tenaz with cfg; it fails
// the test if it starts.
func refused(t *testing.T, cfg *config.Config) error {
	t.Helper()
	tz, err := tenaz.New(tenaz.Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = tz.Start(ctx)
	if err == nil {
		_ = tz.Stop(context.Background())
		t.Fatal("want the start refused, it started")
	}
	return err
}

type view struct {
	ID        string `json:"id"`
	Status    string `json:"status"`
	StatusURL string `json:"status_url"`
	Stage     string `json:"stage"`
	Attempts  int    `json:"attempts"`
	LastError *struct {
		Class      string `json:"class"`
		HTTPStatus int    `json:"http_status"`
	} `json:"last_error"`
}

func post(t *testing.T, base, key, body string) (int, view) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/events", strings.NewReader(body))
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v view
	_ = json.NewDecoder(resp.Body).Decode(&v)
	return resp.StatusCode, v
}

func get(t *testing.T, url string) view {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v view
	_ = json.NewDecoder(resp.Body).Decode(&v)
	return v
}

func waitStatus(t *testing.T, base, id, want string) view {
	t.Helper()
	var v view
	natstest.Eventually(t, 20*time.Second, func() bool {
		v = get(t, base+"/v1/events/"+id)
		return v.Status == want
	}, "event %s to be %s (last seen %+v)", id, want, &v)
	return v
}

// The README tour, as a test: HTTP submit reaches done, a duplicate gets
// the same event back, a NATS submission reaches done, and a permanent
// failure is visible in the event's status with the target's answer.
func TestTour(t *testing.T) {
	t.Parallel()
	p, tz, base := running(t)

	body := `{"account":"demo","kind":"order.create","entity_id":"o-1","payload":{"order_id":"o-1","total":1990}}`
	code, v := post(t, base, "o-1", body)
	if code != http.StatusAccepted || v.ID == "" || v.StatusURL == "" {
		t.Fatalf("submit: want 202 with id and status_url, got %d %+v", code, v)
	}
	waitStatus(t, base, v.ID, "done")
	code, dup := post(t, base, "o-1", body)
	if code != http.StatusOK || dup.ID != v.ID || dup.Status != "done" {
		t.Fatalf("duplicate: want 200 with the same done event %s, got %d %+v", v.ID, code, dup)
	}
	if n := p.Effects(v.ID); n != 1 {
		t.Fatalf("want the effect of o-1 applied once at the target, got %d", n)
	}

	nc, err := nats.Connect(tz.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	payload := []byte(`{"order_id":"o-2","total":500}`)
	if err := nc.Publish("tenaz.intake.demo.order.create", payload); err != nil {
		t.Fatal(err)
	}
	canon, _ := event.Canonical(payload)
	id2 := event.ID("demo", event.DerivedKey("order.create", "o-2", canon))
	waitStatus(t, base, id2, "done")

	code, rej := post(t, base, "", `{"account":"demo","kind":"order.create","payload":{"order_id":"o-3","reject":true}}`)
	if code != http.StatusAccepted {
		t.Fatalf("submit reject: want 202, got %d", code)
	}
	dead := waitStatus(t, base, rej.ID, "dead")
	if dead.LastError == nil || dead.LastError.Class != "permanent" || dead.LastError.HTTPStatus != 422 || dead.Attempts != 1 {
		t.Fatalf("want dead after 1 attempt with a permanent 422, got %+v (last_error %+v)", dead, dead.LastError)
	}
}

// `tenaz run` with no flag and no ./tenaz.yaml uses the built-in demo
// config; that config must be valid and route the tour's kinds.
func TestDemoConfigIsValid(t *testing.T) {
	t.Parallel()
	cfg, err := tenaz.DemoConfig(func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("demo config: %v", err)
	}
	for _, k := range []string{"order.create", "fiscal.adjust", "reward.credit"} {
		if _, ok := cfg.Kind(k); !ok {
			t.Errorf("demo config lacks kind %s", k)
		}
	}
	if cfg.NATS.URL != "" || cfg.NATS.Embedded.Sync != "always" || cfg.Demo.Provider == "" {
		t.Fatalf("demo must run embedded NATS with sync always and the demo provider, got url=%q sync=%q demo=%q",
			cfg.NATS.URL, cfg.NATS.Embedded.Sync, cfg.Demo.Provider)
	}
	// It has no auth, so it listens on loopback only.
	for key, addr := range map[string]string{"http.addr": cfg.HTTP.Addr, "nats.embedded.listen": cfg.NATS.Embedded.Listen,
		"demo.provider": cfg.Demo.Provider, "demo.bureau_a": cfg.Demo.BureauA, "demo.bureau_b": cfg.Demo.BureauB} {
		if host, _, err := net.SplitHostPort(addr); err != nil || host != "127.0.0.1" {
			t.Errorf("demo %s: want 127.0.0.1:<port>, got %q", key, addr)
		}
	}
	for name, tg := range cfg.Targets {
		if u, err := url.Parse(tg.URL); err != nil || u.Hostname() != "127.0.0.1" {
			t.Errorf("demo targets.%s.url: want a 127.0.0.1 URL, got %q", name, tg.URL)
		}
	}
}

// Events accepted before a full restart (same data directory) finish
// after it: state lives in JetStream, not in the process.
func TestRestartKeepsEverything(t *testing.T) {
	t.Parallel()
	p, target := servicetest.Provider(t, provider.Faults{Down: true})
	dir := t.TempDir()
	yaml := testConfig(dir, target.URL, "")
	cfg, _ := config.Parse([]byte(yaml), func(string) (string, bool) { return "", false })
	tz, err := tenaz.New(tenaz.Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := tz.Start(ctx); err != nil {
		t.Fatal(err)
	}
	base := "http://" + tz.HTTPAddr()
	var ids []string
	for i := range 10 {
		_, v := post(t, base, fmt.Sprintf("r-%d", i), fmt.Sprintf(`{"account":"acme","kind":"order.create","payload":{"order_id":"r-%d"}}`, i))
		ids = append(ids, v.ID)
	}
	natstest.Eventually(t, 10*time.Second, func() bool { return p.CallCount() >= 10 }, "first attempts")
	if err := tz.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	p.SetDown(false)
	tz2 := start(t, yaml)
	base = "http://" + tz2.HTTPAddr()
	for _, id := range ids {
		waitStatus(t, base, id, "done")
	}
	if d := p.DuplicateEffects(); len(d) != 0 {
		t.Fatalf("effects applied more than once: %v", d)
	}
}

// The shared listener serves health, readiness and metrics.
func TestHealthAndMetrics(t *testing.T) {
	t.Parallel()
	tz := start(t, testConfig(t.TempDir(), "http://127.0.0.1:1", ""))
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		resp, err := http.Get("http://" + tz.HTTPAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: want 200, got %d", path, resp.StatusCode)
		}
	}
	nc, _ := nats.Connect(tz.NATSURL())
	defer nc.Close()
	for _, name := range []string{"tenaz-ingest", "tenaz-dispatcher", "tenaz-poller", "tenaz-deadletter"} {
		if _, err := nc.Request("$SRV.PING."+name, nil, 2*time.Second); err != nil {
			t.Fatalf("micro service %s does not answer ping: %v", name, err)
		}
	}
}

// idempotentTarget is a fault-free provider that applies each key once,
// behind a real HTTP server, and its URL; both stop with the test.
func idempotentTarget(t *testing.T) (*provider.Provider, string) {
	t.Helper()
	p, target := servicetest.Provider(t, provider.Faults{}, provider.WithIdempotent())
	return p, target.URL
}
