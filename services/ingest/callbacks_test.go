package ingest_test

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenaz/tenaz/pkg/callbacks"
	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/metrics"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/queue"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/webhook"
	"github.com/tenaz/tenaz/services/ingest"
)

// cbSecret signs the webhooks of the bureau target in these tests.
const cbSecret = "whsec_dGVuYXotaW5nZXN0LWNhbGxiYWNrLXRlc3Qtc2VjcmV0"

// callbackYAML: credit.evaluate goes to bureau (at url), which answers by
// webhook; a status of approved or rejected is final.
func callbackYAML(url string) string {
	return `
streams: {ack_wait: 2s}
targets:
  bureau:
    url: "` + url + `/proposals"
    timeout: 3s
    callback_secret: "` + cbSecret + `"
    callback: {done_when: {field: status, in: [approved, rejected]}}
kinds:
  credit.evaluate: {target: bureau, completion: callback, entity: app_id}
`
}

// tenants is a provider at which every call reaches a new tenant: each is
// its own provider.Provider, and each hands out the reference "ref_1"
// first, as providers that number jobs per tenant do.
func tenants(t *testing.T) *httptest.Server {
	t.Helper()
	var mu sync.Mutex
	var ps []*provider.Provider
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := provider.New(provider.Faults{})
		mu.Lock()
		ps = append(ps, p)
		mu.Unlock()
		p.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		srv.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, p := range ps {
			_ = p.Close()
		}
	})
	return srv
}

// submitCredit submits a credit.evaluate event of account and returns its id.
func (h *harness) submitCredit(account, app string) string {
	h.t.Helper()
	r := h.do(http.MethodPost, "/v1/events", `{"account":"`+account+`","kind":"credit.evaluate","payload":{"app_id":"`+app+`"}}`, "Idempotency-Key", app)
	if r.Status != http.StatusAccepted {
		h.t.Fatalf("submit %s/%s: want 202, got %d %s", account, app, r.Status, r.Body)
	}
	return event.ID(account, app)
}

// webhook posts body to path signed with cbSecret as webhook-id id, now.
func (h *harness) webhook(path, id, body string) response {
	h.t.Helper()
	return h.do(http.MethodPost, path, body, signed(id, time.Now(), body)...)
}

// signed is the Standard Webhooks headers of body as alternating name, value.
func signed(id string, at time.Time, body string) []string {
	var hs []string
	for k, v := range webhook.Headers(cbSecret, id, at, []byte(body)) {
		hs = append(hs, k, v[0])
	}
	return hs
}

// outcome decodes a 200 answer to a webhook, failing on any other answer.
func (r response) outcome(t *testing.T) ingest.CallbackReply {
	t.Helper()
	if r.Status != http.StatusOK {
		t.Fatalf("webhook: want 200, got %d %s", r.Status, r.Body)
	}
	var rep ingest.CallbackReply
	r.json(t, &rep)
	return rep
}

// flood sends n POSTs from workers goroutines, the i-th built by req
// (path, body, headers), and returns the answers; a request that gets no
// answer fails the test.
func (h *harness) flood(n, workers int, req func(i int) (path, body string, headers []string)) []response {
	h.t.Helper()
	answers := make([]response, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				path, body, hs := req(i)
				answers[i], errs[i] = h.send(http.MethodPost, path, body, hs...)
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			h.t.Fatalf("request %d of %d: %v", i+1, n, err)
		}
	}
	return answers
}

// awaiting waits for the events to await their callbacks and returns
// their records; every one must hold the reference ref.
func (h *harness) awaiting(ref string, ids ...string) []state.Record {
	h.t.Helper()
	var out []state.Record
	for _, id := range ids {
		rec := h.WaitStatus(id, state.AwaitingCallback, servicetest.WaitFor)
		if rec.Reference != ref {
			h.t.Fatalf("event %s: want the provider's reference %q, got %q", id, ref, rec.Reference)
		}
		out = append(out, rec)
	}
	return out
}

// TestCallbackReferencesArePerAccount: two accounts whose providers hand
// out the same reference. Each account's webhook reaches its own event
// only; a webhook that names no account cannot tell them apart and moves
// neither; a webhook of one account naming another's event id finds no
// event and leaves it untouched.
func TestCallbackReferencesArePerAccount(t *testing.T) {
	t.Parallel()
	h := setup(t, callbackYAML(tenants(t).URL))
	h.startDispatcher("d1")
	acme, globex := h.submitCredit("acme", "a-1"), h.submitCredit("globex", "g-1")
	h.awaiting("ref_1", acme, globex)

	if got := h.webhook("/v1/callbacks/bureau", "msg_any", `{"reference":"ref_1","status":"approved"}`).outcome(t); got.Outcome != ingest.CallbackAmbiguous {
		t.Fatalf("webhook naming no account, reference held by two: want %q, got %+v", ingest.CallbackAmbiguous, got)
	}
	before, _ := h.Lookup(acme)
	if got := h.webhook("/v1/callbacks/bureau/globex", "msg_cross", `{"event_id":"`+acme+`","status":"approved"}`).outcome(t); got.Outcome != ingest.CallbackUnknown || got.ID != "" {
		t.Fatalf("globex's webhook naming acme's event: want %q without an id, got %+v", ingest.CallbackUnknown, got)
	}
	if after, _ := h.Lookup(acme); after.Status != state.AwaitingCallback || len(after.History) != len(before.History) {
		t.Fatalf("acme's event after globex's webhook: want it untouched (awaiting_callback, %d history entries), got %s with %d",
			len(before.History), after.Status, len(after.History))
	}

	if got := h.webhook("/v1/callbacks/bureau/globex", "msg_g", `{"reference":"ref_1","status":"approved","by":"globex"}`).outcome(t); got.Outcome != ingest.CallbackApplied || got.ID != globex {
		t.Fatalf("globex's webhook: want applied to %s, got %+v", globex, got)
	}
	if rec, _ := h.Lookup(acme); rec.Status != state.AwaitingCallback {
		t.Fatalf("acme's event after globex's webhook naming the same reference: want awaiting_callback, got %s", rec.Status)
	}
	if got := h.webhook("/v1/callbacks/bureau/acme", "msg_a", `{"reference":"ref_1","status":"approved","by":"acme"}`).outcome(t); got.Outcome != ingest.CallbackApplied || got.ID != acme {
		t.Fatalf("acme's webhook: want applied to %s, got %+v", acme, got)
	}
	for id, by := range map[string]string{acme: "acme", globex: "globex"} {
		rec := h.WaitStatus(id, state.Done, servicetest.WaitFor)
		var res struct{ By string }
		if err := json.Unmarshal(rec.Result, &res); err != nil || res.By != by {
			t.Errorf("event %s: want the result of %s's webhook, got %s", id, by, rec.Result)
		}
	}
}

