package dispatcher_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/dead"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/state"
)

// An event whose stored record does not decode (put by hand with `nats kv
// put`, or by another version) ends dead, seen, with its payload: its
// record is made again from its message, its target is not called. Before,
// the dispatcher handed the message back every 2 s for ever, logging
// "store unavailable", and no list showed the event.
func TestUndecodableRecordEndsDeadWithItsPayload(t *testing.T) {
	t.Parallel()
	yaml := `
targets:
  erp: {url: "${TARGET}/api/{{.Kind}}", timeout: 5s}
kinds:
  order.create: {target: erp}
`
	h := setup(t, yaml, provider.Faults{})
	ids := h.Submit("acme", "order.create", []string{"bad", "good"}, orderPayload)
	h.WaitStatus(ids[0], state.Pending, 10*time.Second)
	kv, err := h.JS.KeyValue(h.Ctx(), h.St.Bucket("acme", ids[0]))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(h.Ctx(), ids[0], []byte(`{"id": "`+ids[0]+`", "status": 17`)); err != nil {
		t.Fatal(err)
	}
	h.dispatcher("d1", nil)

	h.WaitStatus(ids[1], state.Done, 10*time.Second)
	// Until the dispatcher reaches it, the record does not decode.
	var rec state.Record
	natstest.Eventually(t, 10*time.Second, func() bool {
		r, _, err := h.St.Get(h.Ctx(), "acme", ids[0])
		rec = r
		return err == nil && r.Status == state.Dead
	}, "want the event dead, got %v", natstest.Lazy(func() any { return rec.Status }))
	last := rec.History[len(rec.History)-1]
	if rec.History[0].Action != state.Accept || !strings.HasPrefix(last.Detail, dead.ReasonUndecodable+": ") || !strings.Contains(last.Detail, "does not decode") {
		t.Fatalf("want the record made again, accepted then dead with reason %s, got %+v", dead.ReasonUndecodable, rec.History)
	}
	if string(rec.Payload) != orderPayload("bad") {
		t.Fatalf("want the payload from the event's message, got %s", rec.Payload)
	}
	if n := h.DeadKept("acme"); n != 1 {
		t.Fatalf("want its entry in DEAD, got %d entries", n)
	}
	h.quiesce()
	if c := h.calls("bad"); len(c) != 0 {
		t.Fatalf("want no call for the event whose record does not decode, got %d", len(c))
	}
}

// An undecodable message is kept in DEAD as its account's, once for each
// partition's: each partition's stream numbers its messages from 1, and
// its entry's message id carried only that number, so a second account's
// message, in another partition, was taken for a re-send of the first
// one's and lost, terminated without an entry.
func TestUndecodableMessagesOfTwoPartitionsAreBothKept(t *testing.T) {
	t.Parallel()
	h := setup(t, `
targets:
  erp: {url: "${TARGET}/api/{{.Kind}}", timeout: 5s}
kinds:
  order.create: {target: erp}
`, provider.Faults{})
	accts := []string{"acme"}
	for i := 0; len(accts) < 2; i++ {
		if a := fmt.Sprintf("other%d", i); h.Subj.PartitionOf(a) != h.Subj.PartitionOf("acme") {
			accts = append(accts, a)
		}
	}
	for _, a := range accts {
		subj, err := h.Subj.Event(a, "order.create")
		if err != nil {
			t.Fatal(err)
		}
		ack, err := h.JS.Publish(h.Ctx(), subj, []byte("{not an event"))
		if err != nil {
			t.Fatal(err)
		}
		if ack.Sequence != 1 {
			t.Fatalf("want the first message of %s's partition, got sequence %d", a, ack.Sequence)
		}
	}
	h.dispatcher("d1", nil)
	for _, a := range accts {
		natstest.Eventually(t, 10*time.Second, func() bool { return h.DeadKept(a) == 1 },
			"want %s's undecodable message kept in DEAD as its own", a)
	}
	h.quiesce()
	if n := h.prov.CallCount(); n != 0 {
		t.Fatalf("want no call for undecodable messages, got %d", n)
	}
}
