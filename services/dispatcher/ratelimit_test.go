package dispatcher_test

import (
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/state"
)

// An account's rate limit spaces its calls, and only its own: another
// account's events are done before the limited account is halfway.
func TestAccountRateLimitIsolated(t *testing.T) {
	t.Parallel()
	yaml := `
accounts:
  "*": {concurrency: 8}
  slow: {rate: 10/s}
targets:
  erp: {url: "${TARGET}/api/{{.Kind}}", timeout: 5s}
kinds:
  order.create: {target: erp, entity: order_id}
`
	h := setup(t, yaml, provider.Faults{})
	h.dispatcher("d1", nil)
	submit := func(account string, n int) []string {
		var ids []string
		for i := range n {
			key := fmt.Sprintf("%s-%d", account, i)
			m := nats.NewMsg("tenaz.intake." + account + ".order.create")
			m.Data = []byte(fmt.Sprintf(`{"order_id":%q}`, key))
			m.Header.Set(names.HeaderIdempotencyKey, key)
			if _, err := h.JS.PublishMsg(h.Ctx(), m, jetstream.WithExpectStream(names.StreamIntake)); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, event.ID(account, key))
		}
		return ids
	}
	start := time.Now()
	slow := submit("slow", 20)
	fast := submit("fast", 20)
	h.waitAll(fast, state.Done, 20*time.Second)
	fastDone := time.Since(start)
	h.waitAll(slow, state.Done, 20*time.Second)

	var at []time.Time
	for _, c := range h.prov.Calls() {
		if slices.Contains(slow, c.EventID) {
			at = append(at, c.At)
		}
	}
	sort.Slice(at, func(i, j int) bool { return at[i].Before(at[j]) })
	if len(at) != 20 {
		t.Fatalf("want 20 calls for the limited account, got %d", len(at))
	}
	if span := at[len(at)-1].Sub(at[0]); span < 1700*time.Millisecond {
		t.Fatalf("20 calls at 10/s must span at least ~1.9s; they spanned %s", span)
	}
	if slowSpan := at[len(at)-1].Sub(start); fastDone > slowSpan/2 {
		t.Fatalf("the unlimited account took %s, more than half of the limited one's %s: it was slowed down", fastDone, slowSpan)
	}
}
