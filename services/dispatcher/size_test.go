package dispatcher_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tenaz/tenaz/pkg/dead"
	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/queue"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
)

// bigTarget is an HTTP target that answers every call 200 with body and
// counts the calls per path.
type bigTarget struct {
	*httptest.Server
	mu    sync.Mutex
	calls map[string]int
}

func newBigTarget(t *testing.T, body string) *bigTarget {
	t.Helper()
	b := &bigTarget{calls: map[string]int{}}
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.mu.Lock()
		b.calls[r.URL.Path]++
		b.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(b.Close)
	return b
}

func (b *bigTarget) callsTo(path string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.calls[path]
}

// sizeYAML is a config whose kinds answer.sync and answer.poll call the
// target at url (a sync and a poll stage).
func sizeYAML(url string) string {
	return fmt.Sprintf(`
streams: {ack_wait: 1s}
accounts:
  "*": {concurrency: 4, breaker: {failures: 100}}
targets:
  erp: {url: "${TARGET}/api/{{.Kind}}", timeout: 5s}
  big: {url: "%[1]s/{{.Kind}}", timeout: 5s, poll: {url: "%[1]s/status/{{.Reference}}", interval: 1m, done_when: {field: status, in: [done]}}}
kinds:
  order.create: {target: erp, entity: order_id, attempts: 3}
  answer.sync: {target: big, attempts: 3}
  answer.poll: {target: big, completion: poll, attempts: 3}
`, url)
}

// submitKind publishes one submission of kind for account acme to INTAKE
// and returns its event id.
func (h *harness) submitKind(kind, key, payload string) string {
	h.t.Helper()
	m := nats.NewMsg("tenaz.intake.acme." + kind)
	m.Data = []byte(payload)
	m.Header.Set(names.HeaderIdempotencyKey, key)
	if _, err := h.JS.PublishMsg(h.Ctx(), m); err != nil {
		h.t.Fatalf("publish %s: %v", key, err)
	}
	return event.ID("acme", key)
}

// waitFinal waits until the event's record is terminal or parked and
// returns it.
func (h *harness) waitFinal(id string) state.Record {
	h.t.Helper()
	var rec state.Record
	natstest.Eventually(h.t, servicetest.WaitFor, func() bool {
		r, _, err := h.St.Get(h.Ctx(), "", id)
		rec = r
		return err == nil && (r.Status.Terminal() || r.Status.Parked())
	}, "event %s: want it done, dead or in review", id)
	return rec
}

// settled waits until the account's messages are gone from EVENTS: its
// owner trims only below its lowest unsettled message, so the event's
// message was settled and nothing brings it back to call the target
// again.
func (h *harness) settled(rec state.Record) {
	h.t.Helper()
	natstest.Eventually(h.t, servicetest.WaitFor, func() bool {
		return h.SubjectMsgs(h.Subj.EventsStream(rec.Account), h.Subj.EventsOf(rec.Account)) == 0
	}, "event %s: want its message settled and trimmed", rec.ID)
}

// lastDead decodes the last DEAD entry of the event's account and kind,
// with the size of its message.
func (h *harness) lastDead(rec state.Record) (dead.Entry, int) {
	h.t.Helper()
	s, err := h.JS.Stream(h.Ctx(), names.StreamDead)
	if err != nil {
		h.t.Fatal(err)
	}
	subj, _ := names.NewSubjects("").Dead(rec.Account, rec.Kind)
	m, err := s.GetLastMsgForSubject(h.Ctx(), subj)
	if err != nil {
		h.t.Fatalf("want a DEAD entry for %s, got %v", rec.ID, err)
	}
	var e dead.Entry
	if err := json.Unmarshal(m.Data, &e); err != nil {
		h.t.Fatal(err)
	}
	return e, len(m.Data)
}

// A target that answers 200 with an answer too large for the record (a
// ~1 MiB job id under the default reference_field "id", which is also a
// ~1 MiB result) is called exactly once, and the event ends visibly: a
// sync stage done, its history saying what was not kept (the call
// succeeded; a retry or a replay would repeat it); a poll stage dead with
// reason too_large, since it could not be polled without its reference.
// Before, the record write failed, the message came back and the target
// was called again.
func TestHugeAnswerEndsVisiblyAfterOneCall(t *testing.T) {
	t.Parallel()
	ref := strings.Repeat("r", 1_040_000) // under target.MaxResponse, over the state bucket's 1 MiB
	big := newBigTarget(t, `{"id":"`+ref+`"}`)
	h := setup(t, sizeYAML(big.URL), provider.Faults{})
	h.dispatcher("d1", nil)

	rec := h.waitFinal(h.submitKind("answer.sync", "k-sync", `{"n":1}`))
	if rec.Status != state.Done || rec.Result != nil || rec.Reference != "" {
		t.Fatalf("sync: want done without the result and the reference, got %s, result %d bytes, reference %d bytes", rec.Status, len(rec.Result), len(rec.Reference))
	}
	last := rec.History[len(rec.History)-1]
	for _, want := range []string{"target answered 200", "result of", "reference of 1040000 bytes not kept"} {
		if !strings.Contains(last.Detail, want) {
			t.Errorf("sync: want the last entry to say %q, got %q", want, last.Detail)
		}
	}
	h.settled(rec)
	if n := big.callsTo("/answer.sync"); n != 1 {
		t.Errorf("sync: want exactly one call, got %d", n)
	}

	rec = h.waitFinal(h.submitKind("answer.poll", "k-poll", `{"n":2}`))
	if rec.Status != state.Dead || rec.LastError == nil || !strings.Contains(rec.LastError.Message, "reference is 1040000 bytes") {
		t.Fatalf("poll: want dead with the reference's size as the error, got %s, %+v", rec.Status, rec.LastError)
	}
	if e, _ := h.lastDead(rec); e.Reason != dead.ReasonTooLarge || e.ID != rec.ID {
		t.Errorf("poll: want a DEAD entry with reason %s, got %q for %s", dead.ReasonTooLarge, e.Reason, e.ID)
	}
	h.settled(rec)
	if n := big.callsTo("/answer.poll"); n != 1 {
		t.Errorf("poll: want exactly one call, got %d", n)
	}
	if n := big.callsTo("/status/" + ref); n != 0 {
		t.Errorf("poll: want no poll, got %d", n)
	}
}

