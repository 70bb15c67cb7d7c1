package tenaz_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/servicetest"
)

// tenazBinary is the real tenaz binary, built once per test run.
func tenazBinary(t *testing.T) string { return natstest.Binary(t, "./cmd/tenaz") }

// proc is a running `tenaz run` process.
type proc struct {
	cmd  *exec.Cmd
	addr string
	done chan error
	out  *servicetest.LogBuffer // stdout and stderr as they come
}

// runTenaz starts `tenaz run --config file` and waits until it serves HTTP.
func runTenaz(t *testing.T, configFile string) *proc {
	t.Helper()
	return startTenaz(t, tenazCmd(t, "", nil, "run", "--config", configFile))
}

// tenazCmd is the tenaz binary with args, run in dir ("": the test's
// working directory) with env added to the test's environment and JSON
// logs at info.
func tenazCmd(t *testing.T, dir string, env []string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(tenazBinary(t), args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "LOG_FORMAT=json", "LOG_LEVEL=info"), env...)
	return cmd
}

// startTenaz starts cmd (a `tenaz run`) and waits until it serves HTTP.
func startTenaz(t *testing.T, cmd *exec.Cmd) *proc {
	t.Helper()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, done: make(chan error, 1), out: &servicetest.LogBuffer{}}
	addrCh := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			_, _ = p.out.Write(append(sc.Bytes(), '\n'))
			var line struct {
				Message string `json:"message"`
				HTTP    string `json:"http"`
			}
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Message == "tenaz running" {
				addrCh <- line.HTTP
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
	})
	select {
	case p.addr = <-addrCh:
	case err := <-p.done:
		t.Fatalf("tenaz exited before serving: %v\n%s", err, p.out)
	case <-time.After(30 * time.Second):
		t.Fatal("tenaz did not start within 30s")
	}
	return p
}

func (p *proc) signal(t *testing.T, sig syscall.Signal) error {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.done:
		p.done <- err // for Cleanup
		return err
	case <-time.After(30 * time.Second):
		t.Fatalf("tenaz did not exit within 30s of %v", sig)
	}
	return nil
}

func writeConfig(t *testing.T, dir, targetURL string) string {
	t.Helper()
	f := filepath.Join(dir, "tenaz.yaml")
	if err := os.WriteFile(f, []byte(testConfig(filepath.Join(dir, "data"), targetURL, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func submitN(t *testing.T, base, prefix string, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range n {
		key := fmt.Sprintf("%s-%d", prefix, i)
		code, v := post(t, base, key, fmt.Sprintf(`{"account":"acme","kind":"order.create","payload":{"order_id":%q}}`, key))
		if code != http.StatusAccepted {
			t.Fatalf("submit %s: want 202, got %d", key, code)
		}
		ids[i] = v.ID
	}
	return ids
}

// SIGTERM drains: calls in flight finish and are recorded before the
// process exits 0, so after a restart every event is done and no effect
// was applied twice, even at a target that does not dedup. A call longer
// than the default 20s drain, with stop_timeout raised to fit it, is
// waited for too.
func TestSIGTERMDrainsInFlight(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		latency  time.Duration
		events   int
		inFlight int
		edit     func(yaml string) string
	}{
		{name: "short calls", latency: 300 * time.Millisecond, events: 30, inFlight: 4},
		{name: "a call longer than the default drain", latency: 21 * time.Second, events: 1, inFlight: 1, edit: func(y string) string {
			return strings.Replace(y, "timeout: 5s}", "timeout: 24s}", 1) + "stop_timeout: 30s\n"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := provider.New(provider.Faults{Latency: tc.latency})
			var arrived atomic.Int64 // calls that reached the provider, answered or not
			target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				arrived.Add(1)
				p.ServeHTTP(w, r)
			}))
			t.Cleanup(target.Close)
			t.Cleanup(func() { _ = p.Close() })
			cfgFile := writeConfig(t, t.TempDir(), target.URL)
			if tc.edit != nil {
				b, err := os.ReadFile(cfgFile)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(cfgFile, []byte(tc.edit(string(b))), 0o600); err != nil {
					t.Fatal(err)
				}
			}

			tz := runTenaz(t, cfgFile)
			ids := submitN(t, "http://"+tz.addr, "term", tc.events)
			natstest.Eventually(t, 10*time.Second, func() bool { return arrived.Load() >= int64(tc.inFlight) }, "calls in flight")
			if err := tz.signal(t, syscall.SIGTERM); err != nil {
				t.Fatalf("want exit 0 after SIGTERM, got %v", err)
			}
			for _, c := range p.Calls() {
				if c.Status == provider.StatusClientClosed {
					t.Fatalf("a call was abandoned mid-flight by the drain: %+v", c)
				}
			}
			tz2 := runTenaz(t, cfgFile)
			for _, id := range ids {
				waitStatus(t, "http://"+tz2.addr, id, "done")
			}
			if d := p.DuplicateEffects(); len(d) != 0 {
				t.Fatalf("effects applied more than once after a graceful stop: %v", d)
			}
			if n := p.CallCount(); n != tc.events {
				t.Fatalf("want each of the %d events called once, got %d calls", tc.events, n)
			}
			_ = tz2.signal(t, syscall.SIGTERM)
		})
	}
}

// SIGKILL mid-flight loses nothing: after a restart every accepted event
// is done, and a target that dedups by Idempotency-Key applied each once
// (a call cut off by the kill is repeated with the same key).
func TestSIGKILLLosesNothing(t *testing.T) {
	t.Parallel()
	p, target := servicetest.Provider(t, provider.Faults{Latency: 200 * time.Millisecond}, provider.WithIdempotent())
	cfgFile := writeConfig(t, t.TempDir(), target.URL)

	tz := runTenaz(t, cfgFile)
	ids := submitN(t, "http://"+tz.addr, "kill", 40)
	natstest.Eventually(t, 10*time.Second, func() bool { return p.CallCount() >= 8 }, "calls in flight")
	_ = tz.signal(t, syscall.SIGKILL)

	tz2 := runTenaz(t, cfgFile)
	for _, id := range ids {
		waitStatus(t, "http://"+tz2.addr, id, "done")
	}
	for i := range ids {
		key := fmt.Sprintf("kill-%d", i)
		if n := p.Effects(ids[i]); n != 1 { // the event id is the Idempotency-Key the target sees
			t.Fatalf("%s: want the effect applied exactly once, got %d", key, n)
		}
	}
	_ = tz2.signal(t, syscall.SIGTERM)
}
