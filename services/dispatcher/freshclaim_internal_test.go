package dispatcher

import (
	"errors"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/queue"
	"github.com/tenaz/tenaz/pkg/state"
)

// A fired schedule of a just-accepted delayed event is claimed without a
// read: due, then claim, on the record ingest created. Before its time
// (a stale copy), the full path must decide.
func TestFreshClaimOfDelayedEvent(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	due := now.Add(-200 * time.Millisecond)
	env := event.Envelope{ID: event.ID("acme", "k1"), Account: "acme", Kind: "order.create", IdempotencyKey: "k1",
		CreatedAt: now.Add(-time.Hour), NotBefore: &due, Payload: []byte(`{}`)}
	r, err := freshClaim(queue.Initial(env), 42, "d1", now)
	if err != nil {
		t.Fatalf("due event: want a claim, got %v", err)
	}
	if r.Status != state.Running || r.RunSeq != 42 || r.Attempts != 1 {
		t.Fatalf("want running, seq 42, attempt 1; got %s %d %d", r.Status, r.RunSeq, r.Attempts)
	}
	if n := len(r.History); n != 3 || r.History[1].Action != state.Due || r.History[2].Action != state.Claim {
		t.Fatalf("history: want delay, due, claim; got %+v", r.History)
	}
	early := now.Add(time.Minute)
	env.NotBefore = &early
	if _, err := freshClaim(queue.Initial(env), 43, "d1", now); !errors.Is(err, errNotDue) {
		t.Fatalf("not due: want errNotDue, got %v", err)
	}
	env.NotBefore = nil
	if r, err := freshClaim(queue.Initial(env), 44, "d1", now); err != nil || r.Status != state.Running {
		t.Fatalf("pending event: want running, got %v %v", r.Status, err)
	}
}