// TestCapturedWebhookSentToAnotherAccountsURL: the account in
// /v1/callbacks/{target}/{account} is not signed, so a webhook captured
// on its way to one account's URL can be sent, signature and all, to
// another's within the timestamp's tolerance. Two accounts whose provider
// hands out the same reference: the copy completes nothing and writes
// nothing in the other account's event, whose own webhook still applies,
// even under the same webhook-id. Before, the copy completed globex's
// event with acme's result.
func TestCapturedWebhookSentToAnotherAccountsURL(t *testing.T) {
	t.Parallel()
	h := setup(t, callbackYAML(tenants(t).URL))
	h.startDispatcher("d1")
	acme, globex := h.submitCredit("acme", "a-1"), h.submitCredit("globex", "g-1")
	h.awaiting("ref_1", acme, globex)

	body := `{"reference":"ref_1","status":"approved","by":"acme"}`
	captured := signed("msg_captured", time.Now(), body)
	if got := h.do(http.MethodPost, "/v1/callbacks/bureau/acme", body, captured...).outcome(t); got.Outcome != ingest.CallbackApplied || got.ID != acme {
		t.Fatalf("acme's webhook: want applied to %s, got %+v", acme, got)
	}
	before, _ := h.Lookup(globex)
	// The copy as captured, and the provider's retry of the message (the
	// same id and body, signed again a little later): neither is globex's.
	retry := signed("msg_captured", time.Now().Add(90*time.Second), body)
	for what, hs := range map[string][]string{"copied": captured, "retried": retry} {
		if got := h.do(http.MethodPost, "/v1/callbacks/bureau/globex", body, hs...).outcome(t); got.Outcome != ingest.CallbackDuplicate || got.ID != "" {
			t.Fatalf("acme's webhook %s to globex's URL: want %q without an id, got %+v", what, ingest.CallbackDuplicate, got)
		}
	}
	if after, _ := h.Lookup(globex); after.Status != state.AwaitingCallback || len(after.History) != len(before.History) {
		t.Fatalf("globex's event after the copy: want it untouched (awaiting_callback, %d history entries), got %s with %d %s",
			len(before.History), after.Status, len(after.History), after.Result)
	}
	// globex's own webhook, under the same webhook-id (a provider that
	// numbers its messages per tenant): another message, applied.
	if got := h.webhook("/v1/callbacks/bureau/globex", "msg_captured", `{"reference":"ref_1","status":"approved","by":"globex"}`).outcome(t); got.Outcome != ingest.CallbackApplied || got.ID != globex {
		t.Fatalf("globex's own webhook, under the same webhook-id: want applied to %s, got %+v", globex, got)
	}
	// The copy sent again to acme's own URL is the duplicate it always was.
	if got := h.do(http.MethodPost, "/v1/callbacks/bureau/acme", body, captured...).outcome(t); got.Outcome != ingest.CallbackDuplicate || got.ID != acme {
		t.Fatalf("acme's webhook again: want %q of %s, got %+v", ingest.CallbackDuplicate, acme, got)
	}
}

// TestWebhookNamingAnEventItNeverAnswers: a target's webhook that names
// an event none of whose stages that target answers (here a sync event)
// finds no event, as for an id that does not exist, and writes nothing
// to it. Before, it answered "late" with the id, telling a provider which
// ids exist, and wrote a note each time: 200 of them pushed the event's
// own notes out of its history.
func TestWebhookNamingAnEventItNeverAnswers(t *testing.T) {
	t.Parallel()
	h := setup(t, callbackYAML(tenants(t).URL)+`
  order.create: {target: bureau}
`)
	h.startDispatcher("d1")
	r := h.do(http.MethodPost, "/v1/events", `{"account":"acme","kind":"order.create","payload":{"n":1}}`, "Idempotency-Key", "o-1")
	if r.Status != http.StatusAccepted {
		t.Fatalf("submit: %d %s", r.Status, r.Body)
	}
	id := event.ID("acme", "o-1")
	before := h.WaitStatus(id, state.Done, servicetest.WaitFor)
	for i := range 3 {
		if got := h.webhook("/v1/callbacks/bureau", fmt.Sprintf("msg_%d", i), `{"event_id":"`+id+`","status":"approved"}`).outcome(t); got.Outcome != ingest.CallbackUnknown || got.ID != "" {
			t.Fatalf("webhook naming a sync event: want %q without an id, got %+v", ingest.CallbackUnknown, got)
		}
	}
	if after, _ := h.Lookup(id); len(after.History) != len(before.History) {
		t.Fatalf("want nothing written to the sync event, got %d history entries, had %d", len(after.History), len(before.History))
	}
}

// TestCallbackReferenceConflict: a second event of the account gets a
// reference the first holds. The mapping stays with the first (a webhook
// naming the reference completes it), the second's history records the
// conflict, and the second still completes by a webhook naming its id.
func TestCallbackReferenceConflict(t *testing.T) {
	t.Parallel()
	h := setup(t, callbackYAML(tenants(t).URL))
	h.startDispatcher("d1")
	first := h.submitCredit("acme", "c-1")
	h.awaiting("ref_1", first)
	second := h.submitCredit("acme", "c-2")
	rec := h.awaiting("ref_1", second)[0]

	var noted bool
	for _, e := range rec.History {
		noted = noted || e.Action == state.AwaitCallback && strings.Contains(e.Detail, "reference conflict") && strings.Contains(e.Detail, first)
	}
	if !noted {
		t.Fatalf("second event's history: want its await_callback entry to record the conflict with %s, got %+v", first, rec.History)
	}
	idx, err := callbacks.Open(h.Ctx(), h.JS, "")
	if err != nil {
		t.Fatal(err)
	}
	if id, err := idx.Lookup(h.Ctx(), "acme", "bureau", "ref_1", nil); err != nil || id != first {
		t.Fatalf("index after the conflict: want ref_1 → %s, got %q, %v", first, id, err)
	}
	if got := h.webhook("/v1/callbacks/bureau/acme", "msg_1", `{"reference":"ref_1","status":"approved"}`).outcome(t); got.Outcome != ingest.CallbackApplied || got.ID != first {
		t.Fatalf("webhook naming the reference: want applied to the first event %s, got %+v", first, got)
	}
	if r, _ := h.Lookup(second); r.Status != state.AwaitingCallback {
		t.Fatalf("second event: want still awaiting_callback, got %s", r.Status)
	}
	if got := h.webhook("/v1/callbacks/bureau/acme", "msg_2", `{"event_id":"`+second+`","reference":"ref_1","status":"approved"}`).outcome(t); got.Outcome != ingest.CallbackApplied || got.ID != second {
		t.Fatalf("webhook naming the second event's id: want applied to %s, got %+v", second, got)
	}
}

