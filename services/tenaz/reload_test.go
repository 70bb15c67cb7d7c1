package tenaz_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/quota"
	"github.com/tenaz/tenaz/pkg/webhook"
	"github.com/tenaz/tenaz/services/tenaz"
)

// reloadConfig is a secured config whose acme account has the given rate
// and erp credential (token), and whose one API key of acme has hash.
func reloadConfig(dir, targetURL, rate, token, hash string) string {
	y := securedConfig(dir, targetURL, "")
	y = strings.Replace(y, secAcmeHash, hash, 1)
	y = strings.Replace(y, "nats:\n", "nats:\n  user: tenaz\n  password: n4ts-pw-0123\n", 1)
	y = strings.Replace(y, "log: {level: warn}", "log: {level: info}", 1)
	return strings.Replace(y, `  "*": {concurrency: 8, breaker: {failures: 100}}`+"\n",
		`  "*": {concurrency: 8, breaker: {failures: 100}}`+"\n  acme: {rate: \""+rate+"\", targets: {erp: {headers: {Authorization: \"Bearer "+token+"\"}}}}\n", 1)
}

// configStatus reads GET /v1/config as the operator alice.
func configStatus(t *testing.T, base string) ops.ConfigStatus {
	t.Helper()
	a := send(t, http.MethodGet, base+"/v1/config", "bearer:"+secAliceKey, "")
	if a.status != http.StatusOK {
		t.Fatalf("GET /v1/config: want 200, got %d %s", a.status, a.body)
	}
	var st ops.ConfigStatus
	if err := json.Unmarshal(a.body, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// startReloadable writes y to file and starts tenaz from it, reloading
// on what hup receives; it returns the HTTP base URL and hup.
func startReloadable(t *testing.T, file, y string) (base string, hup chan os.Signal) {
	t.Helper()
	if err := os.WriteFile(file, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	hup = make(chan os.Signal, 1)
	tz := startWith(t, y, tenaz.Options{ConfigPath: file, Reload: hup})
	return "http://" + tz.HTTPAddr(), hup
}

// reloadFile writes y to file, sends hup and waits until GET /v1/config
// at base says a reload was applied since.
func reloadFile(t *testing.T, base, file, y string, hup chan<- os.Signal) {
	t.Helper()
	if err := os.WriteFile(file, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	hup <- syscall.SIGHUP
	natstest.Eventually(t, 10*time.Second, func() bool {
		var st ops.ConfigStatus
		_ = json.Unmarshal(send(t, http.MethodGet, base+"/v1/config", "", "").body, &st)
		return st.OK && st.ReloadedAt.After(before)
	}, "the reload to be applied")
}

// minGap is the shortest time between two calls of calls (sorted by
// arrival).
func minGap(calls []provider.Call) time.Duration {
	gap := time.Duration(1 << 62)
	for i := 1; i < len(calls); i++ {
		gap = min(gap, calls[i].At.Sub(calls[i-1].At))
	}
	return gap
}

// The Done-when of issue 16 item 6, on the real binary: while events are
// submitted and delivered, tenaz.yaml is edited (acme's rate cut from
// 100/s to 4/s, acme's API key and its erp credential rotated) and the
// process gets SIGHUP. With no restart the new rate holds (calls at least
// 1/4 s apart), the old key is refused and the new one accepted, calls go
// with the new credential, and every accepted event is delivered once. Then a broken file is refused with its errors (in the
// log, GET /v1/config and tenaz_config_reload_success) and nothing
// changes: the rotated key still works, the rate is still 4/s.
func TestReloadUnderLoad(t *testing.T) {
	t.Parallel()
	p, targetURL := idempotentTarget(t)
	dir := t.TempDir()
	oldKey, oldHash := mustNewKey()
	newKey, newHash := mustNewKey()
	file := filepath.Join(dir, "tenaz.yaml")
	write := func(yaml string) {
		t.Helper()
		// Written whole then renamed, as a deploy tool does: the reload
		// never reads half a file.
		tmp := file + ".tmp"
		if err := os.WriteFile(tmp, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, file); err != nil {
			t.Fatal(err)
		}
	}
	write(reloadConfig(filepath.Join(dir, "data"), targetURL, "100/s", "old-erp-token", oldHash))
	tz := runTenaz(t, file)
	base := "http://" + tz.addr

	// The load: a submission every 25 ms with the key in use, until stop.
	var (
		mu       sync.Mutex
		key      = oldKey
		accepted []string
		refused  = map[int]int{}
		stop     = make(chan struct{})
		done     = make(chan struct{})
	)
	submit := func(k string, i int) answer {
		body := fmt.Sprintf(`{"account":"acme","kind":"order.create","payload":{"order_id":"o-%d"}}`, i)
		return send(t, http.MethodPost, base+"/v1/events", "bearer:"+k, body)
	}
	var stopOnce sync.Once
	halt := func() { stopOnce.Do(func() { close(stop) }); <-done }
	t.Cleanup(halt)
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(25 * time.Millisecond):
			}
			mu.Lock()
			k := key
			mu.Unlock()
			body := fmt.Sprintf(`{"account":"acme","kind":"order.create","payload":{"order_id":"o-%d"}}`, i)
			req, _ := http.NewRequest(http.MethodPost, base+"/v1/events", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+k)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				mu.Lock()
				refused[0]++ // no answer: counted, never taken for accepted
				mu.Unlock()
				continue
			}
			var v view
			_ = json.NewDecoder(resp.Body).Decode(&v)
			_ = resp.Body.Close()
			mu.Lock()
			if resp.StatusCode == http.StatusAccepted {
				accepted = append(accepted, v.ID)
			} else {
				refused[resp.StatusCode]++
				if resp.StatusCode == http.StatusUnauthorized && k == oldKey {
					key = newKey // the rotation reached the process: go on with the new key
				}
			}
			mu.Unlock()
		}
	}()
	natstest.Eventually(t, 20*time.Second, func() bool { return p.CallCount() >= 30 }, "30 calls delivered before the reload")
	fast := minGap(p.Calls())

	write(reloadConfig(filepath.Join(dir, "data"), targetURL, "4/s", "new-erp-token", newHash))
	if err := tz.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	var reloadedAt time.Time
	natstest.Eventually(t, 10*time.Second, func() bool {
		st := configStatus(t, base)
		reloadedAt = st.ReloadedAt
		return st.OK && !st.ReloadedAt.IsZero()
	}, "the reload to be applied")
	if a := submit(oldKey, -1); a.status != http.StatusUnauthorized {
		t.Fatalf("the old key after the rotation: want 401, got %d %s", a.status, a.body)
	}
	if a := submit(newKey, -2); a.status != http.StatusAccepted {
		t.Fatalf("the new key after the rotation: want 202, got %d %s", a.status, a.body)
	} else {
		var v view
		_ = json.Unmarshal(a.body, &v)
		mu.Lock()
		accepted = append(accepted, v.ID)
		mu.Unlock()
	}
	// Calls already past their guard when the reload came may still go at
	// the old rate; from a second after it, every call waits its turn.
	natstest.Eventually(t, 20*time.Second, func() bool {
		return len(callsAfter(p.Calls(), reloadedAt.Add(time.Second))) >= 8
	}, "8 calls after the reload")
	halt()
	if gap := minGap(callsAfter(p.Calls(), reloadedAt.Add(time.Second))); gap < 200*time.Millisecond {
		t.Fatalf("after the reload to 4/s: want calls at least 250ms apart (200ms with slack), got %v", gap)
	}
	for _, c := range p.Calls() {
		switch h := c.Header.Get("Authorization"); {
		case c.At.Before(reloadedAt) && h != "Bearer old-erp-token":
			t.Fatalf("a call before the reload went with %q, want the old erp credential", h)
		case c.At.After(reloadedAt.Add(time.Second)) && h != "Bearer new-erp-token":
			t.Fatalf("a call after the reload went with %q, want the new erp credential", h)
		}
	}
	if fast >= 200*time.Millisecond {
		t.Fatalf("before the reload (100/s) calls should come closer than 200ms (submissions every 25ms), the closest were %v apart: the test would prove nothing", fast)
	}
	mu.Lock()
	ids := slices.Clone(accepted)
	if refused[http.StatusUnauthorized] > 1 || len(refused) > 1 {
		t.Errorf("want at most the one submission that met the rotation refused (401), got %v", refused)
	}
	mu.Unlock()
	for _, id := range ids {
		var v view
		natstest.Eventually(t, 30*time.Second, func() bool {
			_ = json.Unmarshal(send(t, http.MethodGet, base+"/v1/events/"+id, "bearer:"+newKey, "").body, &v)
			return v.Status == "done"
		}, "event %s to be done (last seen %+v)", id, &v)
	}
	if d := p.DuplicateEffects(); len(d) != 0 {
		t.Fatalf("effects applied more than once: %v", d)
	}
	if n := len(p.Calls()); n < len(ids) {
		t.Fatalf("want every one of the %d accepted events delivered, the provider got %d calls", len(ids), n)
	}

	// A broken file: refused whole, every error named, nothing changed.
	broken := reloadConfig(filepath.Join(dir, "data"), targetURL, "fast", "new-erp-token", newHash)
	broken = strings.Replace(broken, "erp: {url:", "erp: {timeout_ms: 5, url:", 1)
	write(broken)
	if err := tz.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	var st ops.ConfigStatus
	natstest.Eventually(t, 10*time.Second, func() bool {
		st = configStatus(t, base)
		return !st.OK
	}, "the broken file to be refused")
	all := strings.Join(st.Errors, "\n")
	for _, want := range []string{"accounts.acme.rate", "targets.erp.timeout_ms"} {
		if !strings.Contains(all, want) {
			t.Errorf("GET /v1/config errors: want %q named, got %q", want, all)
		}
	}
	if a := submit(newKey, -3); a.status != http.StatusAccepted {
		t.Fatalf("after a refused reload the key in force must still work: want 202, got %d %s", a.status, a.body)
	}
	if a := submit(oldKey, -4); a.status != http.StatusUnauthorized {
		t.Fatalf("after a refused reload the old key must still be refused: want 401, got %d", a.status)
	}
	if ui := send(t, http.MethodGet, base+"/ui/accounts", "bearer:"+secAliceKey, ""); !strings.Contains(string(ui.body), `id="config-refused"`) ||
		!strings.Contains(string(ui.body), "accounts.acme.rate") {
		t.Errorf("the Accounts page: want the refused reload and its errors shown, got %d\n%s", ui.status, ui.body)
	}
	m := send(t, http.MethodGet, base+"/metrics", "", "")
	for _, want := range []string{"tenaz_config_reload_success 0", `tenaz_config_reloads_total{result="refused"} 1`, `tenaz_account_rate_limit_per_second{account="acme"} 4`} {
		if !strings.Contains(string(m.body), want) {
			t.Errorf("/metrics: want %q, got:\n%s", want, grep(string(m.body), "tenaz_"))
		}
	}
	natstest.Eventually(t, 5*time.Second, func() bool { return strings.Contains(tz.out.String(), "config reload refused") },
		"the refused reload logged")
	if strings.Contains(tz.out.String(), "n4ts-pw-0123") {
		t.Fatal("the log holds the NATS password")
	}
}

