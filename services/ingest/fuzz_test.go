package ingest_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/webhook"
	"github.com/tenaz/tenaz/services/ingest"
)

const fuzzSecret = "whsec_dGVuYXotZnV6ei1jYWxsYmFjay1zZWNyZXQ="

// FuzzCallback sends any body to POST /v1/callbacks/bureau_a, signed with
// the target's secret or not at all. An unsigned one is refused with 401
// (429 past the target's refusal budget); a signed one is answered 200
// with a known outcome, or 400 when it is not a JSON object, reads two
// ways (a member given twice, a lone surrogate escape) or echoes a
// replay count (callback.replay_field) that is not one; nothing else
// (no 5xx, no panic), whatever the body names. The target's call timeout
// is 1ms: a webhook naming a reference nobody recorded is held that long
// (awaitRef), not the default 10 s the fuzzer would take for a hang.
func FuzzCallback(f *testing.F) {
	for _, s := range []string{
		`{"event_id":"ev_00000000000000000000000000","reference":"ref_1","status":"approved"}`,
		`{"reference":"ref_404","status":"rejected"}`,
		`{"event_id":"ev_","status":"processing"}`,
		`{"event_id":{"nested":true},"reference":7}`,
		`[]`, `null`, `"approved"`, `{}`, ``, `{"event_id":"ev_00000000000000000000000000"`,
		`{"event_id":"ev_00000000000000000000000000","tenaz_replay":"2","status":"approved"}`,
		`{"event_id":"ev_00000000000000000000000000","tenaz_replay":-1}`,
		`{"reference":"ref_1","tenaz_replay":1e400}`, `{"tenaz_replay":null}`, `{"tenaz_replay":[0]}`,
		`{"reference":"ref_1","status":"approved","status":"rejected"}`, `{"reference":"ref_1","status":"a\ud800"}`,
	} {
		f.Add([]byte(s), true)
	}
	f.Add([]byte(`{"event_id":"ev_00000000000000000000000000","status":"approved"}`), false)
	mux := fuzzIngest(f, `
targets:
  bureau_a: {url: "http://127.0.0.1:1/proposals", timeout: 1ms, callback_secret: "`+fuzzSecret+`",
             callback: {replay_field: tenaz_replay, done_when: {field: status, in: [approved, rejected]}}}
kinds:
  credit.evaluate: {target: bureau_a, completion: callback}
`, 0)
	f.Fuzz(func(t *testing.T, body []byte, signed bool) {
		r := httptest.NewRequest(http.MethodPost, "/v1/callbacks/bureau_a", bytes.NewReader(body))
		if signed {
			for k, v := range webhook.Headers(fuzzSecret, "msg_fuzz_"+time.Now().Format("150405.000000000"), time.Now(), body) {
				r.Header[k] = v
			}
		}
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		switch {
		case !signed:
			if w.Code != http.StatusUnauthorized && w.Code != http.StatusTooManyRequests {
				t.Fatalf("unsigned callback %q: want 401 (or 429 past the refusal budget), got %d %s", body, w.Code, w.Body)
			}
		case w.Code == http.StatusOK:
			var ans ingest.CallbackReply
			if err := json.Unmarshal(w.Body.Bytes(), &ans); err != nil {
				t.Fatalf("callback %q: 200 with a body that is not a reply: %s", body, w.Body)
			}
			known := []string{ingest.CallbackApplied, ingest.CallbackDuplicate, ingest.CallbackLate, ingest.CallbackProgress, ingest.CallbackUnknown, ingest.CallbackAmbiguous}
			if !slices.Contains(known, ans.Outcome) {
				t.Fatalf("callback %q: unknown outcome %q", body, ans.Outcome)
			}
			if ans.Outcome == ingest.CallbackApplied {
				t.Fatalf("callback %q applied, but no event waits for one", body)
			}
			var obj map[string]json.RawMessage // null unmarshals into a nil map: no object
			if json.Unmarshal(body, &obj) != nil || obj == nil {
				t.Fatalf("callback %q is not a JSON object but was answered 200: %s", body, w.Body)
			}
			if err := event.CheckUnambiguous("callback", body); err != nil {
				t.Fatalf("callback %q reads two ways (%v) but was answered 200: %s", body, err, w.Body)
			}
		case w.Code == http.StatusBadRequest:
			if doc, err := event.DecodeObject(body); err == nil && event.CheckUnambiguous("callback", body) == nil && isReplayCount(doc["tenaz_replay"]) {
				t.Fatalf("callback %q is a JSON object that reads one way, with no bad replay count, but was answered 400: %s", body, w.Body)
			}
		default:
			t.Fatalf("signed callback %q: want 200 or 400, got %d %s", body, w.Code, w.Body)
		}
	})
}

// isReplayCount reports whether v, a webhook's replay_field, may be
// applied: absent or null, or a whole number of replays (a string or a
// JSON number).
func isReplayCount(v any) bool {
	if v == nil {
		return true
	}
	var s string
	switch x := v.(type) {
	case string:
		s = x
	case json.Number:
		s = x.String()
	default:
		return false
	}
	n, err := strconv.Atoi(s)
	return err == nil && n >= 0
}

// fuzzIngest starts a real nats-server and an ingest with the config yaml
// (replyTimeout: Options.ReplyTimeout, 0 for the default) for a fuzz
// target, and returns its routes.
func fuzzIngest(f *testing.F, yaml string, replyTimeout time.Duration) *http.ServeMux {
	f.Helper()
	srv := natstest.Start(f)
	nc, _ := srv.Conn(f)
	svc, err := ingest.New(ingest.Options{Conn: nc, Config: servicetest.Config(f, yaml, nil), ReplyTimeout: replyTimeout})
	if err != nil {
		f.Fatal(err)
	}
	servicetest.Run(f, servicetest.Context(f, 30*time.Second), svc)
	mux := http.NewServeMux()
	svc.Routes(mux)
	return mux
}