// TestCallbackLegacyReference: a reference recorded by an older version
// (ref.<target>.<hash>, no account) still resolves, on both routes, but
// never for a webhook of another account; and it still counts as held: a
// new event of another account getting it records a conflict that does
// not name the holder.
func TestCallbackLegacyReference(t *testing.T) {
	t.Parallel()
	h := setup(t, callbackYAML(tenants(t).URL))
	h.startDispatcher("d1")
	old := h.submitCredit("acme", "l-1")
	h.awaiting("ref_1", old)
	kv, err := h.JS.KeyValue(h.Ctx(), names.BucketCallbacks)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("ref_1"))
	hash := hex.EncodeToString(sum[:16])
	if err := kv.Delete(h.Ctx(), "ref.bureau.acme."+hash); err != nil {
		t.Fatalf("delete the new-layout key: %v", err)
	}
	if _, err := kv.Put(h.Ctx(), "ref.bureau."+hash, []byte(old)); err != nil {
		t.Fatalf("write the legacy key: %v", err)
	}

	if got := h.webhook("/v1/callbacks/bureau/globex", "msg_x", `{"reference":"ref_1","status":"approved"}`).outcome(t); got.Outcome != ingest.CallbackUnknown {
		t.Fatalf("globex's webhook naming acme's legacy reference: want %q, got %+v", ingest.CallbackUnknown, got)
	}
	if got := h.webhook("/v1/callbacks/bureau", "msg_p", `{"reference":"ref_1","status":"processing"}`).outcome(t); got.Outcome != ingest.CallbackProgress || got.ID != old {
		t.Fatalf("webhook naming no account: want %q for %s, got %+v", ingest.CallbackProgress, old, got)
	}
	if got := h.webhook("/v1/callbacks/bureau/acme", "msg_a", `{"reference":"ref_1","status":"approved"}`).outcome(t); got.Outcome != ingest.CallbackApplied || got.ID != old {
		t.Fatalf("acme's webhook: want applied to %s, got %+v", old, got)
	}

	other := h.submitCredit("globex", "l-2")
	rec := h.awaiting("ref_1", other)[0]
	var noted bool
	for _, e := range rec.History {
		if strings.Contains(e.Detail, old) {
			t.Fatalf("globex's history names acme's event %s: %+v", old, e)
		}
		noted = noted || e.Action == state.AwaitCallback && strings.Contains(e.Detail, "reference conflict")
	}
	if !noted {
		t.Fatalf("globex's event: want its await_callback entry to record the conflict, got %+v", rec.History)
	}
}

// TestWebhookHeadersCheckedBeforeBody: a webhook whose headers are
// missing, malformed or stale is refused at once, while the client has
// sent none of the body it announced; without the check the handler would
// wait for that body.
func TestWebhookHeadersCheckedBeforeBody(t *testing.T) {
	t.Parallel()
	h := setup(t, callbackYAML("http://127.0.0.1:1"))
	now := time.Now().Unix()
	mac := "v1," + strings.Repeat("A", 43) + "="
	tests := []struct{ name, headers, want string }{
		{"stale timestamp", fmt.Sprintf("webhook-id: msg_1\r\nwebhook-timestamp: %d\r\nwebhook-signature: %s\r\n", now-3600, mac), "timestamp"},
		{"no signature", fmt.Sprintf("webhook-id: msg_1\r\nwebhook-timestamp: %d\r\n", now), webhook.HeaderSignature},
		{"malformed signature", fmt.Sprintf("webhook-id: msg_1\r\nwebhook-timestamp: %d\r\nwebhook-signature: v1,AAAA\r\n", now), webhook.HeaderSignature},
		{"timestamp not a number", "webhook-id: msg_1\r\nwebhook-timestamp: soon\r\nwebhook-signature: " + mac + "\r\n", webhook.HeaderTimestamp},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			conn, err := net.Dial("tcp", h.api.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			fmt.Fprintf(conn, "POST /v1/callbacks/bureau HTTP/1.1\r\nHost: tenaz\r\nContent-Type: application/json\r\nContent-Length: 65536\r\n%s\r\n", tt.headers)
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("want an answer before the body is sent, got %v", err)
			}
			defer resp.Body.Close()
			var e struct {
				Error struct{ Code, Message string }
			}
			_ = json.NewDecoder(resp.Body).Decode(&e)
			if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(e.Error.Message, tt.want) {
				t.Fatalf("want 401 naming %q, got %d %+v", tt.want, resp.StatusCode, e)
			}
		})
	}
}

// TestWebhookRefusalsRateLimited: a flood of forged webhooks is answered
// 401 up to the target's refusal budget and 429 beyond it, its log lines
// are sampled, the metric counts every one, and a genuine webhook still
// gets through.
func TestWebhookRefusalsRateLimited(t *testing.T) {
	t.Parallel()
	logs := &servicetest.LogBuffer{}
	reg := prometheus.NewRegistry()
	set, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	h := setup(t, callbackYAML("http://127.0.0.1:1"), withLog(logs), withMetrics(set))
	const forged = 200
	body := `{"reference":"ref_1","status":"approved"}`
	start := time.Now()
	answers := h.flood(forged, 8, func(i int) (string, string, []string) {
		hs := webhook.Headers("whsec_Zm9yZ2VyLWZvcmdlci1mb3JnZXItZm9yZ2Vy", "msg_"+strconv.Itoa(i), time.Now(), []byte(body))
		return "/v1/callbacks/bureau", body, []string{webhook.HeaderID, hs.Get(webhook.HeaderID),
			webhook.HeaderTimestamp, hs.Get(webhook.HeaderTimestamp), webhook.HeaderSignature, hs.Get(webhook.HeaderSignature)}
	})
	secs := int(time.Since(start)/time.Second) + 1 // refusal windows the flood spanned
	codes := map[int]int{}
	for _, r := range answers {
		codes[r.Status]++
	}

	if codes[http.StatusUnauthorized]+codes[http.StatusTooManyRequests] != forged {
		t.Fatalf("forged webhooks: want only 401 and 429, got %v", codes)
	}
	if maxRefused := 20 * (secs + 1); codes[http.StatusUnauthorized] > maxRefused || codes[http.StatusTooManyRequests] == 0 {
		t.Fatalf("forged webhooks over %ds: want at most %d answered 401 and the rest 429, got %v", secs, maxRefused, codes)
	}
	if n, maxLines := strings.Count(logs.String(), "webhook refused"), 5*(secs/10+2); n == 0 || n > maxLines {
		t.Fatalf("log lines of %d refusals over %ds: want 1 to %d (sampled), got %d", forged, secs, maxLines, n)
	}
	m := &metricsHarness{harness: h, set: set, reg: reg}
	if got := m.value(metrics.NameCallbacks, "target", "bureau", "result", metrics.CallbackForged); got != forged {
		t.Fatalf("%s{result=forged}: want every refusal counted (%d), got %v", metrics.NameCallbacks, forged, got)
	}
	if got := h.webhook("/v1/callbacks/bureau", "msg_genuine", body).outcome(t); got.Outcome != ingest.CallbackUnknown {
		t.Fatalf("genuine webhook after the flood: want it verified (%q: no event holds ref_1), got %+v", ingest.CallbackUnknown, got)
	}
}

