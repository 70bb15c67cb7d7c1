package ingest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/httpapi/apitest"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/services/ingest"
)

// repeatsYAML declares two repeats of acme that fire every second.
const repeatsYAML = baseYAML + `
accounts:
  acme:
    repeats:
      tick:  {kind: order.create, every: 1s, payload: {order_id: r-tick}}
      other: {kind: order.create, every: 1s, payload: {order_id: r-other}}
`

// schedule reads the stored schedule message of a repeat; nil when there
// is none.
func (h *harness) schedule(account, name string) *jetstream.RawStreamMsg {
	h.t.Helper()
	st, err := h.JS.Stream(h.Ctx(), ingest.StreamRepeats)
	if err != nil {
		h.t.Fatalf("stream %s: %v", ingest.StreamRepeats, err)
	}
	m, err := st.GetLastMsgForSubject(h.Ctx(), "tenaz.repeat.sched."+account+"."+name)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil
	}
	if err != nil {
		h.t.Fatalf("schedule of %s: %v", name, err)
	}
	return m
}

// occurrences lists the whole seconds in [from, to] at which the repeat
// name of account made an event (found by the key each occurrence's
// event has).
func (h *harness) occurrences(account, name string, from, to time.Time) []time.Time {
	h.t.Helper()
	var out []time.Time
	for at := from.Truncate(time.Second); !at.After(to); at = at.Add(time.Second) {
		if _, ok := h.Lookup(event.ID(account, ingest.RepeatKey(name, at))); ok {
			out = append(out, at)
		}
	}
	return out
}

// An interval repeat fires events that reach EVENTS, one per occurrence:
// two replicas applying the same config store one schedule (the second
// writes nothing), and every firing delivered twice (its first delivery
// abandoned after the INTAKE publish, as a crash would) still makes one
// event, as its key is the occurrence's.
func TestRepeatFiresOneEventPerOccurrence(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	deliveries := map[string]int{} // by idempotency key
	hooks := &ingest.Hooks{AfterRepeatSubmit: func(key string) error {
		mu.Lock()
		defer mu.Unlock()
		if deliveries[key]++; deliveries[key] == 1 {
			return errors.New("crash before the ack")
		}
		return nil
	}}
	start := time.Now()
	h := setup(t, repeatsYAML, withHooks(hooks))
	first := h.schedule("acme", "tick")
	if first == nil || first.Header.Get("Nats-Schedule") != "@every 1s" || first.Header.Get("Nats-Schedule-Target") != "tenaz.repeat.fire.acme.tick" {
		t.Fatalf("want the schedule @every 1s onto tenaz.repeat.fire.acme.tick, got %+v", first)
	}
	h.startIngestConfig(h.cfg, hooks) // a second replica, the same config
	if again := h.schedule("acme", "tick"); again.Sequence != first.Sequence {
		t.Fatalf("the second replica rewrote the schedule: sequence %d, then %d", first.Sequence, again.Sequence)
	}
	if n := h.SubjectMsgs(ingest.StreamRepeats, "tenaz.repeat.sched.>"); n != 2 {
		t.Fatalf("want 2 schedules (tick and other), got %d", n)
	}

	shown := natstest.Lazy(func() any { mu.Lock(); defer mu.Unlock(); return fmt.Sprint(deliveries) })
	twice := func() (keys []string, all bool) {
		mu.Lock()
		defer mu.Unlock()
		all = true
		for k, n := range deliveries {
			if n >= 2 {
				keys = append(keys, k)
			}
			all = all && n == 2
		}
		return keys, all
	}
	natstest.Eventually(t, 2*servicetest.WaitFor, func() bool { keys, _ := twice(); return len(keys) >= 6 },
		"want at least 6 occurrences delivered twice, got %v", shown)
	// Cancel both, and let every firing stored so far be submitted: then
	// each occurrence was delivered twice and made one record (nothing
	// else is submitted here).
	st, err := h.JS.Stream(h.Ctx(), ingest.StreamRepeats)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Purge(h.Ctx(), jetstream.WithPurgeSubject("tenaz.repeat.sched.>")); err != nil {
		t.Fatal(err)
	}
	var keys []string
	natstest.Eventually(t, servicetest.WaitFor, func() bool {
		fire := h.ConsumerInfo(ingest.StreamRepeats, "ingest-repeat")
		var all bool
		keys, all = twice()
		return fire.NumPending == 0 && fire.NumAckPending == 0 && h.intakeSettled(h.StreamState(names.StreamIntake).LastSeq) && all
	}, "want every firing submitted, each twice; got %v", shown)
	if n := h.StateMsgs(); n != uint64(len(keys)) {
		t.Fatalf("want one record per occurrence (%d), got %d records for %v", len(keys), n, keys)
	}
	slices.Sort(keys)
	for _, name := range []string{"tick", "other"} {
		occ := h.occurrences("acme", name, start.Add(-time.Second), time.Now())
		if len(occ) < 3 {
			t.Fatalf("%s: want at least 3 occurrences, got %v (keys %v)", name, occ, keys)
		}
		for i := 1; i < len(occ); i++ {
			if occ[i].Sub(occ[i-1]) < time.Second {
				t.Fatalf("%s: occurrences less than the interval apart: %v", name, occ)
			}
		}
		rec, _ := h.Lookup(event.ID("acme", ingest.RepeatKey(name, occ[0])))
		if rec.Kind != "order.create" || rec.EntityID != "r-"+name || string(rec.Payload) != `{"order_id":"r-`+name+`"}` {
			t.Fatalf("%s: want an order.create event of entity r-%s with the repeat's payload, got %+v", name, name, rec)
		}
	}
	if n := h.EventMsgs(); n < uint64(len(keys)) {
		t.Fatalf("want every occurrence's event in EVENTS (%d), got %d", len(keys), n)
	}
}

