package ingest_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/tenaz"
)

// tenaz-ingest answers get on NATS with the record, and answers pings.
func TestMicroService(t *testing.T) {
	t.Parallel()
	h := setup(t, baseYAML)
	r := h.do(http.MethodPost, "/v1/events", `{"account":"acme","kind":"order.create","payload":{"order_id":"o-m"}}`, "Idempotency-Key", "micro-1")
	if r.Status != http.StatusAccepted {
		t.Fatalf("POST: want 202, got %d %s", r.Status, r.Body)
	}
	id := event.ID("acme", "micro-1")

	m, err := h.nc.Request("tenaz.api.ingest.get", []byte(id), 5*time.Second)
	if err != nil {
		t.Fatalf("tenaz.api.ingest.get: want an answer, got %v", err)
	}
	if got := m.Header.Get("Tenaz-Status"); got != "200" {
		t.Fatalf("get: want Tenaz-Status 200, got %q (%s)", got, m.Data)
	}
	var v view
	if err := json.Unmarshal(m.Data, &v); err != nil {
		t.Fatalf("get: want JSON, got %q", m.Data)
	}
	if v.ID != id || v.Status != tenaz.StatePending || v.IdempotencyKey != "micro-1" {
		t.Fatalf("get: want {id %s, status pending, idempotency_key micro-1}, got %s", id, m.Data)
	}

	m, err = h.nc.Request("tenaz.api.ingest.get", []byte(event.ID("acme", "unknown")), 5*time.Second)
	if err != nil {
		t.Fatalf("get unknown: want an answer, got %v", err)
	}
	if got := m.Header.Get("Tenaz-Status"); got != "404" {
		t.Fatalf("get unknown: want Tenaz-Status 404, got %q (%s)", got, m.Data)
	}

	m, err = h.nc.Request("$SRV.PING.tenaz-ingest", nil, 5*time.Second)
	if err != nil {
		t.Fatalf("$SRV.PING.tenaz-ingest: want an answer, got %v", err)
	}
	var ping struct{ Name, Type, ID, Version string }
	if err := json.Unmarshal(m.Data, &ping); err != nil || ping.Name != "tenaz-ingest" || ping.Type != "io.nats.micro.v1.ping_response" || ping.ID == "" {
		t.Fatalf("ping: want {name tenaz-ingest, type io.nats.micro.v1.ping_response, id}, got %s (%v)", m.Data, err)
	}
}

// tenaz.api.ingest.cancel cancels as DELETE does, recording the actor and
// reason it is given; it answers 409 for an event that cannot be cancelled
// and 404 for an unknown one.
func TestMicroCancel(t *testing.T) {
	t.Parallel()
	h := setup(t, baseYAML)
	r := h.do(http.MethodPost, "/v1/events", `{"account":"acme","kind":"order.create","payload":{"order_id":"o-mc"}}`, "Idempotency-Key", "micro-cancel-1")
	if r.Status != http.StatusAccepted {
		t.Fatalf("POST: want 202, got %d %s", r.Status, r.Body)
	}
	id := event.ID("acme", "micro-cancel-1")
	req := `{"id":"` + id + `","actor":"operator:alice","reason":"customer withdrew"}`

	m, err := h.nc.Request("tenaz.api.ingest.cancel", []byte(req), 5*time.Second)
	if err != nil {
		t.Fatalf("tenaz.api.ingest.cancel: want an answer, got %v", err)
	}
	if got := m.Header.Get("Tenaz-Status"); got != "200" {
		t.Fatalf("cancel: want Tenaz-Status 200, got %q (%s)", got, m.Data)
	}
	var v view
	if err := json.Unmarshal(m.Data, &v); err != nil || v.ID != id || v.Status != tenaz.StateCancelled {
		t.Fatalf("cancel: want {id %s, status cancelled}, got %s (%v)", id, m.Data, err)
	}
	rec, _ := h.record(id)
	last := rec.History[len(rec.History)-1]
	if last.Action != state.Cancel || last.Actor != "operator:alice" || last.Detail != "customer withdrew" {
		t.Fatalf("history: want the last entry {cancel, operator:alice, customer withdrew}, got %+v", last)
	}

	for _, c := range []struct {
		name, data, status, code string
	}{
		{"again", req, "409", "not_cancellable"},
		{"bare unknown id", "ev_00000000000000000000000000", "404", "not_found"},
		{"malformed", `{"id":`, "400", "malformed"},
	} {
		m, err := h.nc.Request("tenaz.api.ingest.cancel", []byte(c.data), 5*time.Second)
		if err != nil {
			t.Fatalf("cancel %s: want an answer, got %v", c.name, err)
		}
		var e struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		_ = json.Unmarshal(m.Data, &e)
		if got := m.Header.Get("Tenaz-Status"); got != c.status || e.Error.Code != c.code || e.Error.Message == "" {
			t.Fatalf("cancel %s: want Tenaz-Status %s and code %s with a message, got %q %s", c.name, c.status, c.code, got, m.Data)
		}
	}
}