// TestWebhookReplayCostsBoundedWrites: a captured valid webhook replayed
// 300 times inside the tolerance is applied once, its copies are recorded
// at most once, and the event's record is written at most twice; a late
// webhook replayed is recorded once too. The history keeps its claim and
// attempt entries.
func TestWebhookReplayCostsBoundedWrites(t *testing.T) {
	t.Parallel()
	h := setup(t, callbackYAML(tenants(t).URL))
	h.startDispatcher("d1")
	id := h.submitCredit("acme", "r-1")
	h.awaiting("ref_1", id)
	deadline := func() uint64 { return h.SubjectMsgs(h.Subj.EventsStream("acme"), h.Subj.Schedule("acme", id)) }
	if n := deadline(); n != 1 {
		t.Fatalf("awaiting its callback: want its deadline scheduled, got %d schedules", n)
	}

	replay := func(webhookID string, n int) (outcomes map[string]int, writes uint64) {
		body := `{"event_id":"` + id + `","status":"approved"}`
		hs := signed(webhookID, time.Now(), body) // captured once, sent n times
		before := h.StateSeq()
		answers := h.flood(n, 6, func(int) (string, string, []string) { return "/v1/callbacks/bureau/acme", body, hs })
		outcomes = map[string]int{}
		for _, r := range answers {
			outcomes[r.outcome(t).Outcome]++
		}
		return outcomes, h.StateSeq() - before
	}

	outcomes, writes := replay("msg_captured", 300)
	if outcomes[ingest.CallbackApplied] != 1 || outcomes[ingest.CallbackDuplicate] != 299 {
		t.Fatalf("300 copies of one webhook: want 1 applied and 299 duplicates, got %v", outcomes)
	}
	if writes > 2 {
		t.Fatalf("300 copies of one webhook: want at most 2 writes of the event's record, got %d", writes)
	}
	natstest.Eventually(t, servicetest.WaitFor, func() bool { return deadline() == 0 }, "applied: want the event's deadline purged")
	outcomes, writes = replay("msg_late", 100)
	if outcomes[ingest.CallbackLate] != 100 || writes > 1 {
		t.Fatalf("100 copies of a webhook for a done event: want 100 late and at most 1 write, got %v and %d writes", outcomes, writes)
	}

	rec := h.WaitStatus(id, state.Done, servicetest.WaitFor)
	count := map[state.ActionName]int{}
	for _, e := range rec.History {
		count[e.Action]++
	}
	if count[state.Claim] != 1 || count[state.AwaitCallback] != 1 || count[state.Complete] != 1 || count[state.Note] > 2 {
		t.Fatalf("history after the replays: want 1 claim, 1 await_callback, 1 complete and at most 2 notes, got %v", count)
	}
}

// Copies of a progress webhook whose note is cut to state.MaxDetail (a
// status of 3 KB) are recorded once too: the note they would write is
// compared as it is stored, cut, not as it was made.
func TestCopiesOfALongProgressNoteAreRecordedOnce(t *testing.T) {
	t.Parallel()
	h := setup(t, callbackYAML(tenants(t).URL))
	h.startDispatcher("d1")
	id := h.submitCredit("acme", "long-1")
	h.awaiting("ref_1", id)
	body := `{"event_id":"` + id + `","status":"` + strings.Repeat("p", 3000) + `"}`
	hs := signed("msg_progress", time.Now(), body)
	before := h.StateSeq()
	for _, r := range h.flood(30, 3, func(int) (string, string, []string) { return "/v1/callbacks/bureau/acme", body, hs }) {
		if got := r.outcome(t); got.Outcome != ingest.CallbackProgress {
			t.Fatalf("a copy of a progress webhook: want %q, got %+v", ingest.CallbackProgress, got)
		}
	}
	if writes := h.StateSeq() - before; writes > 1 {
		t.Fatalf("30 copies of a progress webhook with a long status: want at most 1 write of the event's record, got %d", writes)
	}
}

// TestWebhookBeforeTheCallsAnswerIsApplied: the provider calls back,
// naming only its own reference, before its answer to the call reaches
// tenaz, so before the dispatcher records the reference. The webhook is
// held until the reference is recorded, then applied; answered unknown at
// once, it was lost and its event left to its deadline.
func TestWebhookBeforeTheCallsAnswerIsApplied(t *testing.T) {
	t.Parallel()
	var h *harness
	const body = `{"reference":"job-1","status":"approved"}`
	replies := make(chan response, 1)
	errs := make(chan error, 1)
	answered := make(chan struct{})
	bureau := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		go func() {
			rep, err := h.send(http.MethodPost, "/v1/callbacks/bureau/acme", body, signed("msg_early", time.Now(), body)...)
			close(answered)
			if err != nil {
				errs <- err
				return
			}
			replies <- rep
		}()
		// Answer once the webhook is answered (it was not held) or held:
		// the watch of its reference is a consumer of the callbacks bucket.
		held := func() bool {
			s, err := h.JS.Stream(r.Context(), "KV_"+names.BucketCallbacks)
			if err != nil {
				return false
			}
			info, err := s.Info(r.Context())
			return err == nil && info.State.Consumers > 0
		}
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		deadline := time.After(10 * time.Second)
	wait:
		for !held() {
			select {
			case <-answered:
				break wait
			case <-deadline:
				break wait
			case <-tick.C:
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write([]byte(`{"id":"job-1"}`))
	}))
	t.Cleanup(bureau.Close)
	h = setup(t, callbackYAML(bureau.URL))
	h.startDispatcher("d1")
	id := h.submitCredit("acme", "early-1")
	select {
	case err := <-errs:
		t.Fatal(err)
	case rep := <-replies:
		if got := rep.outcome(t); got.Outcome != ingest.CallbackApplied || got.ID != id {
			t.Fatalf("webhook before the call's answer: want applied to %s, got %+v", id, got)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no answer to the webhook")
	}
	rec := h.WaitStatus(id, state.Done, servicetest.WaitFor)
	if rec.Reference != "job-1" {
		t.Fatalf("event %s: want the reference job-1, got %q", id, rec.Reference)
	}
}