// The server keeps a repeat across its restart (the stored schedule is
// the one written before, and it goes on firing), and a repeat removed
// from the config is cancelled by the next ingest to start, while the
// repeat still declared goes on.
func TestRepeatSurvivesRestartAndStopsWhenRemoved(t *testing.T) {
	t.Parallel()
	start := time.Now()
	h := setup(t, repeatsYAML)
	count := func(name string) int {
		return len(h.occurrences("acme", name, start.Add(-time.Second), time.Now().Add(time.Second)))
	}
	natstest.Eventually(t, servicetest.WaitFor, func() bool { return count("tick") >= 1 }, "want tick to fire")
	before := h.schedule("acme", "tick")
	stopCtx, cancel := context.WithTimeout(h.Ctx(), 10*time.Second)
	defer cancel()
	if err := h.ing.Stop(stopCtx); err != nil {
		t.Fatalf("stop: %v", err)
	}

	restartServer(t, h)
	if kept := h.schedule("acme", "tick"); kept == nil || kept.Sequence != before.Sequence {
		t.Fatalf("after the restart: want the schedule of sequence %d, got %+v", before.Sequence, kept)
	}
	h.startIngestConfig(h.cfg, nil)
	if kept := h.schedule("acme", "tick"); kept.Sequence != before.Sequence {
		t.Fatalf("ingest rewrote an unchanged schedule: sequence %d, then %d", before.Sequence, kept.Sequence)
	}
	n := count("tick")
	natstest.Eventually(t, servicetest.WaitFor, func() bool { return count("tick") >= n+2 }, "want tick to fire again after the restart")

	// The config without tick: the next ingest to start cancels it.
	without := h.config(strings.Replace(repeatsYAML, "      tick:  {kind: order.create, every: 1s, payload: {order_id: r-tick}}\n", "", 1))
	h.startIngestConfig(without, nil)
	if s := h.schedule("acme", "tick"); s != nil {
		t.Fatalf("tick removed from the config: want its schedule gone, got %+v", s)
	}
	if h.schedule("acme", "other") == nil {
		t.Fatal("other is still declared: want its schedule kept")
	}
	// A firing stored before the purge is still submitted: let other fire
	// once, then three more times, and tick not at all meanwhile.
	o := count("other")
	natstest.Eventually(t, servicetest.WaitFor, func() bool { return count("other") >= o+1 }, "want other to go on firing")
	ticks, o := count("tick"), count("other")
	natstest.Eventually(t, servicetest.WaitFor, func() bool { return count("other") >= o+3 }, "want other to go on firing")
	if got := count("tick"); got != ticks {
		t.Fatalf("tick was removed: want no more events than %d, got %d", ticks, got)
	}
}