// callsAfter are the calls that arrived after at.
func callsAfter(calls []provider.Call, at time.Time) []provider.Call {
	var out []provider.Call
	for _, c := range calls {
		if c.At.After(at) {
			out = append(out, c)
		}
	}
	return out
}

// A target's webhook secret changes on a reload, in the same process:
// erp receives no webhooks until the reload gives it a callback_secret;
// a webhook signed with it is then accepted; after a rotation the old
// secret is refused and the new one accepted.
func TestReloadWebhookSecret(t *testing.T) {
	t.Parallel()
	const s1, s2 = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_dGVuYXotdGVzdC1jYWxsYmFjay1zZWNyZXQ="
	dir := t.TempDir()
	file := filepath.Join(dir, "tenaz.yaml")
	yaml := func(secret string) string {
		y := testConfig(filepath.Join(dir, "data"), "http://127.0.0.1:1", "")
		if secret != "" {
			y = strings.Replace(y, "erp: {url: ", `erp: {callback_secret: "`+secret+`", url: `, 1)
		}
		return y
	}
	base, hup := startReloadable(t, file, yaml(""))
	reload := func(y string) { t.Helper(); reloadFile(t, base, file, y, hup) }
	hook := func(secret string) int {
		body := []byte(`{"event_id":"ev_none","status":"done"}`)
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/callbacks/erp", strings.NewReader(string(body)))
		for k, v := range webhook.Headers(secret, "msg_"+strconv.FormatInt(time.Now().UnixNano(), 36), time.Now(), body) {
			req.Header[k] = v
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	if got := hook(s1); got != http.StatusNotFound {
		t.Fatalf("erp without a callback_secret: want 404, got %d", got)
	}
	reload(yaml(s1))
	if got := hook(s1); got != http.StatusOK {
		t.Fatalf("after the reload gave erp its secret: want 200, got %d", got)
	}
	reload(yaml(s2))
	if got := hook(s1); got != http.StatusUnauthorized {
		t.Fatalf("the rotated-out secret: want 401, got %d", got)
	}
	if got := hook(s2); got != http.StatusOK {
		t.Fatalf("the new secret: want 200, got %d", got)
	}
}

// A reload gives a target a provider-wide rate where no target had one
// at start: from then on its calls are spaced by it. A target's rate is a
// token bucket shared by every replica (quota.Smooth): each call's token
// comes 1/rate after the last one's, up to quota.Lateness early, and how
// long a call then takes to reach the provider varies with the machine's
// load. So the calls' span holds the rate, however late each one
// arrives; the gap between two of them need not (a CI run on a loaded
// host saw 196 ms between two calls at 4/s).
func TestReloadGivesATargetItsRate(t *testing.T) {
	t.Parallel()
	p, targetURL := idempotentTarget(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "tenaz.yaml")
	y := testConfig(filepath.Join(dir, "data"), targetURL, "")
	base, hup := startReloadable(t, file, y)
	submitN(t, base, "before", 10)
	natstest.Eventually(t, 20*time.Second, func() bool { return p.CallCount() >= 10 }, "the first 10 calls")
	if gap := minGap(p.Calls()); gap >= 200*time.Millisecond {
		t.Fatalf("without a rate, 10 events submitted at once should be called closer than 200ms, the closest were %v apart", gap)
	}
	reloadFile(t, base, file, strings.Replace(y, "erp: {url: ", "erp: {rate: 4/s, url: ", 1), hup)
	at := time.Now()
	submitN(t, base, "after", 6)
	natstest.Eventually(t, 20*time.Second, func() bool { return len(callsAfter(p.Calls(), at)) >= 6 }, "the 6 calls after the reload")
	after := callsAfter(p.Calls(), at)[:6]
	const arrival = 50 * time.Millisecond // how much later the first call may arrive than the last, relative to their tokens
	if span, least := after[5].At.Sub(after[0].At), 5*250*time.Millisecond-quota.Lateness-arrival; span < least {
		t.Fatalf("after the reload to targets.erp.rate 4/s: want 6 calls to span at least 5 × 250ms (%v with slack), got %v", least, span)
	}
}

// A reload gives an API key a submission rate: the key's next submission
// over it is refused with 429 and Retry-After, with no restart.
func TestReloadGivesAKeyItsRate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "tenaz.yaml")
	y := strings.Replace(securedConfig(filepath.Join(dir, "data"), "http://127.0.0.1:1", ""), "nats:\n", "nats:\n  user: tenaz\n  password: n4ts-pw-0123\n", 1)
	base, hup := startReloadable(t, file, y)
	submit := func(i int) answer {
		return send(t, http.MethodPost, base+"/v1/events", "bearer:"+secAcmeKey, fmt.Sprintf(`{"account":"acme","kind":"order.create","payload":{"order_id":"k-%d"}}`, i))
	}
	for i := range 3 {
		if a := submit(i); a.status != http.StatusAccepted {
			t.Fatalf("without a rate: want 202, got %d %s", a.status, a.body)
		}
	}
	limited := strings.Replace(y, `scopes: [submit, read], hash: "`+secAcmeHash+`"}`, `scopes: [submit, read], hash: "`+secAcmeHash+`", rate: 1/h, burst: 1}`, 1)
	if limited == y {
		t.Fatal("the test's edit did not apply")
	}
	if err := os.WriteFile(file, []byte(limited), 0o600); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	hup <- syscall.SIGHUP
	natstest.Eventually(t, 10*time.Second, func() bool {
		var st ops.ConfigStatus
		_ = json.Unmarshal(send(t, http.MethodGet, base+"/v1/config", "bearer:"+secAliceKey, "").body, &st)
		return st.OK && st.ReloadedAt.After(before)
	}, "the reload to be applied")
	if a := submit(10); a.status != http.StatusAccepted {
		t.Fatalf("the burst of 1: want 202, got %d %s", a.status, a.body)
	}
	if a := submit(11); a.status != http.StatusTooManyRequests || a.header.Get("Retry-After") == "" {
		t.Fatalf("over 1/h: want 429 with Retry-After, got %d %v", a.status, a.header)
	}
}