// A poll stage whose 2xx answer holds no reference (a provider that
// answers {"status":"queued"}, or a reference_field that names another
// field) ends at once, dead with reason permanent naming the field, when
// the poll URL is built from the reference: polling it would ask for no
// job until the poll SLA. A poll URL built from the event id polls as
// usual.
func TestPollAnswerWithoutAReference(t *testing.T) {
	t.Parallel()
	big := newBigTarget(t, `{"status":"queued"}`)
	h := setup(t, fmt.Sprintf(`
accounts:
  "*": {concurrency: 4, breaker: {failures: 100}}
targets:
  big: {url: "%[1]s/{{.Kind}}", timeout: 5s, poll: {url: "%[1]s/status/{{.Reference}}", interval: 1m, done_when: {field: status, in: [done]}}}
  byid: {url: "%[1]s/{{.Kind}}", timeout: 5s, poll: {url: "%[1]s/status{{with $.Reference}}/{{.}}{{end}}/by-id/{{.ID}}", interval: 1m, done_when: {field: status, in: [done]}}}
kinds:
  answer.poll: {target: big, completion: poll, attempts: 3}
  answer.pollbyid: {target: byid, completion: poll, attempts: 3}
`, big.URL), provider.Faults{})
	h.dispatcher("d1", nil)

	rec := h.waitFinal(h.submitKind("answer.poll", "k-poll", `{"n":1}`))
	if rec.Status != state.Dead || rec.LastError == nil || !strings.Contains(rec.LastError.Message, `without a reference in its field "id" (targets.big.reference_field)`) {
		t.Fatalf("want dead naming the reference field, got %s, %+v", rec.Status, rec.LastError)
	}
	if e, _ := h.lastDead(rec); e.Reason != dead.ReasonPermanent || e.ID != rec.ID {
		t.Errorf("want a DEAD entry with reason %s, got %q for %s", dead.ReasonPermanent, e.Reason, e.ID)
	}
	h.settled(rec)
	if n := big.callsTo("/answer.poll"); n != 1 {
		t.Errorf("want exactly one call, got %d", n)
	}

	id := h.submitKind("answer.pollbyid", "k-byid", `{"n":2}`)
	natstest.Eventually(t, servicetest.WaitFor, func() bool {
		r, _, err := h.St.Get(h.Ctx(), "", id)
		rec = r
		return err == nil && r.Status != state.Pending && r.Status != state.Running
	}, "the event polled by id to leave running")
	if rec.Status != state.Polling {
		t.Fatalf("a poll url built from the event id: want polling, got %s %+v", rec.Status, rec.LastError)
	}
}

// A record already near the state bucket's 1 MiB (written under a config
// or a server that allowed it) that a write pushes over: the event goes
// dead with reason too_large, its payload kept in the DEAD entry, and its
// message is acked. Over at the claim it is never called; over at the
// outcome, after one call. Before, the write was retried forever.
func TestRecordTooLargeToWriteEndsDead(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		calls int
	}{{"at the claim", 0}, {"at the outcome", 1}} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ok := newBigTarget(t, "")
			h := setup(t, sizeYAML(ok.URL), provider.Faults{})
			env := nearLimit(t, tt.calls == 1)
			if _, err := h.St.Create(h.Ctx(), queue.Initial(env)); err != nil {
				t.Fatalf("want the record stored (it is under the limit), got %v", err)
			}
			if _, err := queue.New(h.JS, h.Subj).Enqueue(h.Ctx(), env, env.ID); err != nil {
				t.Fatal(err)
			}
			h.dispatcher("d1", nil)
			rec := h.waitFinal(env.ID)
			if rec.Status != state.Dead || !strings.HasPrefix(rec.History[len(rec.History)-1].Detail, dead.ReasonTooLarge+":") {
				t.Fatalf("want dead with reason %s, got %s: %s", dead.ReasonTooLarge, rec.Status, servicetest.Actions(rec))
			}
			e, _ := h.lastDead(rec)
			if e.Reason != dead.ReasonTooLarge || e.Event == nil || string(e.Event.Payload) != string(env.Payload) {
				t.Fatalf("want the DEAD entry (reason %s) to keep the payload, got reason %q, event %v", dead.ReasonTooLarge, e.Reason, e.Event != nil)
			}
			h.settled(rec)
			if n := ok.callsTo("/answer.sync"); n != tt.calls {
				t.Errorf("want %d calls, got %d", tt.calls, n)
			}
		})
	}
}