// restartServer stops the test's nats-server and starts it again on the
// same address and store.
func restartServer(t *testing.T, h *harness) {
	t.Helper()
	addr := strings.TrimPrefix(h.Srv.ClientURL(), "nats://")
	h.Srv.Stop()
	natstest.Start(t, natstest.StoreDir(h.Srv.Dir), natstest.Listen(addr))
}

// A cron repeat is read in its time zone by the server: one set to fire
// at a second a few seconds from now, written as Kolkata's (UTC+05:30)
// hour and minute, fires then, and not five and a half hours later; its
// event's key is that occurrence, and the API then shows tomorrow's.
func TestRepeatCronInTimeZone(t *testing.T) {
	t.Parallel()
	h := setup(t, baseYAML)
	kolkata, err := time.LoadLocation("Asia/Kolkata")
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(3 * time.Second).Truncate(time.Second).In(kolkata)
	cron := fmt.Sprintf("%d %d %d * * *", at.Second(), at.Minute(), at.Hour())
	cfg := h.config(baseYAML + `
accounts:
  acme:
    repeats:
      daily: {kind: order.create, cron: "` + cron + `", timezone: Asia/Kolkata, payload: {order_id: r-daily}}
`)
	h.startIngestConfig(cfg, nil)
	if tz := h.schedule("acme", "daily").Header.Get("Nats-Schedule-Time-Zone"); tz != "Asia/Kolkata" {
		t.Fatalf("want the schedule in Asia/Kolkata, got %q", tz)
	}
	id := event.ID("acme", ingest.RepeatKey("daily", at))
	natstest.Eventually(t, servicetest.WaitFor, func() bool { _, ok := h.Lookup(id); return ok },
		"want the event of the occurrence %s (key %s)", at, ingest.RepeatKey("daily", at))
	var list ingest.RepeatsReply
	h.do(http.MethodGet, "/v1/repeats?account=acme", "").json(t, &list)
	tomorrow := at.AddDate(0, 0, 1)
	if len(list.Repeats) != 1 || list.Repeats[0].Next == nil || !list.Repeats[0].Next.Equal(tomorrow) ||
		list.Repeats[0].NextLocal != tomorrow.Format(time.RFC3339) || list.Repeats[0].NextKey != ingest.RepeatKey("daily", tomorrow) {
		t.Fatalf("want the next occurrence %s (%s), got %+v", tomorrow.UTC(), tomorrow.Format(time.RFC3339), list.Repeats)
	}
}

