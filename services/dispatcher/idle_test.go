package dispatcher_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/services/dispatcher"
)

// An idle account's reader is retired (so many quiet accounts cost
// nothing), its settled messages trimmed first, and its next event still
// gets delivered: the watch starts a reader again.
func TestIdleAccountRetiredAndRevived(t *testing.T) {
	t.Parallel()
	h := setup(t, yamlFor(4, `attempts: 3`), provider.Faults{})
	nc, _ := h.Srv.Conn(t)
	d, err := dispatcher.New(dispatcher.Options{Conn: nc, Config: h.cfg, Instance: "d1", IdleAfter: 500 * time.Millisecond, Relist: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(h.Ctx()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Stop(h.Ctx()) })

	for i := range 3 {
		ids := h.Submit("acme", "order.create", []string{fmt.Sprintf("i-%d", i)}, orderPayload)
		h.waitAll(ids, state.Done, servicetest.WaitFor)
		natstest.Eventually(t, servicetest.WaitFor, func() bool { return len(d.Accounts()) == 0 }, "idle reader to be retired")
		natstest.Eventually(t, servicetest.WaitFor, func() bool { return d.Owner("acme") == "" }, "idle account's lease to be released")
		// Trimmed when retired: the next reader does not read it again.
		if n := h.SubjectMsgs(h.Subj.EventsStream("acme"), h.Subj.EventsOf("acme")); n != 0 {
			t.Fatalf("a retired account's settled messages: want none left in EVENTS, got %d", n)
		}
	}
	if d := h.prov.DuplicateEffects(); len(d) != 0 {
		t.Fatalf("effects applied more than once: %v", d)
	}
	if n := h.prov.CallCount(); n != 3 {
		t.Fatalf("want 3 calls, got %d", n)
	}
}
