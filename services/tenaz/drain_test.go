package tenaz_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/servicetest"
)

// SIGTERM while clients are still submitting and calls are in flight:
// the process exits 0; no call is abandoned; every submission that was
// answered 202/200 (accepted, possibly still in INTAKE) ends done after a
// restart, and a target that does not dedup saw each effect once.
func TestSIGTERMUnderLoad(t *testing.T) {
	t.Parallel()
	p, target := servicetest.Provider(t, provider.Faults{Latency: 100 * time.Millisecond})
	cfgFile := writeConfig(t, t.TempDir(), target.URL)
	tz := runTenaz(t, cfgFile)
	base := "http://" + tz.addr

	var (
		mu       sync.Mutex
		accepted = map[string]string{} // key → id
		next     atomic.Int64
		stop     atomic.Bool
		wg       sync.WaitGroup
	)
	client := &http.Client{Timeout: 10 * time.Second}
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() && next.Load() < 2000 { // bounded, stops by itself
				key := fmt.Sprintf("load-%d", next.Add(1))
				req, _ := http.NewRequest(http.MethodPost, base+"/v1/events",
					strings.NewReader(fmt.Sprintf(`{"account":"acme","kind":"order.create","payload":{"order_id":%q}}`, key)))
				req.Header.Set("Idempotency-Key", key)
				resp, err := client.Do(req)
				if err != nil {
					return // the listener is closed: the process is going down
				}
				var v view
				_ = decodeJSON(resp, &v)
				if (resp.StatusCode == http.StatusAccepted || resp.StatusCode == http.StatusOK) && v.ID != "" {
					mu.Lock()
					accepted[key] = v.ID
					mu.Unlock()
				}
			}
		}()
	}
	natstest.Eventually(t, 15*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(accepted) >= 60 && p.CallCount() >= 8
	}, "load: accepted submissions and calls in flight")
	if err := tz.signal(t, syscall.SIGTERM); err != nil {
		t.Fatalf("want exit 0 after SIGTERM under load, got %v", err)
	}
	stop.Store(true)
	wg.Wait()
	for _, c := range p.Calls() {
		if c.Status == provider.StatusClientClosed {
			t.Fatalf("a call was abandoned mid-flight by the drain: %+v", c)
		}
	}
	mu.Lock()
	n := len(accepted)
	mu.Unlock()
	calledBefore := p.CallCount()

	tz2 := runTenaz(t, cfgFile)
	for _, id := range accepted {
		waitStatus(t, "http://"+tz2.addr, id, "done")
	}
	for key, id := range accepted {
		if e := p.Effects(id); e != 1 { // the event id is the Idempotency-Key the target sees
			t.Errorf("%s: want the effect applied once, got %d", key, e)
		}
	}
	if d := p.DuplicateEffects(); len(d) != 0 {
		t.Fatalf("effects applied more than once after a graceful stop under load: %v", d)
	}
	t.Logf("%d submissions accepted under load; %d calls before SIGTERM's exit, %d in all", n, calledBefore, p.CallCount())
	_ = tz2.signal(t, syscall.SIGTERM)
}

// The dispatcher stops taking work as Stop begins, not once the HTTP
// listener has shut down, which a client still sending its request holds
// until Stop's deadline: with concurrency 1 and a 3s call in flight, the
// event taken behind it is not called (with its 5s timeout it could not
// end before the deadline), rather than called and cut. A restart calls
// it once.
func TestStopHeldUpByAClientStartsNoCall(t *testing.T) {
	t.Parallel()
	p := provider.New(provider.Faults{Latency: 3 * time.Second})
	var arrived atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Add(1)
		p.ServeHTTP(w, r)
	}))
	t.Cleanup(target.Close)
	t.Cleanup(func() { _ = p.Close() })
	dir := t.TempDir()
	yaml := strings.Replace(testConfig(dir, target.URL, ""), `"*": {concurrency: 8,`, `"*": {concurrency: 1,`, 1)
	tz := start(t, yaml)
	base := "http://" + tz.HTTPAddr()

	slow, err := net.Dial("tcp", tz.HTTPAddr()) // a request whose body never ends
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = slow.Close() })
	if _, err := fmt.Fprintf(slow, "POST /v1/events HTTP/1.1\r\nHost: tenaz\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"acc"); err != nil {
		t.Fatal(err)
	}
	ids := submitN(t, base, "held", 2)
	natstest.Eventually(t, 10*time.Second, func() bool { return arrived.Load() >= 1 }, "the first call in flight")

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = tz.Stop(ctx) // the held request makes the HTTP shutdown end with ctx
	for _, c := range p.Calls() {
		if c.Status == provider.StatusClientClosed {
			t.Fatalf("a call was cut by the stop deadline: %+v", c)
		}
	}
	if n := arrived.Load(); n != 1 {
		t.Fatalf("want only the call in flight made while stopping, got %d", n)
	}

	tz2 := start(t, yaml)
	for _, id := range ids {
		waitStatus(t, "http://"+tz2.HTTPAddr(), id, "done")
	}
	if n := p.CallCount(); n != len(ids) || len(p.DuplicateEffects()) != 0 {
		t.Fatalf("want each event called once, got %d calls, duplicates %v", n, p.DuplicateEffects())
	}
}