// The repeats' API, operators only, checked against the OpenAPI document:
// list, make (fires like a declared one, records who made it), replace
// only when it differs, refuse a bad repeat naming the field and a
// declared one (409), delete (it fires no more), the same over NATS; 503
// with the NATS server gone.
func TestRepeatAPI(t *testing.T) {
	t.Parallel()
	yaml := authYAML + `
accounts:
  acme:
    repeats:
      declared: {kind: order.create, every: 1h, payload: {order_id: r-d}}
`
	start := time.Now()
	h := setup(t, yaml, withAuth())
	base := secureAPI(t, h, nil)
	c := apitest.New(t)
	client := c.Client()
	t.Cleanup(client.CloseIdleConnections)
	send := func(method, path, key, body string) response {
		t.Helper()
		r := servicetest.Send(t, h.Ctx(), client, method, base+path, key, body)
		return response{Status: r.Status, Body: r.Body}
	}
	want := func(r response, status int, what string) response {
		t.Helper()
		if r.Status != status {
			t.Fatalf("%s: want %d, got %d %s", what, status, r.Status, r.Body)
		}
		return r
	}
	pulse := `{"kind":"order.create","every":"1s","payload":{"order_id":"r-p"}}`

	var list ingest.RepeatsReply
	want(send("GET", "/v1/repeats", keyAlice, ""), 200, "the list").json(t, &list)
	if len(list.Repeats) != 1 || list.Repeats[0].Name != "declared" || list.Repeats[0].Origin != "config" || list.Repeats[0].Every != "1h" {
		t.Fatalf("want the declared repeat, from the config, got %+v", list.Repeats)
	}
	want(send("GET", "/v1/repeats", "", ""), 401, "no credential")
	want(send("GET", "/v1/repeats", keyAcmeOps, ""), 403, "an API key")
	want(send("GET", "/v1/repeats?account=a.b", keyAlice, ""), 400, "no account name")
	want(send("GET", "/v1/repeats?acount=acme", keyAlice, ""), 400, "a parameter misspelt")
	want(send("GET", "/v1/repeats?account=acme&account=globex", keyAlice, ""), 400, "a parameter given twice")
	want(send("PUT", "/v1/repeats/acme/pulse", keyAcmeOps, pulse), 403, "an API key")
	want(send("PUT", "/v1/repeats/acme/pulse", "", pulse), 401, "no credential")
	want(send("DELETE", "/v1/repeats/acme/declared", "", ""), 401, "no credential")
	want(send("DELETE", "/v1/repeats/acme/declared", keyAcmeOps, ""), 403, "an API key")

	big := `{"kind":"order.create","every":"1s","payload":{"order_id":"` + strings.Repeat("x", 2<<20) + `"}}`
	if r := want(send("PUT", "/v1/repeats/acme/big", keyAlice, big), 413, "a body over the limit"); !strings.Contains(string(r.Body), "too_large") {
		t.Fatalf("a body over the limit: want too_large, got %s", r.Body)
	}

	var v ingest.RepeatView
	want(send("PUT", "/v1/repeats/acme/pulse", keyAlice, pulse), 200, "a new repeat").json(t, &v)
	if v.Origin != "api" || v.By != "operator:alice" || v.Every != "1s" || string(v.Payload) != `{"order_id":"r-p"}` {
		t.Fatalf("want the repeat made by operator:alice, got %+v", v)
	}
	seq := h.schedule("acme", "pulse").Sequence
	natstest.Eventually(t, servicetest.WaitFor, func() bool { return len(h.occurrences("acme", "pulse", start, time.Now())) >= 1 }, "want pulse to fire")
	want(send("PUT", "/v1/repeats/acme/pulse", keyAlice, pulse), 200, "the same repeat again")
	if again := h.schedule("acme", "pulse").Sequence; again != seq {
		t.Fatalf("the same repeat again: want no write, got sequence %d after %d", again, seq)
	}
	r := want(send("PUT", "/v1/repeats/acme/bad", keyAlice, `{"kind":"order.create","cron":"0 61 * * * *"}`), 400, "a bad cron")
	if r.errorCode(t) != "invalid_repeat" || !strings.Contains(string(r.Body), "accounts.acme.repeats.bad.cron") {
		t.Fatalf("a bad cron: want invalid_repeat naming accounts.acme.repeats.bad.cron, got %s", r.Body)
	}
	want(send("PUT", "/v1/repeats/acme/bad", keyAlice, `{"kind":"order.create","every":"1s","actor":"x"}`), 400, "an unknown field")
	for _, method := range []string{"PUT", "DELETE"} {
		if r := want(send(method, "/v1/repeats/acme/declared", keyAlice, pulse), 409, method+" of a declared repeat"); r.errorCode(t) != "declared_in_config" {
			t.Fatalf("%s of a declared repeat: want declared_in_config, got %s", method, r.Body)
		}
	}
	want(send("DELETE", "/v1/repeats/acme/pulse", keyAlice, ""), 200, "delete")
	if s := h.schedule("acme", "pulse"); s != nil {
		t.Fatalf("deleted: want the schedule gone, got %+v", s)
	}
	want(send("DELETE", "/v1/repeats/acme/pulse", keyAlice, ""), 404, "delete again")

	// Over NATS: the same endpoints, the operator's credential required.
	natsCall := func(endpoint, key, data string) (string, []byte) {
		t.Helper()
		m := nats.NewMsg("tenaz.api.ingest." + endpoint)
		m.Data = []byte(data)
		if key != "" {
			m.Header.Set("Authorization", "Bearer "+key)
		}
		ans, err := h.NC.RequestMsg(m, 5*time.Second)
		if err != nil {
			t.Fatalf("%s: want an answer, got %v", endpoint, err)
		}
		return ans.Header.Get("Tenaz-Status"), ans.Data
	}
	if st, b := natsCall("repeat-set", keyAcmeOps, `{"account":"acme","name":"n1","kind":"order.create","every":"1h"}`); st != "403" {
		t.Fatalf("repeat-set with an API key: want 403, got %s %s", st, b)
	}
	if st, b := natsCall("repeat-set", keyAlice, `{"account":"acme","name":"n1","kind":"order.create","every":"1h"}`); st != "200" {
		t.Fatalf("repeat-set: want 200, got %s %s", st, b)
	}
	st, b := natsCall("repeats", keyAlice, `{"account":"acme"}`)
	if err := json.Unmarshal(b, &list); st != "200" || err != nil || len(list.Repeats) != 2 || list.Repeats[1].Name != "n1" || list.Repeats[1].By != "operator:alice" {
		t.Fatalf("repeats: want declared and n1, got %s %s (%v)", st, b, err)
	}
	if st, b := natsCall("repeat-delete", keyAlice, `{"account":"acme","name":"n1"}`); st != "200" || h.schedule("acme", "n1") != nil {
		t.Fatalf("repeat-delete: want 200 and the schedule gone, got %s %s", st, b)
	}
	if st, _ := natsCall("repeats", "", ""); st != "401" {
		t.Fatalf("repeats without a credential: want 401, got %s", st)
	}

	h.Srv.Stop()
	var wg sync.WaitGroup
	for _, r := range []struct{ method, path, body string }{
		{"GET", "/v1/repeats", ""}, {"PUT", "/v1/repeats/acme/pulse", pulse}, {"DELETE", "/v1/repeats/acme/pulse", ""},
	} {
		wg.Go(func() {
			if got := send(r.method, r.path, keyAlice, r.body); got.Status != 503 {
				t.Errorf("%s %s with NATS down: want 503, got %d %s", r.method, r.path, got.Status, got.Body)
			}
		})
	}
	wg.Wait()
	c.Covered(t, apitest.Under("/v1/repeats"), nil)
}

