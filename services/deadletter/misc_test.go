package deadletter_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tenaz/tenaz/pkg/breaker"
	"github.com/tenaz/tenaz/pkg/dead"
	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/httpapi"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/pkg/queue"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/services/deadletter"
)

// An open breaker is listed with its state; an operator closes it for
// everyone, the close is advised, and the list shows it closed.
func TestBreakerListAndManualClose(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	b := e.openBreaker("acme", "erp")
	if it := e.breakerState("acme", "erp"); it.Target != "erp" || it.OpenUntil == nil || it.Failures != 1 {
		t.Fatalf("want acme/erp open until a time with 1 failure, got %+v", it)
	}
	adv := make(chan map[string]any, 4)
	sub, _ := e.NC.Subscribe("tenaz.advisory.breaker.acme.erp", func(m *nats.Msg) {
		var a map[string]any
		_ = json.Unmarshal(m.Data, &a)
		adv <- a
	})
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	var closed ops.BreakerItem
	if err := e.callWith(operatorKeys["ivan"], ops.BreakersClose, ops.CloseBreakerRequest{Account: "acme", Target: "erp"}, &closed); err != nil {
		t.Fatal(err)
	}
	if closed.State != string(breaker.Closed) || !strings.Contains(closed.Reason, "operator:ivan") {
		t.Fatalf("want closed by operator:ivan, got %+v", closed)
	}
	select {
	case a := <-adv:
		if a["state"] != "closed" {
			t.Fatalf("want a closed advisory, got %v", a)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no breaker advisory")
	}
	natstest.Eventually(t, 10*time.Second, func() bool { st, _ := b.State(); return st == breaker.Closed }, "the dispatcher's breaker to close too")
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// Forms are refused without the token that matches the cookie, and from
// another site even with it; with both, the action asks for confirmation
// first and acts only on the confirmed post, recorded as the operator the
// credential proves (judy's key), not the name a form field gives.
func TestScreenFormsRequireTokenAndConfirmation(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	ids := e.seed(1, "acme", "order.create", dead.ReasonPermanent, "permanent", func(int) string { return `{"n":1}` })
	e.waitListed(state.Dead, url.Values{}, 1)
	judy := newScreenSession(t, e, "judy")
	code, page := judy.get("/ui/dead")
	m := csrfField.FindStringSubmatch(page)
	if code != 200 || m == nil || !strings.Contains(page, ids[0]) {
		t.Fatalf("the list page must show the event and carry a token, got %d", code)
	}
	token := m[1]
	form := func(extra url.Values) url.Values {
		v := url.Values{"action": {"discard"}, "id": {ids[0]}, "actor": {"mallory"}, "reason": {"spam"}, "back": {"/ui/dead"}}
		for k, x := range extra {
			v[k] = x
		}
		return v
	}
	post := judy.post
	if code, _ := post(form(nil), "same-origin"); code != http.StatusForbidden {
		t.Fatalf("no token: want 403, got %d", code)
	}
	if code, _ := post(form(url.Values{"csrf": {"forged"}}), "same-origin"); code != http.StatusForbidden {
		t.Fatalf("wrong token: want 403, got %d", code)
	}
	if code, _ := post(form(url.Values{"csrf": {token}, "confirm": {"yes"}}), "cross-site"); code != http.StatusForbidden {
		t.Fatalf("cross-site post: want 403, got %d", code)
	}
	if code, body := post(form(url.Values{"csrf": {token}, "confirm": {"yes"}, "reason": {strings.Repeat("x", ops.MaxReason+1)}}), "same-origin"); code != http.StatusBadRequest || !strings.Contains(body, "at most 1024") {
		t.Fatalf("a reason too long: want 400 saying the limit, got %d", code)
	}
	// Resolving by discarding needs a reason as discarding does: refused
	// before the confirmation, and on a confirmed post too.
	for _, confirm := range []string{"", "yes"} {
		resolve := url.Values{"csrf": {token}, "action": {"resolve"}, "id": {ids[0]}, "outcome": {"discard"}, "reason": {" "}, "confirm": {confirm}, "back": {"/ui/dead"}}
		if code, body := post(resolve, "same-origin"); code != http.StatusBadRequest || !strings.Contains(body, "say why") {
			t.Fatalf("resolve by discarding without a reason (confirm %q): want 400 asking why, got %d", confirm, code)
		}
	}
	// A discard without a reason, and a replay of refused submissions
	// only (no event to replay), are refused before the confirmation.
	if code, body := post(form(url.Values{"csrf": {token}, "reason": {" "}}), "same-origin"); code != http.StatusBadRequest || !strings.Contains(body, "say why") {
		t.Fatalf("discard without a reason: want 400 asking why before the confirmation, got %d", code)
	}
	if code, body := post(url.Values{"csrf": {token}, "action": {"replay"}, "seq": {"7"}, "back": {"/ui/dead"}}, "same-origin"); code != http.StatusBadRequest || !strings.Contains(body, "a refused submission has none") {
		t.Fatalf("replay of a refused submission only: want 400 saying it has no event, got %d", code)
	}
	code, body := post(form(url.Values{"csrf": {token}}), "same-origin")
	if code != http.StatusOK || !strings.Contains(body, "Discard 1 entr") || !strings.Contains(body, `name="confirm" value="yes"`) {
		t.Fatalf("first post: want the confirmation page, got %d", code)
	}
	if r := e.Record(ids[0]); r.Status != state.Dead {
		t.Fatalf("nothing may happen before the confirmation, got %s", r.Status)
	}
	// A back path that is not a URL (a hand-edited form) returns to the
	// list.
	if code, _ := post(form(url.Values{"csrf": {token}, "confirm": {"yes"}, "back": {"/ui/%zz"}}), "same-origin"); code != http.StatusSeeOther || !strings.HasPrefix(judy.location, "/ui/dead?flash=") {
		t.Fatalf("confirmed post: want 303 back to the list, got %d to %q", code, judy.location)
	}
	if r := e.Record(ids[0]); r.Status != state.Cancelled || lastEntry(r).Actor != "operator:judy" || lastEntry(r).Detail != "spam" {
		t.Fatalf("want cancelled by operator:judy for spam, got %s %+v", r.Status, lastEntry(r))
	}
	// The redirect's page says what was done. A link made elsewhere, with
	// a flash of its own or another's text under this one's MAC, says
	// nothing in the screen's voice.
	flash := func(path string) string {
		_, page := judy.get(path)
		if m := flashPara.FindStringSubmatch(page); m != nil {
			return m[1]
		}
		return ""
	}
	if got := flash(judy.location); !strings.Contains(got, "Discarded 1") {
		t.Fatalf("the page after the action: want its flash, got %q", got)
	}
	to, _ := url.Parse(judy.location)
	q := to.Query()
	q.Set("flash", "Breakers reset; run the fix from evil.example")
	to.RawQuery = q.Encode()
	for _, forged := range []string{to.String(), "/ui/dead?flash=All+dead+letters+replayed"} {
		if got := flash(forged); got != "" {
			t.Fatalf("GET %s: want no flash, got %q", forged, got)
		}
	}
}

var flashPara = regexp.MustCompile(`<p class="flash" id="flash">([^<]*)</p>`)

// screenSession is an operator's browser on the screen: its cookies (the
// anti-forgery token's), its credential, and redirects not followed.
type screenSession struct {
	t          *testing.T
	base, auth string
	c          *http.Client
	location   string // of the last answer
}

func newScreenSession(t *testing.T, e *env, operator string) *screenSession {
	jar, _ := cookiejar.New(nil)
	return &screenSession{t: t, base: e.http.URL, auth: "Bearer " + operatorKeys[operator],
		c: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// get answers GET path.
func (s *screenSession) get(path string) (int, string) {
	s.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, s.base+path, nil)
	return s.do(req)
}

// post posts form v to the screen's actions, from a page of site
// (Sec-Fetch-Site; "" sends none).
func (s *screenSession) post(v url.Values, site string) (int, string) {
	s.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, s.base+"/ui/actions", strings.NewReader(v.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if site != "" {
		req.Header.Set("Sec-Fetch-Site", site)
	}
	return s.do(req)
}

func (s *screenSession) do(req *http.Request) (int, string) {
	s.t.Helper()
	req.Header.Set("Authorization", s.auth)
	resp, err := s.c.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	s.location = resp.Header.Get("Location")
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// A message of an active event that a client terminated by hand (still in
// the stream, as in a cluster before the ack is applied) is moved to DEAD
// by the terminated advisory: the event is dead with reason terminated and
// the message is gone. One that is already gone changes nothing.
func TestTerminatedAdvisoryMovesMessageToDead(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	ev, err := event.New(event.Fields{Account: "acme", Kind: "order.create", IdempotencyKey: "t-1"}, []byte(`{"n":1}`), "", "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.St.Create(context.Background(), queue.Initial(ev)); err != nil {
		t.Fatal(err)
	}
	ack, err := queue.New(e.JS, e.Subj).Enqueue(context.Background(), ev, ev.ID)
	if err != nil {
		t.Fatal(err)
	}
	advise := func(seq uint64) {
		b := fmt.Appendf(nil, `{"type":"io.nats.jetstream.advisory.v1.terminated","stream":%q,"consumer":"dispatch-acme","stream_seq":%d,"deliveries":1,"reason":"by hand"}`, ack.Stream, seq)
		if err := e.NC.Publish("$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED."+ack.Stream+".dispatch-acme", b); err != nil {
			t.Fatal(err)
		}
	}
	advise(ack.Sequence + 1000) // gone: nothing happens
	advise(ack.Sequence)
	natstest.Eventually(t, 30*time.Second, func() bool { return e.Record(ev.ID).Status == state.Dead }, "the terminated event to be dead")
	r := e.Record(ev.ID)
	if r.LastError == nil || r.LastError.Class != deadletter.ReasonTerminated || !strings.Contains(r.LastError.Message, "by hand") {
		t.Fatalf("want class terminated naming the reason, got %+v", r.LastError)
	}
	e.waitListed(state.Dead, url.Values{"reason": {deadletter.ReasonTerminated}}, 1)
	s, _ := e.JS.Stream(context.Background(), "EVENTS")
	if _, err := s.GetMsg(context.Background(), ack.Sequence); err == nil {
		t.Fatal("the terminated message must be gone from EVENTS")
	}
}

// Paging the JSON API by cursor with a filter returns every matching event
// exactly once, newest first, and nothing else.
func TestAPIPagesByCursor(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	payload := func(i int) string { return fmt.Sprintf(`{"n":%d}`, i) }
	want := map[string]bool{}
	for _, id := range e.seed(700, "acme", "order.create", dead.ReasonExhausted, "transient", payload) {
		want[id] = true
	}
	e.seed(300, "acme", "invoice.send", dead.ReasonExhausted, "transient", payload)
	e.seed(300, "globex", "order.create", dead.ReasonPermanent, "permanent", payload)
	e.waitListed(state.Dead, url.Values{}, 1300)
	seen := map[string]bool{}
	var lastSeq uint64
	cursor, pages := "", 0
	for {
		var rep ops.ListReply
		path := "/v1/dead?account=acme&kind=order.create&limit=64"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		if code := e.get(path, &rep); code != http.StatusOK {
			t.Fatalf("GET %s: %d", path, code)
		}
		if rep.Total != 700 {
			t.Fatalf("total: want 700, got %d", rep.Total)
		}
		for _, it := range rep.Items {
			if !want[it.ID] || seen[it.ID] || (lastSeq != 0 && it.Seq >= lastSeq) {
				t.Fatalf("page %d: %s is foreign, repeated or out of order (seq %d after %d)", pages, it.ID, it.Seq, lastSeq)
			}
			seen[it.ID], lastSeq = true, it.Seq
		}
		pages++
		if cursor = rep.NextCursor; cursor == "" {
			break
		}
	}
	if len(seen) != 700 || pages != 11 {
		t.Fatalf("want 700 events in 11 pages, got %d in %d", len(seen), pages)
	}
}

// The retrying and scheduled tabs count from a scan of the state bucket.
func TestRetryingAndScheduledCounts(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	now := time.Now().UTC()
	for i := range 4 {
		ev, _ := event.New(event.Fields{Account: "acme", Kind: "order.create", IdempotencyKey: fmt.Sprint("r", i)}, []byte(`{"n":1}`), "", "", now)
		rec := queue.Initial(ev)
		rec.Status = state.Retrying
		next := now.Add(time.Duration(i+1) * time.Minute)
		rec.NextRunAt = &next
		if _, err := e.St.Create(context.Background(), rec); err != nil {
			t.Fatal(err)
		}
	}
	later := now.Add(24 * time.Hour)
	ev, _ := event.New(event.Fields{Account: "acme", Kind: "order.create", IdempotencyKey: "s0", NotBefore: later.Format(time.RFC3339)}, []byte(`{"n":1}`), "", "", now)
	if _, err := e.St.Create(context.Background(), queue.Initial(ev)); err != nil {
		t.Fatal(err)
	}
	body := func(path string) string {
		resp, err := http.Get(e.http.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	if b := body("/ui/retrying"); !strings.Contains(b, "<small>4 events</small>") || strings.Count(b, "<code>ev_") != 4 {
		t.Fatalf("retrying tab: want 4 events listed, got\n%s", b)
	}
	if b := body("/ui/scheduled"); !strings.Contains(b, "<small>1 event</small>") || !strings.Contains(b, ev.ID) {
		t.Fatalf("scheduled tab: want the delayed event, got\n%s", b)
	}
}

// An answer larger than the server's max_payload cannot be sent; the
// caller gets an error that says so, and how to ask for less, at once,
// not its own timeout.
func TestAnswerOverMaxPayloadIsAnError(t *testing.T) {
	t.Parallel()
	const maxPayload = 160 << 10 // what an event needs (size.Overhead and a 16 KiB body) and little more
	e := setupWith(t, "http: {max_body_bytes: 16384}", natstest.MaxPayload(maxPayload))
	account, kind := strings.Repeat("a", 64), strings.Repeat("k", 63)+"."+strings.Repeat("k", 64)
	e.seed(ops.MaxLimit, account, kind, dead.ReasonPermanent, "permanent", func(int) string { return `{}` })
	e.waitListed(state.Dead, url.Values{"account": {account}, "limit": {"1"}}, ops.MaxLimit)
	began := time.Now()
	var list ops.ListReply
	err := e.call(ops.DeadList, ops.ListRequest{Account: account, Limit: ops.MaxLimit}, &list)
	if err == nil {
		t.Fatalf("a page of %d items with long names: want it over max_payload (%d bytes) and refused, got %d items", ops.MaxLimit, maxPayload, len(list.Items))
	}
	if !strings.Contains(err.Error(), "answer could not be sent") || !strings.Contains(err.Error(), "ask for less") {
		t.Fatalf("want an error saying the answer could not be sent and to ask for less, got %v", err)
	}
	if d := time.Since(began); d > 10*time.Second {
		t.Fatalf("the error took %s: want it at once, not after a timeout", d)
	}
	if err := e.call(ops.DeadList, ops.ListRequest{Account: account, Limit: 10}, &list); err != nil || len(list.Items) != 10 {
		t.Fatalf("a page of 10: want 10 items, got %d, %v", len(list.Items), err)
	}
}

// The service's routes alone, as an embedding program mounts them, answer
// a /v1 path no route takes as every tenaz listener does: coded JSON.
func TestHandlerCodesAPIMisses(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	srv := httptest.NewServer(e.dl.Handler())
	t.Cleanup(srv.Close)
	r := servicetest.Send(t, e.Ctx(), srv.Client(), http.MethodGet, srv.URL+"/v1/nope", "", "")
	var body httpapi.ErrorBody
	if r.Status != http.StatusNotFound || json.Unmarshal(r.Body, &body) != nil || body.Error.Code != "not_found" {
		t.Fatalf("GET /v1/nope: want 404 not_found as JSON, got %d %s", r.Status, r.Body)
	}
}

// A replay from the event's page posts its payload's textarea, indented
// and form-encoded (a byte may take three), edited or not: a payload well
// within max_body_bytes (about 500 KB here) must not make the form too
// large to read.
func TestScreenReplaysALargePayload(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	var b strings.Builder
	b.WriteString("[")
	for i := range 5000 {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"line":%d,"sku":"SKU-%06d","qty":1,"note":"a line of the order, as an ERP sends it: \"quoted\" & escaped"}`, i, i)
	}
	b.WriteString("]")
	payload := b.String()
	ids := e.seed(1, "acme", "order.create", dead.ReasonPermanent, "permanent", func(int) string { return payload })
	e.waitListed(state.Dead, url.Values{}, 1)
	judy := newScreenSession(t, e, "judy")
	code, page := judy.get("/ui/dead")
	m := csrfField.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("want a token on the list page, got %d", code)
	}
	var indented bytes.Buffer
	if err := json.Indent(&indented, []byte(payload), "", "  "); err != nil {
		t.Fatal(err)
	}
	v := url.Values{"csrf": {m[1]}, "action": {"replay"}, "id": {ids[0]}, "reason": {"fixed the ERP"}, "payload": {indented.String()}, "confirm": {"yes"}, "back": {"/ui/dead"}}
	if code, body := judy.post(v, "same-origin"); code != http.StatusSeeOther || e.Record(ids[0]).Status != state.Pending {
		t.Fatalf("a replay whose form is %d bytes: want it replayed, got %d %s", len(v.Encode()), code, body)
	}
}
