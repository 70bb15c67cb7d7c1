package ingest_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/natstest"
)

// A key's submission rate holds across ingest replicas: two tenaz-ingest
// processes on one NATS, and one key (rate 10/s, burst 5) that submits at
// three times its rate, alternating between them. The submissions
// answered 202 are at most rate × window + burst, the window running from
// the first submission to the last answer (every decision falls in it);
// the rest are answered 429 with a Retry-After. Each replica counting on
// its own would accept about twice as many.
func TestKeyRateHoldsAcrossIngestProcesses(t *testing.T) {
	t.Parallel()
	const rate, burst = 10.0, 5
	key, hash := newKey()
	yaml := fmt.Sprintf(`
http: {addr: "127.0.0.1:0"}
log: {level: info, format: json}
auth:
  keys:
    shop: {account: acme, scopes: [submit], hash: %q, rate: %v/s, burst: %d}
targets:
  erp: {url: "http://127.0.0.1:1/api", timeout: 5s}
kinds:
  order.create: {target: erp, entity: order_id}
`, hash, rate, burst)
	srv := natstest.Start(t)
	api1, _ := startIngestProc(t, srv.ClientURL(), yaml, "i1")
	api2, _ := startIngestProc(t, srv.ClientURL(), yaml, "i2")
	apis := []string{api1, api2}

	const sends, every = 180, time.Second / 30 // 3 × the rate, for 6 s
	type answer struct {
		status int
		retry  string
		at     time.Time
	}
	answers := make([]answer, sends)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range sends {
		<-time.After(time.Until(start.Add(time.Duration(i) * every))) // the pace of the submitter
		wg.Go(func() {
			body := `{"account":"acme","kind":"order.create","payload":{"order_id":"r-` + strconv.Itoa(i) + `"}}`
			req, _ := http.NewRequest("POST", apis[i%2]+"/v1/events", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+key)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Errorf("submission %d: %v", i, err)
				return
			}
			resp.Body.Close()
			answers[i] = answer{resp.StatusCode, resp.Header.Get("Retry-After"), time.Now()}
		})
	}
	wg.Wait()
	var window time.Duration
	accepted, limited := 0, 0
	for i, a := range answers {
		window = max(window, a.at.Sub(start))
		switch a.status {
		case http.StatusAccepted:
			accepted++
		case http.StatusTooManyRequests:
			limited++
			if s, err := strconv.Atoi(a.retry); err != nil || s < 1 {
				t.Errorf("submission %d: want 429 with Retry-After of at least 1s, got %q", i, a.retry)
			}
		default:
			t.Errorf("submission %d: want 202 or 429, got %d", i, a.status)
		}
	}
	most := int(rate*window.Seconds()) + burst
	t.Logf("%d submissions at 30/s over %s through two replicas: %d answered 202, %d answered 429 (at most %d may be accepted)", sends, window.Round(time.Millisecond), accepted, limited, most)
	if accepted > most {
		t.Errorf("want at most %d submissions accepted in %s (10/s + burst 5, over both replicas), got %d", most, window.Round(time.Millisecond), accepted)
	}
	if least := int(rate * window.Seconds() * 0.7); accepted < least {
		t.Errorf("want the key served at its rate, at least %d accepted, got %d", least, accepted)
	}
}

// ingestBinary is the real tenaz-ingest, built once per test run.
func ingestBinary(t *testing.T) string { return natstest.Binary(t, "./cmd/tenaz-ingest") }

// startIngestProc runs tenaz-ingest with config yaml against natsURL and
// returns its HTTP API's base URL (read from its "running" log line) and
// its process, for a test to kill.
func startIngestProc(t *testing.T, natsURL, yaml, name string) (api string, proc *natstest.Proc) {
	t.Helper()
	proc = natstest.StartProc(t, name, ingestBinary(t), yaml, "NATS_URL="+natsURL)
	var addr string
	natstest.Eventually(t, 30*time.Second, func() bool {
		addr = runningAddr(proc.Log())
		return addr != ""
	}, "want tenaz-ingest %s running (its log line with the HTTP address)", name)
	return "http://" + addr, proc
}

// runningAddr is the HTTP address of a binary's "<name> running" log line,
// or "" before it.
func runningAddr(log []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(log))
	for sc.Scan() {
		var l struct {
			HTTP    string `json:"http"`
			Message string `json:"message"`
		}
		if json.Unmarshal(sc.Bytes(), &l) == nil && strings.HasSuffix(l.Message, " running") && l.HTTP != "" {
			return l.HTTP
		}
	}
	return ""
}