// TestEarlyWebhooksAreHeldPerTarget: a provider that sends webhooks
// for references tenaz never gave out fills its own target's hold slots,
// and its next such webhook is answered unknown at once; another
// target's early webhook is still held for its reference.
func TestEarlyWebhooksAreHeldPerTarget(t *testing.T) {
	t.Parallel()
	h := setup(t, `
targets:
  bureau: {url: "http://127.0.0.1:1", timeout: 5s, callback_secret: "`+cbSecret+`"}
  ledger: {url: "http://127.0.0.1:1", timeout: 5s, callback_secret: "`+cbSecret+`"}
kinds:
  credit.evaluate: {target: bureau, completion: callback}
  ledger.post: {target: ledger, completion: callback}
`, withEarlyWebhooks(1))
	// hold sends a webhook naming ref to target and answers on a channel.
	hold := func(target, ref string) <-chan response {
		c := make(chan response, 1)
		body := `{"reference":"` + ref + `","status":"approved"}`
		go func() {
			rep, err := h.send(http.MethodPost, "/v1/callbacks/"+target, body, signed("msg_"+ref, time.Now(), body)...)
			if err != nil {
				rep = response{Status: -1, Body: []byte(err.Error())}
			}
			c <- rep
		}()
		return c
	}
	// held waits until n webhooks are held (each watches its reference:
	// a consumer of the callbacks bucket), failing if answer comes first.
	held := func(n int, answer <-chan response) {
		t.Helper()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		deadline := time.After(10 * time.Second)
		for {
			if s, err := h.JS.Stream(h.Ctx(), "KV_"+names.BucketCallbacks); err == nil {
				if info, err := s.Info(h.Ctx()); err == nil && info.State.Consumers >= n {
					return
				}
			}
			select {
			case rep := <-answer:
				t.Fatalf("want the webhook held (%d held), it was answered %d %s", n, rep.Status, rep.Body)
			case <-deadline:
				t.Fatalf("%d webhooks not held within 10s", n)
			case <-tick.C:
			}
		}
	}
	first := hold("bureau", "other-job-1")
	held(1, first)
	second := hold("ledger", "ledger-job-1")
	held(2, second)
	third := <-hold("bureau", "other-job-2")
	if got := third.outcome(t); got.Outcome != ingest.CallbackUnknown {
		t.Fatalf("a webhook past bureau's held slot: want %s at once, got %+v", ingest.CallbackUnknown, got)
	}
	select {
	case rep := <-first:
		t.Fatalf("bureau's held webhook answered %d %s before its hold ended", rep.Status, rep.Body)
	default:
	}
	for _, c := range []<-chan response{first, second} {
		if got := (<-c).outcome(t); got.Outcome != ingest.CallbackUnknown {
			t.Fatalf("a held webhook whose reference nobody recorded: want %s once its hold ends, got %+v", ingest.CallbackUnknown, got)
		}
	}
}

// TestCopiesOfAWebhookShareItsHoldSlot: the account in a callback URL
// is not signed, so a captured webhook naming a reference nobody
// recorded can be sent again, inside its tolerance, to other accounts'
// URLs. Its copies share one hold slot (at most 4 held at once, the next
// answered unknown at once), and the provider's own early webhook still
// finds a slot. Before, each copy took a slot of its own, and the
// provider's webhook was answered unknown at once: its event was left
// to its deadline.
func TestCopiesOfAWebhookShareItsHoldSlot(t *testing.T) {
	t.Parallel()
	const maxCopies = 4 // maxCopiesHeld
	h := setup(t, `
targets:
  bureau: {url: "http://127.0.0.1:1", timeout: 5s, callback_secret: "`+cbSecret+`"}
kinds:
  credit.evaluate: {target: bureau, completion: callback}
`, withEarlyWebhooks(2))
	send := func(path, msgID, body string, at time.Time) <-chan response {
		c := make(chan response, 1)
		go func() {
			rep, err := h.send(http.MethodPost, path, body, signed(msgID, at, body)...)
			if err != nil {
				rep = response{Status: -1, Body: []byte(err.Error())}
			}
			c <- rep
		}()
		return c
	}
	// held waits until n webhooks are held (each watches its reference:
	// a consumer of the callbacks bucket), failing if one is answered first.
	var answers []<-chan response
	held := func(n int) {
		t.Helper()
		natstest.Eventually(t, 10*time.Second, func() bool {
			for _, a := range answers {
				select {
				case rep := <-a:
					t.Fatalf("want every webhook held (%d), one was answered %d %s", n, rep.Status, rep.Body)
				default:
				}
			}
			s, err := h.JS.Stream(h.Ctx(), "KV_"+names.BucketCallbacks)
			if err != nil {
				return false
			}
			info, err := s.Info(h.Ctx())
			return err == nil && info.State.Consumers >= n
		}, "%d webhooks held", n)
	}
	const captured = `{"reference":"job-x","status":"approved"}`
	at := time.Now()
	for i := range maxCopies {
		answers = append(answers, send(fmt.Sprintf("/v1/callbacks/bureau/zz%d", i), "msg_captured", captured, at))
		held(i + 1)
	}
	extra := <-send("/v1/callbacks/bureau/zz9", "msg_captured", captured, at)
	if got := extra.outcome(t); got.Outcome != ingest.CallbackUnknown {
		t.Fatalf("a copy past the %d held: want %s at once, got %+v", maxCopies, ingest.CallbackUnknown, got)
	}
	const early = `{"reference":"job-y","status":"approved"}`
	answers = append(answers, send("/v1/callbacks/bureau/acme", "msg_early", early, time.Now()))
	held(maxCopies + 1)
	for _, a := range answers {
		if got := (<-a).outcome(t); got.Outcome != ingest.CallbackUnknown {
			t.Fatalf("a held webhook whose reference nobody recorded: want %s once its hold ends, got %+v", ingest.CallbackUnknown, got)
		}
	}
}

