package dispatcher_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/services/dispatcher"
)

// EVENTS is trimmed account by account, below the account's lowest
// unsettled message: a settled message leaves the stream (here within
// streams.trim_after of 100ms), and no message leaves before it is
// settled, nor any of its account's above it. Two accounts of one
// partition: one's events go through, the other's first event is held in
// its run (as a slow call would be) while its later ones finish.
func TestEventsTrimmedToEachAccountsFloor(t *testing.T) {
	t.Parallel()
	h := setup(t, strings.Replace(yamlFor(4, `attempts: 3`), "streams: {ack_wait: 1s}", "streams: {ack_wait: 1s, trim_after: 100ms}", 1), provider.Faults{})
	fast, slow := "fast", ""
	for i := 0; slow == ""; i++ {
		if a := fmt.Sprintf("slow%d", i); h.Subj.PartitionOf(a) == h.Subj.PartitionOf(fast) {
			slow = a
		}
	}
	release := make(chan struct{})
	held := h.Submit(slow, "order.create", []string{"held"}, orderPayload)[0]
	h.dispatcher("d1", &dispatcher.Hooks{AfterClaim: func(id string, _ int) error {
		if id == held {
			<-release
		}
		return nil
	}})
	stream := h.Subj.EventsStream(fast)
	inStream := func(account string) uint64 { return h.SubjectMsgs(stream, h.Subj.EventsOf(account)) }

	natstest.Eventually(t, servicetest.WaitFor, func() bool { return h.Record(held).Status == state.Running }, "the held event to be claimed")
	later := h.Submit(slow, "order.create", keys("later", 5), orderPayload)
	ids := h.Submit(fast, "order.create", keys("f", 20), orderPayload)
	h.waitAll(append(ids, later...), state.Done, servicetest.WaitFor)
	natstest.Eventually(t, servicetest.WaitFor, func() bool { return inStream(fast) == 0 }, "the settled account's messages to be trimmed")
	if n := inStream(slow); n != 6 {
		t.Fatalf("the account with a run in flight: want its 6 messages kept (the floor is below the held one), got %d", n)
	}

	close(release)
	h.waitAll([]string{held}, state.Done, servicetest.WaitFor)
	natstest.Eventually(t, servicetest.WaitFor, func() bool { return inStream(slow) == 0 }, "the account's messages to be trimmed once its run is settled")
	if d := h.prov.DuplicateEffects(); len(d) != 0 {
		t.Fatalf("effects applied more than once: %v", d)
	}
}