// An occurrence's key is known in advance (repeat/<name>/<time>), so a
// submission under it would take the occurrence's event before its
// repeat fires, with another time, entity or lane. HTTP and micro refuse
// such keys with 400; the occurrence still fires as its repeat says.
func TestARepeatsKeyIsNotASubmissionsKey(t *testing.T) {
	t.Parallel()
	h := setup(t, baseYAML)
	key := ingest.RepeatKey("pulse", time.Now().Add(time.Hour).Truncate(time.Hour))
	r := h.do(http.MethodPost, "/v1/events", `{"account":"acme","kind":"order.create","not_before":"2030-01-01T00:00:00Z","payload":{"order_id":"x"}}`, "Idempotency-Key", key)
	if r.Status != http.StatusBadRequest || !strings.Contains(string(r.Body), "repeats' occurrences' own") {
		t.Fatalf("a submission under an occurrence's key: want 400 saying the key is a repeat's, got %d %s", r.Status, r.Body)
	}
	if n := h.StreamState(names.StreamIntake).Msgs; n != 0 {
		t.Fatalf("want nothing in INTAKE, got %d", n)
	}
}

// A repeat set again while an operator deletes it (between the delete's
// read and its purge) stands: the delete purges only the version it read
// and answers 409 repeat_changed. It purged the whole schedule, the new
// one too, which its PUT had answered 200.
func TestARepeatSetWhileItIsDeletedStands(t *testing.T) {
	t.Parallel()
	var once sync.Once
	var meanwhile func()
	h := setup(t, baseYAML, withHooks(&ingest.Hooks{BeforeRepeatPurge: func(string, string) { once.Do(meanwhile) }}))
	send := func(method, path, body string) response {
		t.Helper()
		return h.do(method, path, body)
	}
	if r := send("PUT", "/v1/repeats/acme/pulse", `{"kind":"order.create","every":"1h","payload":{"order_id":"r-1"}}`); r.Status != 200 {
		t.Fatalf("PUT: want 200, got %d %s", r.Status, r.Body)
	}
	meanwhile = func() {
		if r := send("PUT", "/v1/repeats/acme/pulse", `{"kind":"order.create","every":"2h","payload":{"order_id":"r-2"}}`); r.Status != 200 {
			t.Errorf("PUT meanwhile: want 200, got %d %s", r.Status, r.Body)
		}
	}
	r := send("DELETE", "/v1/repeats/acme/pulse", "")
	if r.Status != http.StatusConflict || !strings.Contains(string(r.Body), "repeat_changed") {
		t.Fatalf("DELETE of a repeat set again meanwhile: want 409 repeat_changed, got %d %s", r.Status, r.Body)
	}
	m := h.schedule("acme", "pulse")
	if m == nil || !strings.Contains(string(m.Data), "r-2") {
		t.Fatalf("want the repeat set meanwhile to stand, got %v", m)
	}
}