// TestCallbackOfATimedOutAttemptCompletesTheEvent: the provider took the
// work but its answer never reached tenaz (the call timed out), then
// called back. The event is retrying (its next attempt a minute away);
// the callback brings the result that attempt would wait for. One
// retrying after the provider answered 503 took nothing: a callback for
// it is late.
func TestCallbackOfATimedOutAttemptCompletesTheEvent(t *testing.T) {
	t.Parallel()
	bureau := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body) // read whole, so that the server sees the caller hang up
		if strings.Contains(string(b), "busy") {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		<-r.Context().Done() // takes the work, never answers in time
	}))
	t.Cleanup(bureau.Close)
	h := setup(t, `
streams: {ack_wait: 2s}
targets:
  bureau: {url: "`+bureau.URL+`/proposals", timeout: 1s, callback_secret: "`+cbSecret+`"}
kinds:
  credit.evaluate: {target: bureau, completion: callback, entity: app_id, backoff: {initial: 1m, jitter: 0}}
`)
	h.startDispatcher("d1")
	id := h.submitCredit("acme", "slow-1")
	h.WaitStatus(id, state.Retrying, servicetest.WaitFor)
	body := `{"event_id":"` + id + `","status":"approved"}`
	if got := h.webhook("/v1/callbacks/bureau/acme", "msg_slow", body).outcome(t); got.Outcome != ingest.CallbackApplied || got.ID != id {
		t.Fatalf("callback of the timed-out attempt: want applied to %s, got %+v", id, got)
	}
	rec := h.WaitStatus(id, state.Done, servicetest.WaitFor)
	if rec.NextRunAt != nil || rec.Attempts != 1 {
		t.Fatalf("event %s: want done after its one attempt, nothing due; got %d attempts, next run %v", id, rec.Attempts, rec.NextRunAt)
	}
	natstest.Eventually(t, 10*time.Second, func() bool { return h.SchedMsgs() == 0 }, "the retry's schedule purged")

	busy := h.submitCredit("acme", "busy-1")
	h.WaitStatus(busy, state.Retrying, servicetest.WaitFor)
	body = `{"event_id":"` + busy + `","status":"approved"}`
	if got := h.webhook("/v1/callbacks/bureau/acme", "msg_busy", body).outcome(t); got.Outcome != ingest.CallbackLate {
		t.Fatalf("callback for an event whose attempt was answered 503: want %q, got %+v", ingest.CallbackLate, got)
	}
	if rec := h.Record(busy); rec.Status != state.Retrying {
		t.Fatalf("event %s after a callback its attempt cannot have caused: want retrying, got %s", busy, rec.Status)
	}
}

// replay does what an operator's replay does (services/deadletter): the
// event, sent to review, back to pending (with payload, when not nil)
// and on its way again.
func (h *harness) replay(account, id string, payload json.RawMessage) {
	h.t.Helper()
	for _, a := range []state.Action{{Name: state.Escalate, Actor: "test"}, {Name: state.Replay, Actor: "operator:alice", Payload: payload}} {
		if _, _, _, err := h.St.Transition(h.Ctx(), account, id, a); err != nil {
			h.t.Fatalf("%s: %v", a.Name, err)
		}
	}
	env, err := h.St.Envelope(h.Record(id))
	if err != nil {
		h.t.Fatal(err)
	}
	if _, err := queue.New(h.JS, h.Subj).Enqueue(h.Ctx(), env, id+"/replay"); err != nil {
		h.t.Fatal(err)
	}
}

// TestCallbackOfARunBeforeAReplayIsLate: the provider gives each call its
// own reference. After an operator replays the event, a callback naming
// only the reference of the run before the replay finds the event through
// the index (it keeps every reference until its TTL), yet completes
// nothing, nor does one naming the event id and that reference: the
// event waits on its new run's reference.
func TestCallbackOfARunBeforeAReplayIsLate(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	bureau := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprintf(w, `{"id":"job-%d"}`, calls.Add(1))
	}))
	t.Cleanup(bureau.Close)
	h := setup(t, callbackYAML(bureau.URL))
	h.startDispatcher("d1")
	id := h.submitCredit("acme", "replayed-1")
	h.awaiting("job-1", id)

	h.replay("acme", id, nil)
	h.awaiting("job-2", id)

	if got := h.webhook("/v1/callbacks/bureau/acme", "msg_old", `{"reference":"job-1","status":"approved"}`).outcome(t); got.Outcome != ingest.CallbackLate || got.ID != id {
		t.Fatalf("callback of the run before the replay: want %q for %s, got %+v", ingest.CallbackLate, id, got)
	}
	if got := h.webhook("/v1/callbacks/bureau/acme", "msg_old_id", `{"event_id":"`+id+`","reference":"job-1","status":"approved"}`).outcome(t); got.Outcome != ingest.CallbackLate || got.ID != id {
		t.Fatalf("callback of the run before the replay naming the event id: want %q for %s, got %+v", ingest.CallbackLate, id, got)
	}
	if rec := h.Record(id); rec.Status != state.AwaitingCallback {
		t.Fatalf("event %s after the earlier run's callback: want awaiting_callback, got %s", id, rec.Status)
	}
	if got := h.webhook("/v1/callbacks/bureau/acme", "msg_new", `{"reference":"job-2","status":"approved"}`).outcome(t); got.Outcome != ingest.CallbackApplied || got.ID != id {
		t.Fatalf("callback of the replayed run: want applied to %s, got %+v", id, got)
	}
}

