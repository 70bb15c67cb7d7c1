package ingest_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tenaz/tenaz/pkg/dead"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
)

// defaultBodyYAML is baseYAML with http.max_body_bytes at its default.
var defaultBodyYAML = strings.Replace(baseYAML, "http: {max_body_bytes: 4096}\n", "", 1)

// paddedPayload is a JSON object of exactly n bytes, padded with c.
func paddedPayload(t *testing.T, key string, n int64, c string) string {
	t.Helper()
	head := `{"order_id":"` + key + `","pad":"`
	pad := n - int64(len(head)) - 2
	if pad < 0 {
		t.Fatalf("no payload of %d bytes", n)
	}
	return head + strings.Repeat(c, int(pad)) + `"}`
}

// On a stock nats-server (1 MiB max_payload), a submission of exactly
// http.max_body_bytes (its default) is answered 202 and is then readable:
// its record fits NATS with room to grow. One byte more is 413. (At the
// old default of 1 MiB the submission did not fit the server at all; on
// a larger server its record was over the state bucket's 1 MiB: 202, then
// GET said 404.) The payload is of <, which JSON encoders escape as six
// bytes: the answer is still the event's (the intake outcome reaches the
// handler), not the bare "accepted" of a handler that waited in vain.
func TestSubmissionAtMaxBodyIsReadable(t *testing.T) {
	t.Parallel()
	h := setup(t, defaultBodyYAML, withServer(natstest.MaxPayload(1<<20)))
	max := h.cfg.HTTP.MaxBodyBytes
	sub := func(key string, n int64) string {
		return `{"account":"acme","kind":"order.create","payload":` + paddedPayload(t, key, n, "<") + `}`
	}
	r := h.do("POST", "/v1/events", sub("o-max", max), names.HeaderIdempotencyKey, "k-max")
	if r.Status != 202 {
		t.Fatalf("payload of exactly %d bytes: want 202, got %d %.200s", max, r.Status, r.Body)
	}
	var v struct{ ID, Status string }
	r.json(t, &v)
	if v.Status != string(state.Pending) {
		t.Errorf("want the 202 to show the event, pending, got status %q", v.Status)
	}
	if g := h.do("GET", "/v1/events/"+v.ID, ""); g.Status != 200 {
		t.Fatalf("after 202: want GET 200, got %d %.200s", g.Status, g.Body)
	}
	if rec, ok := h.Lookup(v.ID); !ok || int64(len(rec.Payload)) != max {
		t.Fatalf("want the record with its %d-byte payload, got ok=%v, %d bytes", max, ok, len(rec.Payload))
	}
	r = h.do("POST", "/v1/events", sub("o-over", max+1), names.HeaderIdempotencyKey, "k-over")
	if r.Status != 413 || r.errorCode(t) != "too_large" {
		t.Fatalf("payload of %d bytes: want 413 too_large, got %d %.200s", max+1, r.Status, r.Body)
	}
}

// A server whose max_payload is lower than the start-up check allowed
// for (lowered since, or never checked by an embedding program) takes the
// INTAKE message of a payload at http.max_body_bytes, but not its record:
// the submission is refused 413 before it is answered 202, never 202
// and then 404.
func TestSubmissionTheServerCannotCarryIsRefused(t *testing.T) {
	t.Parallel()
	const maxBody = 768 << 10 // the default
	h := setup(t, defaultBodyYAML, withServer(natstest.MaxPayload(maxBody+300)))
	if h.cfg.HTTP.MaxBodyBytes != maxBody {
		t.Fatalf("setup: want max_body_bytes %d, got %d", maxBody, h.cfg.HTTP.MaxBodyBytes)
	}
	body := `{"account":"acme","kind":"order.create","payload":` + paddedPayload(t, "o-1", maxBody, "x") + `}`
	r := h.do("POST", "/v1/events", body, names.HeaderIdempotencyKey, "k-1")
	if r.Status != 413 || r.errorCode(t) != "too_large" {
		t.Fatalf("want 413 too_large, got %d %.300s", r.Status, r.Body)
	}
	if !strings.Contains(string(r.Body), "max_payload") {
		t.Errorf("want the refusal to name the server's max_payload, got %s", r.Body)
	}
}

// A NATS submission as large as the server takes (a stock server, 1 MiB)
// is over http.max_body_bytes and rejected; all of it would not fit a
// DEAD message as base64, so DEAD keeps its first part and its size, and
// the INTAKE message is settled (it was retried forever).
func TestOversizedNATSSubmissionIsKeptInPart(t *testing.T) {
	t.Parallel()
	const maxPayload = 1 << 20
	h := setup(t, defaultBodyYAML, withServer(natstest.MaxPayload(maxPayload)))
	payload := paddedPayload(t, "o-big", maxPayload-1024, "x")
	ack := h.publishIntake("tenaz.intake.acme.order.create", []byte(payload), names.HeaderIdempotencyKey, "k-big")
	natstest.Eventually(t, servicetest.WaitFor, func() bool { return h.intakeSettled(ack.Sequence) }, "the oversized submission settled")
	ds, err := h.JS.Stream(h.Ctx(), names.StreamDead)
	if err != nil {
		t.Fatal(err)
	}
	m, err := ds.GetLastMsgForSubject(h.Ctx(), "tenaz.dead.acme.order.create")
	if err != nil {
		t.Fatalf("want the rejection in DEAD, got %v", err)
	}
	var e dead.Entry
	if err := json.Unmarshal(m.Data, &e); err != nil {
		t.Fatal(err)
	}
	if e.Class != "too_large" || e.RawBytes != len(payload) || len(e.Raw) == 0 || string(e.Raw) != payload[:len(e.Raw)] {
		t.Fatalf("want a too_large rejection with the first part of the %d-byte body, got class %q, raw %d bytes, raw_bytes %d", len(payload), e.Class, len(e.Raw), e.RawBytes)
	}
}
