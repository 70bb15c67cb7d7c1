package dispatcher_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/services/dispatcher"
)

// A start that fails on a server call (as while EVENTS or the account's
// consumer changes leader) is tried again, soon: the account is known,
// so the adoption sweep passes it by, and nothing else would start its
// reader before the next relist (an hour here). The first three starts
// fail; the events are still delivered within seconds, each once.
func TestFailedStartTriedAgain(t *testing.T) {
	t.Parallel()
	h := setup(t, yamlFor(4, `attempts: 3`), provider.Faults{})
	var starts atomic.Int32
	h.dispatcher("d1", &dispatcher.Hooks{BeforeStart: func(account string) error {
		if starts.Add(1) <= 3 {
			return errors.New("a server call failed")
		}
		return nil
	}}, func(o *dispatcher.Options) { o.Relist = time.Hour })
	ids := h.Submit("acme", "order.create", keys("s", 5), orderPayload)
	h.waitAll(ids, state.Done, servicetest.WaitFor)
	if n := starts.Load(); n != 4 {
		t.Fatalf("starts of acme's reader: want 4 (3 failed, then 1), got %d", n)
	}
	if d := h.prov.DuplicateEffects(); len(d) != 0 {
		t.Fatalf("effects applied more than once: %v", d)
	}
}