// TestCallbackOfACallBeforeAReplayIsLate: a provider that gives no
// reference and names the event by its id, and echoes the replay count
// its call carried (Tenaz-Replay) in its webhook. After an operator
// replays the event with a corrected payload, the webhook answering the
// call made before the replay completes nothing; the one answering the
// replayed call does. A count that is not one is refused, 400.
func TestCallbackOfACallBeforeAReplayIsLate(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var replays []string
	bureau := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		replays = append(replays, r.Header.Get("Tenaz-Replay"))
		mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(bureau.Close)
	h := setup(t, strings.Replace(callbackYAML(bureau.URL), "callback: {", "callback: {replay_field: tenaz_replay, ", 1))
	h.startDispatcher("d1")
	id := h.submitCredit("acme", "edited-1")
	h.awaiting("", id)

	h.replay("acme", id, json.RawMessage(`{"app_id":"edited-1","income":5000}`))
	natstest.Eventually(t, servicetest.WaitFor, func() bool {
		rec := h.Record(id)
		return rec.Status == state.AwaitingCallback && rec.Attempts == 1 && rec.Replays == 1
	}, "the replayed call: want awaiting_callback at replay 1")
	mu.Lock()
	got := slices.Clone(replays)
	mu.Unlock()
	if !slices.Equal(got, []string{"0", "1"}) {
		t.Fatalf("Tenaz-Replay of the calls: want [0 1], got %q", got)
	}
	var view ingest.View
	if h.do(http.MethodGet, "/v1/events/"+id, "").json(t, &view); view.Replays != 1 {
		t.Fatalf("the event's status: want replays 1, got %+v", view)
	}

	if got := h.webhook("/v1/callbacks/bureau/acme", "msg_old", `{"event_id":"`+id+`","tenaz_replay":"0","status":"approved"}`).outcome(t); got.Outcome != ingest.CallbackLate || got.ID != id {
		t.Fatalf("callback of the call before the replay: want %q for %s, got %+v", ingest.CallbackLate, id, got)
	}
	for _, bad := range []string{`"one"`, `-1`, `1.5`, `true`, `{"n":1}`} {
		r := h.webhook("/v1/callbacks/bureau/acme", "msg_bad", `{"event_id":"`+id+`","tenaz_replay":`+bad+`,"status":"approved"}`)
		if r.Status != http.StatusBadRequest || !strings.Contains(string(r.Body), "tenaz_replay") {
			t.Fatalf("webhook echoing %s as its replay count: want 400 naming the field, got %d %s", bad, r.Status, r.Body)
		}
	}
	if rec := h.Record(id); rec.Status != state.AwaitingCallback {
		t.Fatalf("event %s after the earlier call's callback: want awaiting_callback, got %s", id, rec.Status)
	} else if !slices.ContainsFunc(rec.History, func(e state.Entry) bool {
		return e.Action == state.Note && strings.Contains(e.Detail, "msg_old") && strings.Contains(e.Detail, "call of replay 0") && strings.Contains(e.Detail, "at replay 1")
	}) {
		t.Fatalf("event %s: want the late callback noted with both replay counts, got %+v", id, rec.History)
	}
	if got := h.webhook("/v1/callbacks/bureau/acme", "msg_new", `{"event_id":"`+id+`","tenaz_replay":1,"status":"approved"}`).outcome(t); got.Outcome != ingest.CallbackApplied || got.ID != id {
		t.Fatalf("callback of the replayed call: want applied to %s, got %+v", id, got)
	}
	h.WaitStatus(id, state.Done, servicetest.WaitFor)
}

// TestWebhookWithNumericReferenceAndBooleanStatus: a provider whose job
// ids are numbers (beyond float64's exact range) and whose final flag is
// a boolean. Its webhook names the job by the number its answer gave; a
// false flag is progress, a true one completes the event.
func TestWebhookWithNumericReferenceAndBooleanStatus(t *testing.T) {
	t.Parallel()
	const job = "12345678901234567890"
	bureau := accepting(t, `{"id":`+job+`}`)
	h := setup(t, strings.Replace(callbackYAML(bureau.URL), "{field: status, in: [approved, rejected]}", `{field: approved, in: ["true"]}`, 1))
	h.startDispatcher("d1")
	id := h.submitCredit("acme", "n-1")
	h.awaiting(job, id)

	if got := h.webhook("/v1/callbacks/bureau/acme", "msg_progress", `{"reference":`+job+`,"approved":false}`).outcome(t); got.Outcome != ingest.CallbackProgress || got.ID != id {
		t.Fatalf("webhook with approved false: want %q for %s, got %+v", ingest.CallbackProgress, id, got)
	}
	if got := h.webhook("/v1/callbacks/bureau/acme", "msg_final", `{"reference":`+job+`,"approved":true}`).outcome(t); got.Outcome != ingest.CallbackApplied || got.ID != id {
		t.Fatalf("webhook with approved true: want applied to %s, got %+v", id, got)
	}
	h.WaitStatus(id, state.Done, servicetest.WaitFor)
}

// A final webhook whose body is over state.MaxResult completes the event
// without it, and its history says a result was given and not kept: a
// provider's outcome is never dropped without a trace.
func TestWebhookWithAResultTooLargeToKeepSaysSo(t *testing.T) {
	t.Parallel()
	h := setup(t, callbackYAML(tenants(t).URL))
	h.startDispatcher("d1")
	id := h.submitCredit("acme", "big-1")
	h.awaiting("ref_1", id)
	body := `{"event_id":"` + id + `","status":"approved","report":"` + strings.Repeat("x", state.MaxResult) + `"}`
	if got := h.webhook("/v1/callbacks/bureau/acme", "msg_big", body).outcome(t); got.Outcome != ingest.CallbackApplied || got.ID != id {
		t.Fatalf("final webhook of %d bytes: want applied to %s, got %+v", len(body), id, got)
	}
	rec := h.WaitStatus(id, state.Done, servicetest.WaitFor)
	last := rec.History[len(rec.History)-1]
	if rec.Result != nil || !strings.Contains(last.Detail, fmt.Sprintf("result of %d bytes not kept", len(body))) {
		t.Fatalf("want no result and a note of the %d bytes not kept, got result %d bytes, last entry %+v", len(body), len(rec.Result), last)
	}
	// Its copy is known by its webhook-id all the same: a duplicate.
	if got := h.webhook("/v1/callbacks/bureau/acme", "msg_big", body).outcome(t); got.Outcome != ingest.CallbackDuplicate {
		t.Fatalf("a copy of the final webhook: want %q, got %+v", ingest.CallbackDuplicate, got)
	}
}

// TestWebhookWithTheEventIDAndAReferenceItNeverHad: a webhook naming the
// event by its id and, in the reference field, a value the event was
// never given (a provider whose field is not the job id) is applied: the
// id decides, as it did before references were compared.
func TestWebhookWithTheEventIDAndAReferenceItNeverHad(t *testing.T) {
	t.Parallel()
	h := setup(t, callbackYAML(tenants(t).URL))
	h.startDispatcher("d1")
	id := h.submitCredit("acme", "j-1")
	h.awaiting("ref_1", id)
	if got := h.webhook("/v1/callbacks/bureau/acme", "msg_1", `{"event_id":"`+id+`","reference":"wh_77","status":"approved"}`).outcome(t); got.Outcome != ingest.CallbackApplied || got.ID != id {
		t.Fatalf("webhook with the event id and a reference the event never had: want applied to %s, got %+v", id, got)
	}
	h.WaitStatus(id, state.Done, servicetest.WaitFor)
}

