package tenaz_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tenaz/tenaz/pkg/dead"
	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/httpapi"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/services/ingest"
	"github.com/tenaz/tenaz/services/tenaz/internal/cli"
)

// nestedOrder is an order whose "nest" member makes it n levels deep.
func nestedOrder(id string, n int) string {
	return `{"order_id":"` + id + `","nest":` + strings.Repeat("[", n-1) + strings.Repeat("]", n-1) + `}`
}

// rejectingTarget answers every call 400 and keeps the bodies it got.
type rejectingTarget struct {
	mu     sync.Mutex
	bodies [][]byte
}

func (rt *rejectingTarget) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	rt.mu.Lock()
	rt.bodies = append(rt.bodies, b)
	rt.mu.Unlock()
	http.Error(w, `{"error":"rejected"}`, http.StatusBadRequest)
}

func (rt *rejectingTarget) got() [][]byte {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.bodies
}

// A payload nested event.MaxDepth levels goes through every stage: it is
// accepted, delivered as sent, rejected by the target, dead, and listed
// and shown by the deadletter service (its API and the CLI), with its
// payload; a review result at the limit is kept. One level deeper is
// refused on every way in with an error that names the limit: POST
// /v1/events (JSON, CloudEvents structured and binary), the submit
// endpoint, the CLI, an intake subject (kept in DEAD as a refused
// submission), an operator's edited replay payload and a review result.
// So is the 9,998 levels that encoding/json reads but that no DEAD entry
// of it could be read at.
func TestPayloadDepthLimitOnEveryWay(t *testing.T) {
	t.Parallel()
	rt := &rejectingTarget{}
	target := httptest.NewServer(rt)
	t.Cleanup(target.Close)
	tz := start(t, testConfig(t.TempDir(), target.URL, ""))
	base := "http://" + tz.HTTPAddr()
	op := newOperator(t, tz.NATSURL())
	nc, err := nats.Connect(tz.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	send := func(method, path, body string, headers ...string) servicetest.Response {
		t.Helper()
		return servicetest.Send(t, t.Context(), http.DefaultClient, method, base+path, "", body, headers...)
	}

	// At the limit, every stage.
	at := nestedOrder("o-deep", event.MaxDepth)
	r := send(http.MethodPost, "/v1/events", `{"account":"acme","kind":"order.create","payload":`+at+`}`, "Idempotency-Key", "at-limit")
	if r.Status != http.StatusAccepted {
		t.Fatalf("POST /v1/events, payload nested %d levels: want 202, got %d %s", event.MaxDepth, r.Status, r.Body)
	}
	id := event.ID("acme", "at-limit")
	var show ops.ShowReply
	natstest.Eventually(t, 30*time.Second, func() bool {
		r = send(http.MethodGet, "/v1/dead/"+id, "")
		return r.Status == http.StatusOK && json.Unmarshal(r.Body, &show) == nil
	}, "GET /v1/dead/%s: want the dead event shown, last answer %s %.300s", id, natstest.Lazy(func() any { return r.Status }),
		natstest.Lazy(func() any { return string(r.Body) }))
	if show.Item.ID != id || show.Item.Status != state.Dead || show.Item.Reason != dead.ReasonPermanent || show.Event == nil || string(show.Event.Payload) != at {
		t.Fatalf("GET /v1/dead/%s: want it dead (permanent) with its payload as sent, got item %+v, event %v", id, show.Item, show.Event != nil)
	}
	if got := rt.got(); len(got) != 1 || string(got[0]) != at {
		t.Fatalf("target: want one call with the payload as sent, got %d calls", len(got))
	}
	var list ops.ListReply
	if r = send(http.MethodGet, "/v1/dead?account=acme", ""); r.Status != http.StatusOK || json.Unmarshal(r.Body, &list) != nil || list.Total != 1 || list.Items[0].ID != id {
		t.Fatalf("GET /v1/dead: want %s listed alone, got %d %s", id, r.Status, r.Body)
	}
	var cliShow ops.ShowReply
	op.must(cli.ExitOK, "dead", "show", id, "--json").decode(t, &cliShow)
	if cliShow.Event == nil || string(cliShow.Event.Payload) != at {
		t.Fatalf("tenaz dead show %s --json: want its payload as sent, got %+v", id, cliShow.Item)
	}
	if out := op.must(cli.ExitOK, "dead", "ls").stdout; !strings.Contains(out, id) {
		t.Fatalf("tenaz dead ls: want %s listed, got\n%s", id, out)
	}

	// One level deeper (and the 9,998 levels of the report), on every way in.
	tooDeep := func(what string, n int) string {
		return fmt.Sprintf("%s nests %d levels deep; the limit is %d", what, n, event.MaxDepth)
	}
	refused := func(way string, r servicetest.Response, n int) {
		t.Helper()
		var body httpapi.ErrorBody
		if r.Status != http.StatusBadRequest || json.Unmarshal(r.Body, &body) != nil || body.Error.Code != "malformed" ||
			!strings.Contains(body.Error.Message, tooDeep("payload", n)) {
			t.Errorf("%s, payload nested %d levels: want 400 malformed saying %q, got %d %.300s", way, n, tooDeep("payload", n), r.Status, r.Body)
		}
	}
	for _, n := range []int{event.MaxDepth + 1, 9998} {
		deeper := nestedOrder("o-deeper", n)
		key := fmt.Sprint("deeper-", n)
		refused("POST /v1/events", send(http.MethodPost, "/v1/events", `{"account":"acme","kind":"order.create","payload":`+deeper+`}`, "Idempotency-Key", key), n)
		refused("POST /v1/events, a structured CloudEvent", send(http.MethodPost, "/v1/events",
			`{"specversion":"1.0","type":"order.create","source":"/erp","id":"`+key+`-s","tenazaccount":"acme","datacontenttype":"application/json","data":`+deeper+`}`,
			"Content-Type", "application/cloudevents+json"), n)
		refused("POST /v1/events, a binary CloudEvent", send(http.MethodPost, "/v1/events", deeper,
			"ce-specversion", "1.0", "ce-type", "order.create", "ce-source", "/erp", "ce-id", key+"-b", "ce-tenazaccount", "acme"), n)

		req, err := json.Marshal(map[string]any{"account": "acme", "kind": "order.create", "payload": json.RawMessage(deeper), "idempotency_key": key + "-m"})
		if err != nil {
			t.Fatal(err)
		}
		m, err := nc.Request("tenaz.api.ingest.submit", req, 10*time.Second)
		if err != nil {
			t.Fatalf("submit endpoint: %v", err)
		}
		refused("the submit endpoint", servicetest.Response{Status: statusOf(m), Body: m.Data}, n)

		if c := op.run("events", "submit", "--account", "acme", "--kind", "order.create", "--payload", deeper, "--key", key+"-c"); c.code == cli.ExitOK ||
			!strings.Contains(c.stderr, tooDeep("payload", n)) {
			t.Errorf("tenaz events submit, payload nested %d levels: want a failure saying %q, got\n%s", n, tooDeep("payload", n), c)
		}
		for _, k := range []string{key, key + "-s", key + "-b", key + "-m", key + "-c"} {
			if r := send(http.MethodGet, "/v1/events/"+event.ID("acme", k), ""); r.Status != http.StatusNotFound {
				t.Errorf("GET /v1/events of key %s: want 404 (no event), got %d %.200s", k, r.Status, r.Body)
			}
		}
	}

	// An intake subject: kept in DEAD as a refused submission, listed by
	// the deadletter service.
	deeper := nestedOrder("o-deeper", event.MaxDepth+1)
	m := nats.NewMsg("tenaz.intake.acme.order.create")
	m.Header.Set("Idempotency-Key", "deeper-intake")
	m.Data = []byte(deeper)
	if err := nc.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 30*time.Second, func() bool {
		r = send(http.MethodGet, "/v1/dead?reason="+dead.ReasonRejected, "")
		return r.Status == http.StatusOK && json.Unmarshal(r.Body, &list) == nil && list.Total == 1
	}, "GET /v1/dead?reason=%s: want the refused submission listed, last answer %.300s", dead.ReasonRejected, natstest.Lazy(func() any { return string(r.Body) }))
	refusedItem := list.Items[0]
	if refusedItem.Class != "malformed" || !strings.Contains(refusedItem.Error, tooDeep("payload", event.MaxDepth+1)) {
		t.Errorf("the intake submission in DEAD: want class malformed and an error saying %q, got %+v", tooDeep("payload", event.MaxDepth+1), refusedItem)
	}
	var rawShow ops.ShowReply
	if r = send(http.MethodGet, "/v1/dead/"+refusedItem.ID, ""); r.Status != http.StatusOK || json.Unmarshal(r.Body, &rawShow) != nil || string(rawShow.Raw) != deeper {
		t.Errorf("GET /v1/dead/%s: want the refused submission with its body as sent, got %d %.300s", refusedItem.ID, r.Status, r.Body)
	}
	if r = send(http.MethodGet, "/v1/events/"+event.ID("acme", "deeper-intake"), ""); r.Status != http.StatusNotFound {
		t.Errorf("the intake submission: want no event, got %d %.200s", r.Status, r.Body)
	}

	// The operator's ways in: an edited payload, a review result.
	refused("POST /v1/dead/{id}/replay with a payload", send(http.MethodPost, "/v1/dead/"+id+"/replay", `{"payload":`+deeper+`}`), event.MaxDepth+1)
	if c := op.run("dead", "replay", id, "--payload", deeper); c.code == cli.ExitOK || !strings.Contains(c.stderr, tooDeep("payload", event.MaxDepth+1)) {
		t.Errorf("tenaz dead replay --payload, nested %d levels: want a failure saying %q, got\n%s", event.MaxDepth+1, tooDeep("payload", event.MaxDepth+1), c)
	}
	deepResult := strings.Repeat("[", event.MaxDepth+1) + strings.Repeat("]", event.MaxDepth+1)
	r = send(http.MethodPost, "/v1/review/"+id+"/resolve", `{"outcome":"done","result":`+deepResult+`,"reason":"checked by hand"}`)
	var body httpapi.ErrorBody
	if r.Status != http.StatusBadRequest || json.Unmarshal(r.Body, &body) != nil || body.Error.Code != "malformed" ||
		!strings.Contains(body.Error.Message, tooDeep("result", event.MaxDepth+1)) {
		t.Errorf("POST /v1/review/{id}/resolve, result nested %d levels: want 400 malformed saying %q, got %d %.300s",
			event.MaxDepth+1, tooDeep("result", event.MaxDepth+1), r.Status, r.Body)
	}
	var v ingest.View
	if r = send(http.MethodGet, "/v1/events/"+id, ""); json.Unmarshal(r.Body, &v) != nil || v.Status != state.Dead || v.Replays != 0 {
		t.Fatalf("after the refused replay and resolve: want %s still dead, never replayed, got %d %.300s", id, r.Status, r.Body)
	}

	// A result at the limit is kept.
	atResult := strings.Repeat("[", event.MaxDepth) + strings.Repeat("]", event.MaxDepth)
	if r = send(http.MethodPost, "/v1/review/"+id+"/resolve", `{"outcome":"done","result":`+atResult+`,"reason":"checked by hand"}`); r.Status != http.StatusOK {
		t.Fatalf("POST /v1/review/{id}/resolve, result nested %d levels: want 200, got %d %s", event.MaxDepth, r.Status, r.Body)
	}
	if r = send(http.MethodGet, "/v1/events/"+id, ""); json.Unmarshal(r.Body, &v) != nil || v.Status != state.Done || !bytes.Equal(v.Result, []byte(atResult)) {
		t.Fatalf("after the resolve: want %s done with its result, got %d %.300s", id, r.Status, r.Body)
	}
}

// statusOf is a micro answer's HTTP status (its Tenaz-Status header).
func statusOf(m *nats.Msg) int {
	var s int
	_, _ = fmt.Sscan(m.Header.Get("Tenaz-Status"), &s)
	return s
}