// nearLimit is an answer.sync event whose record, with the state
// bucket's write headers, is just under its 1 MiB max_value_size and goes
// over with the dispatcher's claim entry, or (afterClaim) only with the
// entry of the call's outcome.
func nearLimit(t *testing.T, afterClaim bool) event.Envelope {
	t.Helper()
	const limit, headers = 1 << 20, 64 // max_value_size; Nats-Expected-Last-Subject-Sequence
	mk := func(pad int) event.Envelope {
		env, err := event.New(event.Fields{Account: "acme", Kind: "answer.sync", IdempotencyKey: "k-near"},
			[]byte(`{"pad":"`+strings.Repeat("x", pad)+`"}`), "", "", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return env
	}
	size := func(r state.Record) int { return len(r.AppendJSON(nil)) }
	env := mk(0)
	r0 := queue.Initial(env)
	now := time.Now()
	claimed, _, _ := state.Apply(r0, state.Action{Name: state.Claim, Seq: 1 << 20, Actor: "dispatcher/d1"}, now)
	done, _, _ := state.Apply(claimed, state.Action{Name: state.Succeed, Actor: "dispatcher/d1", Detail: "target answered 200"}, now)
	claim, outcome := size(claimed)-size(r0), size(done)-size(claimed)
	// Half an entry under the limit before the write that must not fit.
	want := limit - headers - claim/2
	if afterClaim {
		want = limit - headers - outcome/2 - claim
	}
	return mk(want - size(r0))
}

// A dead letter keeps the payload once: the DEAD message of a 200 KiB
// payload is barely larger than the payload.
func TestDeadEntryHoldsThePayloadOnce(t *testing.T) {
	t.Parallel()
	h := setup(t, yamlFor(4, "attempts: 3"), provider.Faults{Status: 422})
	h.dispatcher("d1", nil)
	const marker = "marker-d41d8c"
	payload := `{"order_id":"o-dead","note":"` + marker + strings.Repeat("z", 200<<10) + `"}`
	ids := h.Submit("acme", "order.create", []string{"o-dead"}, func(string) string { return payload })
	rec := h.waitFinal(ids[0])
	if rec.Status != state.Dead {
		t.Fatalf("want dead (the target answers 422), got %s", rec.Status)
	}
	e, n := h.lastDead(rec)
	if e.Event == nil || string(e.Event.Payload) != payload || e.Record == nil || e.Record.ID != rec.ID {
		t.Fatalf("want the entry with the event's payload and the record, got event %v, record %v", e.Event != nil, e.Record != nil)
	}
	if e.Record.Payload != nil {
		t.Errorf("want the record in DEAD without a second copy of the payload, got %d bytes", len(e.Record.Payload))
	}
	if extra := n - len(payload); extra > 8<<10 {
		t.Errorf("want the DEAD message at most 8 KiB beyond its %d-byte payload, got %d bytes", len(payload), n)
	}
}

// A poll stage whose 2xx answer gives its reference field twice
// ({"id":"j-1","id":"j-2"}: which job to poll cannot be told) ends at
// once, dead with reason permanent, the reason naming the member given
// twice: a poll of either job could complete the event with another's
// result.
func TestPollAnswerWhoseReferenceReadsTwoWays(t *testing.T) {
	t.Parallel()
	big := newBigTarget(t, `{"id":"j-1","status":"queued","id":"j-2"}`)
	h := setup(t, fmt.Sprintf(`
accounts:
  "*": {concurrency: 4, breaker: {failures: 100}}
targets:
  big: {url: "%[1]s/{{.Kind}}", timeout: 5s, poll: {url: "%[1]s/status/{{.Reference}}", interval: 1m, done_when: {field: status, in: [done]}}}
kinds:
  answer.poll: {target: big, completion: poll, attempts: 3}
`, big.URL), provider.Faults{})
	h.dispatcher("d1", nil)

	rec := h.waitFinal(h.submitKind("answer.poll", "k-poll", `{"n":1}`))
	if rec.Status != state.Dead || rec.LastError == nil || !strings.Contains(rec.LastError.Message, `answer gives the member "id" twice`) {
		t.Fatalf("want dead naming the member given twice, got %s, %+v", rec.Status, rec.LastError)
	}
	if e, _ := h.lastDead(rec); e.Reason != dead.ReasonPermanent {
		t.Errorf("want a DEAD entry with reason %s, got %q", dead.ReasonPermanent, e.Reason)
	}
	if n := big.callsTo("/answer.poll"); n != 1 {
		t.Errorf("want exactly one call, got %d", n)
	}
}