// A signed webhook whose body gives a member twice, at any depth, is
// refused as malformed, naming the member, and changes nothing: tenaz
// would read the last "status" (rejected) where the provider, or a reader
// of the stored result, may read the first (approved). The event still
// waits, and the provider's webhook sent again, each member once, applies.
func TestWebhookGivingAMemberTwiceIsRefused(t *testing.T) {
	t.Parallel()
	const job = "job_dup"
	bureau := accepting(t, `{"id":"`+job+`"}`)
	h := setup(t, callbackYAML(bureau.URL))
	h.startDispatcher("d1")
	id := h.submitCredit("acme", "d-1")
	h.awaiting(job, id)

	for _, body := range []string{
		`{"reference":"` + job + `","status":"approved","status":"rejected"}`,
		`{"reference":"` + job + `","status":"approved","detail":{"score":700,"score":300}}`,
	} {
		r := h.webhook("/v1/callbacks/bureau/acme", "msg_dup", body)
		if r.Status != http.StatusBadRequest {
			t.Fatalf("webhook %s: want 400, got %d %s", body, r.Status, r.Body)
		}
		if code := r.errorCode(t); code != "malformed" || !strings.Contains(string(r.Body), "twice") {
			t.Fatalf("webhook %s: want malformed naming the member given twice, got %s %s", body, code, r.Body)
		}
		if st := h.Record(id).Status; st != state.AwaitingCallback {
			t.Fatalf("after a refused webhook: want the event still awaiting its callback, got %s", st)
		}
	}
	if got := h.webhook("/v1/callbacks/bureau/acme", "msg_dup", `{"reference":"`+job+`","status":"approved","detail":{"score":700}}`).outcome(t); got.Outcome != ingest.CallbackApplied || got.ID != id {
		t.Fatalf("the webhook sent again with each member once: want applied to %s, got %+v", id, got)
	}
	h.WaitStatus(id, state.Done, servicetest.WaitFor)
}

// accepting is a provider that answers every call 202 with answer.
func accepting(t *testing.T, answer string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		_, _ = io.WriteString(w, answer)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// An account whose provider tenancy signs its webhooks with a key of its
// own (accounts.<a>.targets.<t>.callback_secret) has its events completed
// only by webhooks verified with that key, sent to its URL. globex holds
// the target's shared key (its own tenancy signs with it): neither its
// URL, nor the URL that names no account, nor acme's URL with the shared
// key completes acme's event, whether by event id or by reference, and
// nothing is written to it; acme's webhook signed with its own key
// applies, and the same key does nothing on globex's URL. At the URL
// that names no account, the reference both hold is globex's alone.
func TestAnAccountsOwnCallbackSecretGuardsItsEvents(t *testing.T) {
	t.Parallel()
	const acmeSecret = "whsec_YWNtZS1vd24tY2FsbGJhY2stc2VjcmV0LWtleS0zMg=="
	h := setup(t, callbackYAML(tenants(t).URL)+`
accounts:
  acme: {targets: {bureau: {callback_secret: "`+acmeSecret+`"}}}
`)
	h.startDispatcher("d1")
	acme, globex := h.submitCredit("acme", "a-1"), h.submitCredit("globex", "g-1")
	h.awaiting("ref_1", acme, globex)
	withKey := func(key, id, body string) []string {
		var hs []string
		for k, v := range webhook.Headers(key, id, time.Now(), []byte(body)) {
			hs = append(hs, k, v[0])
		}
		return hs
	}
	before, _ := h.Lookup(acme)
	byID := `{"event_id":"` + acme + `","status":"approved","by":"forger"}`
	byRef := `{"reference":"ref_1","status":"approved","by":"forger"}`
	for _, path := range []string{"/v1/callbacks/bureau", "/v1/callbacks/bureau/globex"} {
		if got := h.webhook(path, "msg_forged_id", byID).outcome(t); got.Outcome != ingest.CallbackUnknown || got.ID != "" {
			t.Errorf("acme's event named by id at %s, with the shared key: want %q without an id, got %+v", path, ingest.CallbackUnknown, got)
		}
	}
	for _, body := range []string{byID, byRef} {
		if got := h.do(http.MethodPost, "/v1/callbacks/bureau/acme", body, signed("msg_shared_key", time.Now(), body)...); got.Status != http.StatusUnauthorized {
			t.Errorf("acme's URL with the shared key: want 401, got %d %s", got.Status, got.Body)
		}
	}
	if after, _ := h.Lookup(acme); after.Status != state.AwaitingCallback || len(after.History) != len(before.History) {
		t.Fatalf("acme's event after webhooks not signed with its key: want it untouched (awaiting_callback, %d history entries), got %s with %d",
			len(before.History), after.Status, len(after.History))
	}
	own := `{"reference":"ref_1","status":"approved","by":"acme"}`
	if got := h.do(http.MethodPost, "/v1/callbacks/bureau/globex", own, withKey(acmeSecret, "msg_acme_key", own)...); got.Status != http.StatusUnauthorized {
		t.Errorf("globex's URL with acme's key: want 401, got %d %s", got.Status, got.Body)
	}
	if got := h.do(http.MethodPost, "/v1/callbacks/bureau/acme", own, withKey(acmeSecret, "msg_acme", own)...).outcome(t); got.Outcome != ingest.CallbackApplied || got.ID != acme {
		t.Fatalf("acme's webhook signed with its own key: want applied to %s, got %+v", acme, got)
	}
	// At the URL that names no account, acme's reference does not count:
	// a webhook verified with the shared key cannot complete acme's event,
	// so ref_1 is globex's alone there, not ambiguous.
	if got := h.webhook("/v1/callbacks/bureau", "msg_g", `{"reference":"ref_1","status":"approved","by":"globex"}`).outcome(t); got.Outcome != ingest.CallbackApplied || got.ID != globex {
		t.Fatalf("globex's webhook by reference at the URL that names no account: want applied to %s, got %+v", globex, got)
	}
	for id, by := range map[string]string{acme: "acme", globex: "globex"} {
		rec := h.WaitStatus(id, state.Done, servicetest.WaitFor)
		var res struct{ By string }
		if err := json.Unmarshal(rec.Result, &res); err != nil || res.By != by {
			t.Errorf("event %s: want the result of %s's webhook, got %s", id, by, rec.Result)
		}
	}
}
