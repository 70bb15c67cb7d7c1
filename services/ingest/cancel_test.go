package ingest_test

import (
	"net/http"
	"testing"

	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
)

// DELETE cancels a pending event (200, cancelled), refuses a second time
// (409), and a dispatcher started afterwards drops the event's message
// without calling the target. Without authentication the history says
// anonymous, whatever the request claims.
func TestCancelPendingEvent(t *testing.T) {
	t.Parallel()
	h := setup(t, baseYAML)
	r := h.do(http.MethodPost, "/v1/events", `{"account":"acme","kind":"order.create","payload":{"order_id":"o-c"}}`, "Idempotency-Key", "cancel-1")
	if r.Status != http.StatusAccepted {
		t.Fatalf("POST: want 202, got %d %s", r.Status, r.Body)
	}
	var v view
	r.json(t, &v)

	r = h.do(http.MethodDelete, "/v1/events/"+v.ID, "", "X-Tenaz-Actor", "mallory")
	if r.Status != http.StatusOK {
		t.Fatalf("DELETE pending: want 200, got %d %s", r.Status, r.Body)
	}
	var c view
	r.json(t, &c)
	if c.ID != v.ID || c.Status != state.Cancelled {
		t.Fatalf("DELETE pending: want {id %s, status cancelled}, got %s", v.ID, r.Body)
	}
	r = h.do(http.MethodDelete, "/v1/events/"+v.ID, "")
	if r.Status != http.StatusConflict {
		t.Fatalf("DELETE cancelled: want 409, got %d %s", r.Status, r.Body)
	}
	if code := r.errorCode(t); code != "not_cancellable" {
		t.Fatalf("DELETE cancelled: want code not_cancellable, got %q", code)
	}
	if r = h.do(http.MethodDelete, "/v1/events/ev_00000000000000000000000000", ""); r.Status != http.StatusNotFound {
		t.Fatalf("DELETE unknown: want 404, got %d %s", r.Status, r.Body)
	}

	// The event's message is still queued; a dispatcher must drop it.
	if n := h.SubjectMsgs(h.Subj.EventsStream("acme"), h.Subj.EventsOf("acme")); n != 1 {
		t.Fatalf("acme's messages in EVENTS: want the event's message still queued, got %d", n)
	}
	h.startDispatcher("d1")
	// Its owner trims the account only below its lowest unsettled
	// message: gone means settled.
	natstest.Eventually(t, servicetest.WaitFor, func() bool {
		return h.SubjectMsgs(h.Subj.EventsStream("acme"), h.Subj.EventsOf("acme")) == 0
	}, "the dispatcher did not settle the cancelled event's message")
	if n := h.arrived.Load(); n != 0 {
		t.Fatalf("provider: want no call for a cancelled event, got %d: %+v", n, h.prov.Calls())
	}
	rec, _ := h.Lookup(v.ID)
	if rec.Status != state.Cancelled || rec.Attempts != 0 {
		t.Fatalf("record: want cancelled with 0 attempts, got %s with %d", rec.Status, rec.Attempts)
	}
	last := rec.History[len(rec.History)-1]
	if last.Action != state.Cancel || last.From != state.Pending || last.Actor != "api:anonymous" {
		t.Fatalf("history: want the last entry {cancel, from pending, actor api:anonymous}, got %+v", last)
	}
}
